"""Reading a dataset where it lies in a bucket (a real S3 server, SeaweedFS): the local build's batches, exactly.

One MRI dataset (three shards per split) is built locally, as TFRecord and as ArrayRecord, and pushed to
the bucket. `vidvol.load` then streams it by ranged GETs (no shard on local disk), through the bounded
shard cache, and across a checkpoint between bucket and local reads; the random-access readers take
their split into the cache; `verify` checks the bucket's own bytes. Faults come from `fault_proxy`, a
small proxy in front of the same server: injected 5xx and throttling are retried, a client killed
mid-upload leaves no object under the final name.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time

import nibabel as nib
import numpy as np
import pytest
import tensorflow as tf

import vidvol
from vidvol.beam_jobs import build
from vidvol.core import dataset_copy, store
from vidvol.readers import bucket
from vidvol.readers.tfdata import shard_window
from vidvol.testing import samples
from fault_proxy import FaultProxy
from in_process_build import build as in_process_build
from services import SeaweedS3

pytestmark = pytest.mark.slow

BUCKET = "vidvol-reads"
NAME = "mri_volumes/small_32"
VERSION = "mri_volumes/small_32/2.0.0"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(server, root): the MRI dataset built into root/local (TFRecord) and root/local_ar, pushed to the bucket."""
    root = tmp_path_factory.mktemp("bucket-reads")
    samples.write_mri_volumes(str(root / "mri"), num_subjects=9, shape=(12, 14, 10))
    with SeaweedS3(buckets=(BUCKET,)) as server, pytest.MonkeyPatch.context() as mp:
        for key, value in server.env().items():
            mp.setenv(key, value)
        mp.setenv("VIDVOL_STAGING_DIR", str(root / "staging"))
        build.build(NAME, manual_dir=str(root / "mri"), data_dir=str(root / "local"), num_shards=3)
        build.build(NAME, manual_dir=str(root / "mri"), data_dir=str(root / "local_ar"), num_shards=3,
                    file_format="array_record")
        dataset_copy.push(str(root / "local" / VERSION), f"s3://{BUCKET}/tf/{VERSION}")
        dataset_copy.push(str(root / "local_ar" / VERSION), f"s3://{BUCKET}/ar/{VERSION}")
        yield server, root


@pytest.fixture
def env(world, monkeypatch, tmp_path):
    """The server's credentials in AWS_*; a fresh reader cache under tmp_path/cache."""
    server, _ = world
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("VIDVOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(bucket.CACHE_LIMIT_ENV, raising=False)
    return server


def _batches(data_dir, **kwargs) -> list[tuple[np.ndarray, ...]]:
    ds = vidvol.load(NAME, kwargs.pop("split", "train"), 2, data_dir=data_dir, repeat=False, **kwargs)
    return [tuple(np.asarray(t) for t in b) for b in ds]


def _assert_equal(want, got) -> None:
    assert len(got) == len(want) > 0
    for a, b in zip(want, got):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def _shards_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and (".tfrecord-" in p.name or ".array_record-" in p.name)
                  and not p.name.startswith(".") and ".index" not in p.parts)


def _push_with_a_flipped_byte(version: pathlib.Path, url: str) -> str:
    """A copy of the dataset `version` pushed to `url` with one byte in the middle of its first train shard flipped;
    that shard's file name."""
    shard = sorted(p.name for p in version.glob("*train.tfrecord-*"))[0]
    data = bytearray((version / shard).read_bytes())
    data[len(data) // 2] ^= 0xFF
    dataset_copy.push(str(version), url)
    store.write_bytes(f"{url}/{shard}", bytes(data))
    return shard


def _shard_sizes(root: pathlib.Path, split: str, build: str = "local") -> list[int]:
    doc = json.loads((root / build / VERSION / "shards.json").read_text())
    return [e["num_bytes"] for e in doc["shards"] if e["split"] == split]


def test_load_streams_records_by_byte_range_with_the_local_batches(world, env, tmp_path):
    """Training (seeded) and evaluation batches, and each of two pipelines' shares, equal the local ones; no shard
    file is written locally, each shard's record index is kept beside the metadata."""
    _, root = world
    local, remote = str(root / "local"), f"s3://{BUCKET}/tf"
    assert len(_shard_sizes(root, "train")) == 3
    _assert_equal(_batches(local, seed=3), _batches(remote, seed=3))
    _assert_equal(_batches(local, training=False), _batches(remote, training=False))
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline)
        _assert_equal(_batches(local, seed=4, input_context=context), _batches(remote, seed=4, input_context=context))
    assert _shards_in(tmp_path / "cache") == []
    indexes = [p for p in (tmp_path / "cache").rglob(".index/*.npz") if ".volume-" not in p.name]
    assert len(indexes) == 3 + len(_shard_sizes(root, "test"))


def test_ranged_gets_go_through_obstore_and_equal_s3fs_and_the_local_bytes(world, env, monkeypatch):
    """s3:// ranged reads take obstore's client (configured from AWS_*); VIDVOL_RANGED_GETS=fsspec sends them through
    s3fs: both give the local shard's bytes, for ranges in two shards fetched at once."""
    _, root = world
    files = sorted(p for p in (root / "local" / VERSION).iterdir() if "-train.tfrecord-" in p.name)[:2]
    urls = [f"s3://{BUCKET}/tf/{VERSION}/{p.name}" for p in files]
    local = [p.read_bytes() for p in files]
    spans = [(urls[0], 0, 16), (urls[1], 5, 4000), (urls[0], len(local[0]) - 100, len(local[0]))]
    want = [local[urls.index(u)][a:b] for u, a, b in spans]
    assert store._ranged(urls[0]) is not None
    assert store.read_many(spans) == want
    monkeypatch.setenv(store.RANGED_GETS_ENV, "fsspec")
    assert store._ranged(urls[0]) is None
    assert store.read_many(spans) == want
    monkeypatch.delenv(store.RANGED_GETS_ENV)
    with pytest.raises(FileNotFoundError):
        store.read_many([(urls[0] + "-gone", 0, 4)])
    for name in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION"):  # AWS itself, its region not named
        monkeypatch.delenv(name, raising=False)
    assert store._ranged(urls[0]) is None


_READER = r"""
import sys, numpy as np, vidvol
batches = vidvol.load(sys.argv[1], "train", 2, data_dir=sys.argv[2], seed=1, repeat=False,
                      spec=vidvol.ReadSpec(order=vidvol.ShardOrder(1)))
print(sum(len(np.asarray(b[-1])) for b in batches), "s3fs" in sys.modules, "botocore" in sys.modules)
"""


def test_a_bucket_reader_lists_and_reads_through_obstore_alone(world, env, monkeypatch, tmp_path):
    """Listing, stat, whole and ranged reads and downloads give s3fs's answers through obstore, and a process that
    reads a bucket dataset never imports s3fs or botocore (~30 MiB resident less); VIDVOL_RANGED_GETS=fsspec
    sends it all through s3fs."""
    _, root = world
    base = f"s3://{BUCKET}/tf/{VERSION}"
    info = root / "local" / VERSION / "dataset_info.json"
    direct = (store.listdir(base), store.size(f"{base}/dataset_info.json"), store.read_bytes(f"{base}/dataset_info.json"),
              store.read_range(f"{base}/dataset_info.json", 3, 40), store.exists(base), store.exists(f"{base}-gone"),
              store.listdir(f"{base}-gone"))
    store.download(f"{base}/dataset_info.json", str(tmp_path / "direct.json"))
    monkeypatch.setenv(store.RANGED_GETS_ENV, "fsspec")
    through_s3fs = (store.listdir(base), store.size(f"{base}/dataset_info.json"),
                    store.read_bytes(f"{base}/dataset_info.json"), store.read_range(f"{base}/dataset_info.json", 3, 40),
                    store.exists(base), store.exists(f"{base}-gone"), store.listdir(f"{base}-gone"))
    assert direct == through_s3fs
    assert direct[2] == info.read_bytes() and direct[3] == info.read_bytes()[3:40] and direct[1] == info.stat().st_size
    assert f"{base}/dataset_info.json" in direct[0] and direct[4] and not direct[5] and direct[6] == []
    assert (tmp_path / "direct.json").read_bytes() == info.read_bytes()
    monkeypatch.delenv(store.RANGED_GETS_ENV)
    with pytest.raises(FileNotFoundError, match="-gone"):
        store.read_bytes(f"{base}-gone/dataset_info.json")
    want = sum(len(b[-1]) for b in _batches(str(root / "local"), seed=1, spec=vidvol.ReadSpec(order=vidvol.ShardOrder(1))))
    for env_value, imported in ((None, "False False"), ("fsspec", "True True")):
        child = dict(os.environ, **({store.RANGED_GETS_ENV: env_value} if env_value else {}))
        out = subprocess.run([sys.executable, "-c", _READER, NAME, f"s3://{BUCKET}/tf"], env=child, text=True,
                             capture_output=True, check=True).stdout.split()
        assert out == [str(want)] + imported.split(), out


def test_a_bucket_pipeline_has_threads_of_its_own_for_the_waiting_reads(world, env):
    """Ranged GETs block their tf.data thread: a bucket pipeline gets a private pool larger than the cores; a local
    one keeps tf.data's shared pool."""
    from vidvol.readers.tfdata import sizing

    _, root = world
    remote = vidvol.load(NAME, "train", 2, data_dir=f"s3://{BUCKET}/tf", repeat=False)
    local = vidvol.load(NAME, "train", 2, data_dir=str(root / "local"), repeat=False)
    assert remote.options().threading.private_threadpool_size == sizing.bucket_threadpool_size() > os.cpu_count()
    assert not local.options().threading.private_threadpool_size


@pytest.fixture(scope="module")
def int16_world(world, tmp_path_factory):
    """root: MRI scans of whole int16 values (slope 1, as scanners write them: volumes stored int16, read by the
    direct volume reads), built locally into root/local and pushed to s3://BUCKET/i16."""
    from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri

    server, _ = world
    root = tmp_path_factory.mktemp("bucket-int16")
    rng = np.random.default_rng(3)
    os.makedirs(root / "mri" / "volumes")
    rows = ["path,label,subject"]
    for i in range(6):
        data = rng.integers(-300, 2500, size=(34, 33, 35)).astype(np.int16)
        image = nib.Nifti1Image(data, np.diag([1.0, 1.0, 1.2, 1.0]))
        image.set_data_dtype(np.int16)
        nib.save(image, str(root / "mri" / "volumes" / f"sub-{i}.nii.gz"))
        rows.append(f"volumes/sub-{i}.nii.gz,{i % 2},sub-{i}")
    (root / "mri" / "labels.csv").write_text("\n".join(rows) + "\n")
    in_process_build(mri.Builder, "small_32", root / "mri", root / "local", num_shards=2)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server.env().items():
            mp.setenv(key, value)
        dataset_copy.push(str(root / "local" / VERSION), f"s3://{BUCKET}/i16/{VERSION}")
    return root


def test_int16_volumes_go_from_ranged_gets_or_the_cache_straight_into_the_batch(int16_world, env, tmp_path, caplog):
    """Volumes stored int16 are read from the bucket by the direct volume reads (a ranged GET of each volume's
    bytes, or the cached shard): float32 and int16 batches equal the local ones; a flipped byte is caught."""
    local, remote = str(int16_world / "local"), f"s3://{BUCKET}/i16"
    int16 = vidvol.ReadSpec(output=vidvol.Output(dtype="int16"))
    with caplog.at_level(logging.INFO, logger="vidvol"):
        for kwargs in ({"seed": 1}, {"training": False, "spec": int16}):
            _assert_equal(_batches(local, **kwargs), _batches(remote, **kwargs))
            _assert_equal(_batches(local, **kwargs), _batches(remote, tuning=vidvol.Tuning(cache_limit="1GB"), **kwargs))
    assert "direct volume reads" in caplog.text and "reading whole records" not in caplog.text
    assert list((tmp_path / "cache").rglob(".index/*.volume-volume.npz"))  # each shard walked once, then kept

    # One byte of a volume flipped in a copy of the dataset: the first (whole-frame) read fails its CRC32C.
    shard = _push_with_a_flipped_byte(int16_world / "local" / VERSION, f"s3://{BUCKET}/bad16/{VERSION}")
    with pytest.raises(Exception, match=rf"(?s)bad16/.*{shard}.*(CRC32C|corrupted)"):
        _batches(f"s3://{BUCKET}/bad16", training=False)


def test_int16_volumes_in_the_streaming_order_are_copied_from_whole_shards(int16_world, env, tmp_path, caplog,
                                                                          monkeypatch):
    """`ShardOrder` over int16 volumes (the direct volume reads): training batches (float32) and evaluation batches
    (int16) equal the local read's, each shard is fetched once, whole, into the window (no volume by a GET of its
    own), none lands on local disk, and a flipped byte in a shard is still caught by the record's CRC32C."""
    from vidvol.core import s3_direct

    local, remote = str(int16_world / "local"), f"s3://{BUCKET}/i16"
    spec = vidvol.ReadSpec(order=vidvol.ShardOrder(block=1))
    int16 = vidvol.ReadSpec(order=vidvol.ShardOrder(block=1), output=vidvol.Output(dtype="int16"))
    ranged = []
    real = s3_direct.get_ranges
    monkeypatch.setattr(s3_direct, "get_ranges", lambda *a, **k: ranged.append(len(a[2])) or real(*a, **k))  # a spy
    caplog.set_level(logging.DEBUG, logger="vidvol")
    for kwargs in ({"seed": 1, "spec": spec}, {"training": False, "spec": int16}):
        caplog.clear()
        _assert_equal(_batches(local, **kwargs), _batches(remote, **kwargs))
        fetched = [r.getMessage().split()[3] for r in caplog.records if "fetching" in r.getMessage()]
        assert len(fetched) == len(set(fetched)) == 2  # each shard once, whole
        assert "direct volume reads" in caplog.text and "reading whole records" not in caplog.text
    assert ranged and max(ranged) == 1  # the index's small reads; no batch of volumes by ranged GETs
    assert _shards_in(tmp_path / "cache") == []
    shard = _push_with_a_flipped_byte(int16_world / "local" / VERSION, f"s3://{BUCKET}/bad16w/{VERSION}")
    with pytest.raises(Exception, match=rf"(?s)bad16w/.*{shard}.*(CRC32C|corrupted)"):
        _batches(f"s3://{BUCKET}/bad16w", training=False, spec=spec)


def test_a_deleted_streaming_pipeline_lets_go_of_its_shards(int16_world, env):
    """TensorFlow keeps a numpy_function's callable (and so a read's `ShardWindow`) after the pipeline is gone: once
    the dataset and its iterator are deleted, no window holds a shard, and the next pipeline reads the same batches."""
    import gc

    from vidvol.readers.tfdata.shard_window import ShardWindow

    remote = f"s3://{BUCKET}/i16"
    spec = vidvol.ReadSpec(order=vidvol.ShardOrder(block=1))
    held = lambda: [len(w._held) + len(w._dropped) for w in gc.get_objects() if isinstance(w, ShardWindow)]
    gc.collect()
    before = held()
    ds = vidvol.load(NAME, "train", 2, data_dir=remote, seed=5, spec=spec)
    it = iter(ds)
    first = [np.asarray(t) for t in tf.nest.flatten(next(it))]
    assert sum(held()) > sum(before)  # the window holds the shards it fetched
    del ds, it
    gc.collect()
    time.sleep(0.5)  # a read still in flight when the pipeline went ends, keeping nothing
    assert sum(held()) == sum(before) == 0
    again = [np.asarray(t) for t in tf.nest.flatten(next(iter(vidvol.load(NAME, "train", 2, data_dir=remote, seed=5,
                                                                          spec=spec))))]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_a_streaming_window_never_holds_more_shards_than_its_limit(world, env, tmp_path):
    """Epoch after epoch of a repeating pipeline, fetching ahead into the next epoch: the shards a window holds (and
    those still copied from or downloading) never pass its limit, a shard fetched ahead is let go when a batch needs
    the room, and the batches are the local read's."""
    import gc

    from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri

    server, _ = world
    samples.write_mri_volumes(str(tmp_path / "mri"), num_subjects=30, shape=(12, 14, 10))
    in_process_build(mri.Builder, "small_32", tmp_path / "mri", tmp_path / "local", num_shards=10)
    dataset_copy.push(str(tmp_path / "local" / VERSION), f"s3://{BUCKET}/many/{VERSION}")
    sizes = sorted(e["num_bytes"] for e in json.loads((tmp_path / "local" / VERSION / "shards.json").read_text())["shards"]
                   if e["split"] == "train")
    assert len(sizes) >= 8
    spec = vidvol.ReadSpec(order=vidvol.ShardOrder(block=2))
    window = sizes[-1] * 3 + shard_window.STORE_RESERVE  # one block and one shard ahead
    runs = {}
    for where, data_dir, tuning in (("local", str(tmp_path / "local"), None),
                                    ("bucket", f"s3://{BUCKET}/many", vidvol.Tuning(stream_window=window))):
        it = iter(vidvol.load(NAME, "train", 3, data_dir=data_dir, seed=2, repeat=True, spec=spec, tuning=tuning))
        runs[where] = [np.asarray(tf.nest.flatten(next(it))[0]) for _ in range(4 * len(sizes))]  # about 4 epochs
        if where == "bucket":
            windows = [w for w in gc.get_objects() if isinstance(w, shard_window.ShardWindow) and not w._released]
            assert len(windows) == 1 and windows[0].limit == window - shard_window.STORE_RESERVE
            assert windows[0].fetched > len(sizes) * 3  # epochs of fetches, ahead into the next epoch's shards
            assert 0 < windows[0].most <= windows[0].limit
        del it
    for a, b in zip(runs["local"], runs["bucket"]):
        np.testing.assert_array_equal(a, b)


def test_a_checkpoint_moves_between_bucket_and_local_reads(world, env, tmp_path):
    """Two batches read from the bucket, the iterator saved; restored into a local read, the rest is the local run's."""
    _, root = world
    local, remote = str(root / "local"), f"s3://{BUCKET}/tf"
    want = _batches(local, seed=7)
    it = iter(vidvol.load(NAME, "train", 2, data_dir=remote, seed=7, repeat=False))
    head = [tuple(np.asarray(t) for t in next(it)) for _ in range(2)]
    saved = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt"))
    again = iter(vidvol.load(NAME, "train", 2, data_dir=local, seed=7, repeat=False))
    tf.train.Checkpoint(iterator=again).read(saved).assert_consumed()
    rest = [tuple(np.asarray(t) for t in b) for b in again]
    _assert_equal(want, head + rest)


def test_the_shard_cache_stays_under_its_limit(world, env, tmp_path, caplog):
    """With a limit of two shards, a seeded epoch and a second one read whole shards through the cache, evicting the
    least recently used; batches as local; a limit below one shard is refused when the pipeline is made."""
    _, root = world
    sizes = _shard_sizes(root, "train")
    limit = sorted(sizes)[-1] + sorted(sizes)[-2]
    caplog.set_level(logging.INFO, logger="vidvol.readers.bucket")
    want = _batches(str(root / "local"), seed=5)
    for _ in range(2):
        got = _batches(f"s3://{BUCKET}/tf", seed=5, tuning=vidvol.Tuning(cache_limit=limit))
        _assert_equal(want, got)
        held = sum(p.stat().st_size for p in _shards_in(tmp_path / "cache"))
        assert 0 < held <= limit
    assert "evicted" in caplog.text
    with pytest.raises(bucket.CacheLimitError, match="more than the shard cache limit of 100 bytes"):
        vidvol.load(NAME, "train", 2, data_dir=f"s3://{BUCKET}/tf", tuning=vidvol.Tuning(cache_limit="100B"))


def test_random_access_readers_take_the_split_into_the_cache(world, env, monkeypatch):
    """data_source, torch_dataset and grain_dataset from the bucket give the local ArrayRecord build's examples; a
    cache limit below the split is a clear error."""
    _, root = world
    local, remote = str(root / "local_ar"), f"s3://{BUCKET}/ar"
    a, b = vidvol.data_source(NAME, "train", data_dir=local), vidvol.data_source(NAME, "train", data_dir=remote)
    assert len(a) == len(b) > 0
    for i in range(len(a)):
        for key in a[i]:
            np.testing.assert_array_equal(a[i][key], b[i][key])
    ta, tb = vidvol.torch_dataset(NAME, "train", data_dir=local, seed=1), vidvol.torch_dataset(NAME, "train", data_dir=remote, seed=1)
    for x, y in zip(ta.__getitems__([0, 3, len(a) - 1]), tb.__getitems__([0, 3, len(a) - 1])):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    ga = list(vidvol.grain_dataset(NAME, "train", 2, data_dir=local, seed=2))
    gb = list(vidvol.grain_dataset(NAME, "train", 2, data_dir=remote, seed=2))
    assert len(ga) == len(gb) > 0
    for x, y in zip(ga, gb):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    monkeypatch.setenv("VIDVOL_CACHE_DIR", os.environ["VIDVOL_CACHE_DIR"] + "-small")
    monkeypatch.setenv(bucket.CACHE_LIMIT_ENV, str(max(_shard_sizes(root, "train", "local_ar")) + 1))
    with pytest.raises(bucket.CacheLimitError, match="open every shard of the split"):
        vidvol.data_source(NAME, "train", data_dir=remote)


def test_verify_checks_the_bucket_copy(world, env, capsys):
    from vidvol.cli import main as cli

    server, root = world
    assert cli.main(["verify", NAME, "--data_dir", f"s3://{BUCKET}/tf"]) == 0
    out = capsys.readouterr().out
    assert f"s3://{BUCKET}/tf/{VERSION}" in out and "OK" in out
    dataset_copy.push(str(root / "local" / VERSION), f"s3://{BUCKET}/damaged/{VERSION}")
    shard = json.loads((root / "local" / VERSION / "shards.json").read_text())["shards"][1]["file"]
    server.client().put_object(Bucket=BUCKET, Key=f"damaged/{VERSION}/{shard}", Body=b"\0" * 64)
    assert cli.main(["verify", NAME, "--data_dir", f"s3://{BUCKET}/damaged"]) == 1
    out = capsys.readouterr().out
    assert f"BROKEN s3://{BUCKET}/damaged/{VERSION}/{shard}" in out
    assert server.secret_key not in out


def test_transient_errors_and_throttling_are_retried(world, env, monkeypatch):
    """Every fourth request through the proxy fails (in turn 503 SlowDown, 500, 429): the read retries with backoff and
    gives the local batches; a store that keeps failing is an error naming the URL after the retries, no secret."""
    server, root = world
    want = _batches(str(root / "local"), seed=3)
    with FaultProxy(server.endpoint_url, fail=lambda n, what: n % 4 == 0, status=lambda n: (503, 500, 429)[n // 4 % 3]
                    ) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        _assert_equal(want, _batches(f"s3://{BUCKET}/tf", seed=3))
        assert proxy.injected >= 3 and proxy.seen["GET"] > proxy.injected
        assert set(proxy.statuses) == {503, 500, 429}
    with FaultProxy(server.endpoint_url, fail=lambda n, what: what == "GET", status=503) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: vidvol's remain
        monkeypatch.setenv("VIDVOL_CACHE_DIR", os.environ["VIDVOL_CACHE_DIR"] + "-down")
        started = time.monotonic()
        with pytest.raises(store.RemoteReadError) as err:
            vidvol.load(NAME, "train", 2, data_dir=f"s3://{BUCKET}/tf")
        assert time.monotonic() - started < 30
        assert f"s3://{BUCKET}/tf/{VERSION}" in str(err.value) and "attempts" in str(err.value)
        assert server.secret_key not in str(err.value)


def test_wrong_credentials_on_read_name_the_variable_never_the_secret(world, env, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-0123456789")
    with pytest.raises(Exception) as err:
        vidvol.load(NAME, "train", 2, data_dir=f"s3://{BUCKET}/tf")
    text = str(err.value)
    assert "AWS_SECRET_ACCESS_KEY" in text and BUCKET in text
    assert "not-the-secret-0123456789" not in text and world[0].secret_key not in text


_UPLOAD = "import sys; from vidvol.core import store; store.upload(sys.argv[1], sys.argv[2])"


def test_a_client_killed_mid_upload_leaves_no_object_and_the_rerun_completes(world, env, tmp_path):
    """A 24 MiB shard uploads in 8 MiB parts through a proxy that slows each part; SIGKILL after the first part: no
    object under the final name; the same upload run again gives the whole file."""
    server, _ = world
    data = np.random.default_rng(0).integers(0, 256, 24 << 20, dtype=np.uint8).tobytes()
    (tmp_path / "shard").write_bytes(data)
    url, key = f"s3://{BUCKET}/upload/shard.tfrecord-00000-of-00001", "upload/shard.tfrecord-00000-of-00001"
    with FaultProxy(server.endpoint_url, delay=lambda what: 1.5 if what == "PUT part" else 0.0) as proxy:
        child_env = dict(os.environ, AWS_ENDPOINT_URL=proxy.url)
        child = subprocess.Popen([sys.executable, "-c", _UPLOAD, str(tmp_path / "shard"), url], env=child_env)
        try:
            deadline = time.monotonic() + 240  # the child imports TensorFlow first
            while proxy.seen["PUT part"] < 1 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.seen["PUT part"] >= 1 and child.poll() is None, "the upload never reached its parts"
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(30)
        assert proxy.seen["POST complete"] == 0
    client = server.client()
    assert "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix="upload/")
    store.upload(str(tmp_path / "shard"), url)  # the re-run (in this process: a second child would import TF again)
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data


def test_any_fsspec_scheme_reads_alike(world, env):
    """The same code for another fsspec file system (fsspec's in-process memory://): the local batches."""
    _, root = world
    dataset_copy.push(str(root / "local" / VERSION), f"memory://vidvol-mem/tf/{VERSION}")
    _assert_equal(_batches(str(root / "local"), seed=9), _batches("memory://vidvol-mem/tf", seed=9))


def test_the_report_page_of_a_bucket_dataset_is_the_local_ones(world, env, tmp_path, monkeypatch):
    """`vidvol.report` on the bucket data_dir: the sampled shards come through the shard cache, `verify` checks the
    bucket's own bytes, and the page says what the local dataset's page says (counts, verdict)."""
    import re

    _, root = world
    monkeypatch.chdir(tmp_path)
    local = open(vidvol.report(NAME, data_dir=str(root / "local"), out=str(tmp_path / "local.html"))).read()
    path = vidvol.report(NAME, data_dir=f"s3://{BUCKET}/tf")
    assert os.path.dirname(path) == str(tmp_path) and path.endswith(".html")  # a local file, in the current folder
    page = open(path).read()
    def counts(html: str) -> tuple[str, ...]:
        return re.search(r"<p>(\d+) examples in (\d+) shards", html).groups()

    assert counts(page) == counts(local) and int(counts(page)[0]) > 0
    assert 'Verdict: <span class="ok">OK</span>' in page and 'Verdict: <span class="ok">OK</span>' in local
    assert env.secret_key not in page and env.access_key not in page


def test_the_shard_streaming_order_reads_each_shard_whole_with_the_local_batches(world, env, tmp_path, caplog):
    """`ShardOrder` from the bucket (records, not direct volume reads): training batches of two epochs, evaluation,
    and each of two pipelines' shares equal the local read's, in the default window (each shard of an epoch then
    fetched once, whole) and in the smallest; no shard lands on local disk; a window below one block is refused at
    `load`, naming the smallest that works."""
    _, root = world
    local, remote = str(root / "local"), f"s3://{BUCKET}/tf"
    spec = vidvol.ReadSpec(order=vidvol.ShardOrder(block=2))
    sizes = sorted(_shard_sizes(root, "train"))
    least = sizes[-1] + sizes[-2] + shard_window.STORE_RESERVE  # one block's largest shards, the store client's reserve
    records = dict(spec=spec, tuning=vidvol.Tuning(direct_reads=False))
    smallest = dict(spec=spec, tuning=vidvol.Tuning(direct_reads=False, stream_window=least))
    caplog.set_level(logging.DEBUG, logger="vidvol.readers.tfdata.shard_window")
    for epoch in (0, 1):
        caplog.clear()
        want = _batches(local, seed=3, epoch=epoch, spec=spec)
        _assert_equal(want, _batches(remote, seed=3, epoch=epoch, **records))
        fetched = [r.getMessage().split()[3] for r in caplog.records if "fetching" in r.getMessage()]
        assert len(fetched) == len(set(fetched)) == len(sizes)  # every shard once, whole
        _assert_equal(want, _batches(remote, seed=3, epoch=epoch, **smallest))
    _assert_equal(_batches(local, training=False, spec=spec), _batches(remote, training=False, **smallest))
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline)
        _assert_equal(_batches(local, seed=4, input_context=context, spec=spec),
                      _batches(remote, seed=4, input_context=context, **records))
    digest = lambda batches: [b[0].tobytes() for b in batches]
    assert digest(_batches(remote, seed=3, spec=spec)) != digest(_batches(remote, seed=3))  # not the per-example order
    assert _shards_in(tmp_path / "cache") == []
    shard = sorted(p for p in (root / "local" / VERSION).iterdir() if "-train.tfrecord-" in p.name)[0]
    whole = shard.read_bytes()
    for part in (len(whole), 1000):  # one GET, or ranges of 1000 bytes at once into one buffer
        assert bytes(store.read_object(f"{remote}/{VERSION}/{shard.name}", len(whole), part)) == whole
    with pytest.raises(ValueError, match=f"the smallest window that works is {least} bytes"):
        vidvol.load(NAME, "train", 2, data_dir=remote, spec=spec, tuning=vidvol.Tuning(stream_window=least - 1))
