"""Builds from a bucket: every dataset's manual_dir as an s3:// URL on a real S3 server (SeaweedFS), same result as local.

One server and one set of sample inputs per module: the inputs are written locally, one source
removed from each (a missing object must become a skip), and uploaded as they are to
`s3://vidvol-test/<dataset>`. Each dataset is then built from the local folder and from the
bucket (in-process Beam, credentials only in AWS_* environment variables) and the two builds
must agree on every parsed example, the split infos and the skip report. The skip report's
`source` is the same in both (source ids are never paths: video file name, experiment, relative
key); only reasons that quote a path differ, by the manual_dir prefix (local folder vs URL).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol.builders.sources import files
from vidvol.builders.writer import skip_report
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples
from conftest import in_process_config, run_tfds_build
from services import SeaweedS3

pytestmark = pytest.mark.slow

BUCKET = "vidvol-test"
MISSING_VIDEO = samples.hmdb51_video_name(samples.HMDB51_CLASSES[1], 1)  # named by split 1 (train or test)
CONFIGS = {
    "hmdb51": (hmdb.Builder, hmdb.Hmdb51Config(name="t6x32", split_number=1, num_frames=6, height=32, width=32)),
    "fire_frames": (fire.Builder, fire.FireHrrConfig(name="t6x18x32", max_len=6, height=18, width=32)),
    "fire_video": (fire.Builder, fire.FireHrrConfig(name="t6x18x32", max_len=6, height=18, width=32)),
    "mri": (mri.Builder, mri.MriVolumesConfig(name="t16", spatial_size=(16, 16, 16))),
}


def _write_inputs(root: pathlib.Path) -> None:
    """Small inputs of every dataset and form, each with one source missing."""
    hmdb_root = root / "hmdb51"
    samples.write_hmdb51_layout(str(hmdb_root), videos_per_class=3, num_frames=(8, 14), height=48, width=64, splits=(1,))
    (hmdb_root / "hmdb51_org" / samples.HMDB51_CLASSES[1] / MISSING_VIDEO).unlink()
    samples.write_fire_hrr_frames(str(root / "fire_frames"), experiments=(("exp_a", 9), ("exp_b", 4)), height=36, width=64,
                                  with_split=True)
    (root / "fire_frames" / "frames" / "exp_a" / "frame_0004.jpg").unlink()  # a masked frame
    samples.write_fire_hrr_videos(str(root / "fire_video"), experiments=(("t1", 14), ("t2", 5)), height=36, width=64)
    (root / "fire_video" / "orphan.csv").write_text("time,hrr\n0,1\n1,2\n")  # a series without its video
    samples.write_mri_volumes(str(root / "mri"), num_subjects=4, shape=(12, 14, 10))
    (root / "mri" / "volumes" / "sub-002_scan-0.nii.gz").unlink()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(server, local root): the inputs written under root and uploaded to s3://vidvol-test/<name>/."""
    root = tmp_path_factory.mktemp("inputs")
    _write_inputs(root)
    with SeaweedS3(buckets=(BUCKET,)) as server:
        client = server.client()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            with open(path, "rb") as body:
                client.put_object(Bucket=BUCKET, Key=path.relative_to(root).as_posix(), Body=body)
        yield server, root


@pytest.fixture
def s3_env(store, monkeypatch, tmp_path):
    """Credentials and endpoint only as environment variables; local copies fetched into tmp_path/fetch."""
    server, _ = store
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(files.FETCH_DIR_ENV, str(tmp_path / "fetch"))
    return server


def _build(name: str, manual_dir: str, data_dir) -> tfds.core.DatasetBuilder:
    builder_cls, config = CONFIGS[name]
    builder = builder_cls(data_dir=str(data_dir), config=config)
    builder.download_and_prepare(download_config=in_process_config(manual_dir=manual_dir))
    return builder


def _read_all(builder) -> dict[str, list[dict]]:
    """Every example of every split, read back from the written files (as tfds.load does)."""
    reread = tfds.builder_from_directory(builder.data_dir)
    return {split: list(tfds.as_numpy(reread.as_dataset(split=split, shuffle_files=False))) for split in reread.info.splits}


def _assert_same_examples(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> None:
    assert a.keys() == b.keys()
    for split in a:
        assert len(a[split]) == len(b[split]) > 0, split
        for ea, eb in zip(a[split], b[split]):
            assert ea.keys() == eb.keys()
            for feature in ea:
                np.testing.assert_array_equal(ea[feature], eb[feature], err_msg=f"{split}/{feature}")


def _split_infos(builder) -> dict[str, tuple]:
    return {s.name: (s.num_examples, s.num_shards, tuple(s.shard_lengths), s.num_bytes) for s in builder.info.splits.values()}


def _report(builder, manual_dir: str) -> dict:
    """The skip report with the manual_dir prefix of reasons replaced by `<manual_dir>`."""
    text = json.dumps(skip_report.read_skip_report(builder.data_dir), sort_keys=True)
    return json.loads(text.replace(manual_dir, "<manual_dir>"))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_build_from_the_bucket_equals_the_local_build(name, s3_env, store, tmp_path, capfd):
    _, root = store
    local_dir, url = str(root / name), f"s3://{BUCKET}/{name}"
    local = _build(name, local_dir, tmp_path / "local")
    remote = _build(name, url, tmp_path / "remote")
    _assert_same_examples(_read_all(local), _read_all(remote))
    assert _split_infos(local) == _split_infos(remote)
    local_report, remote_report = _report(local, local_dir), _report(remote, url)
    assert local_report == remote_report
    remote_text = json.dumps(skip_report.read_skip_report(remote.data_dir))
    assert url in remote_text and str(root) not in remote_text  # reasons quote the URL, never a local copy
    # local copies are gone (frames are read into memory: no fetch folder at all for fire_frames)
    fetch = tmp_path / "fetch"
    assert not fetch.exists() or os.listdir(fetch) == []
    if name != "fire_frames":
        assert fetch.exists()
    out, err = capfd.readouterr()
    secret = s3_env.secret_key
    assert secret not in out + err
    for path in (tmp_path / "remote").rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path


def test_missing_objects_are_skips_naming_the_url(s3_env, tmp_path):
    builder = _build("hmdb51", f"s3://{BUCKET}/hmdb51", tmp_path / "out")
    skipped = {s["source"]: s for s in skip_report.read_skip_report(builder.data_dir)["skipped"]}
    reason = skipped[MISSING_VIDEO]["reason"]
    cls = samples.HMDB51_CLASSES[1]
    assert reason.startswith(f"FileNotFoundError: s3://{BUCKET}/hmdb51/hmdb51_org/{cls}/{MISSING_VIDEO}: video not found (named by ")
    assert f"s3://{BUCKET}/hmdb51/testTrainMulti_7030_splits/{cls}_test_split1.txt:" in reason
    builder = _build("mri", f"s3://{BUCKET}/mri", tmp_path / "mri")
    [skip] = skip_report.read_skip_report(builder.data_dir)["skipped"]
    assert skip["source"] == "volumes/sub-002_scan-0.nii.gz"
    assert skip["reason"].startswith(f"FileNotFoundError: s3://{BUCKET}/mri/volumes/sub-002_scan-0.nii.gz: volume file not found")
    builder = _build("fire_video", f"s3://{BUCKET}/fire_video", tmp_path / "fire")
    [skip] = skip_report.read_skip_report(builder.data_dir)["skipped"]
    assert skip["source"] == "orphan" and f"Video file not found: 's3://{BUCKET}/fire_video/orphan.mp4'" in skip["reason"]


def test_hmdb51_archives_in_the_bucket_are_fetched_once_and_reused(s3_env, store, tmp_path, caplog):
    rar_writer = pytest.importorskip("rar_writer")
    caplog.set_level(logging.INFO, logger="vidvol.builders.sources.archive")
    _, root = store
    org, splits = root / "hmdb51" / "hmdb51_org", root / "hmdb51" / "testTrainMulti_7030_splits"
    inner = {
        f"{d.name}.rar": rar_writer.rar4_bytes([(f"{d.name}/{f.name}", f.read_bytes()) for f in sorted(d.iterdir())])
        for d in sorted(org.iterdir())
    }
    client = s3_env.client()
    client.put_object(Bucket=BUCKET, Key="hmdb51_rar/hmdb51_org.rar", Body=rar_writer.rar4_bytes(sorted(inner.items())))
    client.put_object(Bucket=BUCKET, Key="hmdb51_rar/test_train_splits.rar", Body=rar_writer.rar4_bytes(
        [(f"testTrainMulti_7030_splits/{f.name}", f.read_bytes()) for f in sorted(splits.iterdir())]))
    builder_cls, config = CONFIGS["hmdb51"]
    for attempt in range(2):
        builder = builder_cls(data_dir=str(tmp_path / f"out{attempt}"), config=config)
        builder.download_and_prepare(
            download_dir=str(tmp_path / "dl"), download_config=in_process_config(manual_dir=f"s3://{BUCKET}/hmdb51_rar")
        )
        assert {s: builder.info.splits[s].num_examples for s in ("train", "test")} == {"train": 2, "test": 3}
    assert f"Reusing extraction of s3://{BUCKET}/hmdb51_rar/hmdb51_org.rar" in caplog.text
    assert os.listdir(tmp_path / "fetch") == []


@pytest.mark.parametrize("name", ["hmdb51", "fire_frames", "mri"])
def test_missing_bucket_or_prefix_is_a_clear_error(name, s3_env, tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        _build(name, f"s3://no-such-bucket/{name}", tmp_path / "a")
    assert f"s3://no-such-bucket/{name}" in str(err.value) and "bucket 'no-such-bucket' does not exist" in str(err.value)
    assert "Expected in manual_dir" in str(err.value)
    with pytest.raises(FileNotFoundError) as err:
        _build(name, f"s3://{BUCKET}/nothing-here", tmp_path / "b")
    assert f"(no object under s3://{BUCKET}/nothing-here/)" in str(err.value) and "Expected in manual_dir" in str(err.value)


def test_wrong_secret_is_a_clear_error_without_the_secret(s3_env, monkeypatch, tmp_path, capfd, caplog):
    wrong = "not-the-secret-" + "0c1d2e3f4a5b6c7d"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    with pytest.raises(files.AccessDeniedError) as err:
        _build("hmdb51", f"s3://{BUCKET}/hmdb51", tmp_path / "out")
    text = str(err.value)
    assert text.startswith(f"access denied for s3://{BUCKET}/hmdb51") and "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in text
    out, errs = capfd.readouterr()
    for secret in (wrong, s3_env.secret_key):
        assert secret not in text and secret not in out + errs + caplog.text


@pytest.mark.long
def test_tfds_build_cli_with_worker_processes_reads_the_bucket(s3_env, store, tmp_path):
    """The real `tfds build` (2 Beam worker processes), credentials reaching the workers through the environment."""
    proc = run_tfds_build("mri_volumes/small_32", f"s3://{BUCKET}/mri", tmp_path / "out", timeout=300)
    assert s3_env.secret_key not in proc.stdout + proc.stderr
    data_dir = tmp_path / "out" / "mri_volumes" / "small_32" / "2.0.0"
    report = skip_report.read_skip_report(str(data_dir))
    assert [s["source"] for s in report["skipped"]] == ["volumes/sub-002_scan-0.nii.gz"]
    assert sum(s["examples"] for s in report["splits"].values()) == 3
    assert s3_env.secret_key not in json.dumps(report)


@pytest.fixture(scope="module")
def s3_dask(store, tmp_path_factory):
    """A dask scheduler + 2 worker processes whose environment holds the bucket's credentials."""
    from vidvol.beam_jobs import dask_cluster

    server, _ = store
    scratch = tmp_path_factory.mktemp("dask_scratch")  # the workers' TMPDIR: none of the driver's folders
    with dask_cluster.LocalDaskCluster(n_workers=2, log_dir=str(tmp_path_factory.mktemp("dask_logs")),
                                       env={**server.env(), "TMPDIR": str(scratch)}) as cluster:
        cluster.scratch = scratch
        yield cluster


# Long lane: in CI, tests/beam_jobs/test_dask.py builds from the bucket (and from it into it) on installed workers.
@pytest.mark.long
@pytest.mark.parametrize("name", ["hmdb51", "fire_video", "mri"])
def test_dask_build_from_the_bucket_equals_the_local_build(name, s3_env, s3_dask, store, tmp_path, capfd):
    from apache_beam.options.pipeline_options import PipelineOptions

    from vidvol.beam_jobs import runners

    _, root = store
    local_dir, url = str(root / name), f"s3://{BUCKET}/{name}"
    local = _build(name, local_dir, tmp_path / "local")
    builder_cls, config = CONFIGS[name]
    remote = builder_cls(data_dir=str(tmp_path / "dask"), config=config)
    runner, options = runners.resolve(None, PipelineOptions(["--runner=dask", f"--dask_client_address={s3_dask.address}"]))
    remote.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=url, beam_runner=runner, beam_options=options))
    _assert_same_examples(_read_all(local), _read_all(remote))
    assert _split_infos(local) == _split_infos(remote)
    assert _report(local, local_dir) == _report(remote, url)
    out, err = capfd.readouterr()
    assert s3_env.secret_key not in out + err


def _objects(server, prefix: str) -> dict[str, bytes]:
    """{key below prefix: bytes} of every object the bucket holds there."""
    client, out = server.client(), {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix) + 1:]] = client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return out


def _local_files(root: str) -> dict[str, bytes]:
    base = pathlib.Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


# What differs between two builds of the same inputs besides timestamps: the data_dir each names.
_PER_BUILD = {"dataset_info.json"}


def _assert_bucket_equals_local(server, local_path: str, prefix: str) -> None:
    """The bucket's dataset is the local build's: the same files, each shard and report byte for byte."""
    local, remote = _local_files(local_path), _objects(server, prefix)
    local = {k: v for k, v in local.items() if not k.startswith("build-")}  # the build log stays on the driver
    assert sorted(remote) == sorted(local)
    for name in local:
        if name == "build.json":  # when and how long: each build's own
            assert json.loads(local[name]).keys() == json.loads(remote[name]).keys()
        elif name in _PER_BUILD:
            a, b = json.loads(local[name]), json.loads(remote[name])
            assert a["splits"] == b["splits"] and a.get("fileFormat") == b.get("fileFormat"), name
        else:
            assert remote[name] == local[name], name


@pytest.mark.parametrize("dataset,source", [("mri_volumes/small_32", "mri"), ("hmdb51/split1_20x64x64", "hmdb51")])
def test_python_m_vidvol_build_into_the_bucket_equals_the_local_build(dataset, source, s3_env, tmp_path, monkeypatch):
    from vidvol.beam_jobs import build

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setenv("VIDVOL_STAGING_DIR", str(tmp_path / "staging"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    url = f"s3://{BUCKET}/{source}"
    local = build.build(dataset, manual_dir=url, data_dir=str(tmp_path / "local"))
    prefix = f"out-direct-{source}"
    remote = build.build(dataset, manual_dir=url, data_dir=f"s3://{BUCKET}/{prefix}")
    version = local.data_path.split(os.sep)[-3:]
    assert remote.built and remote.data_path == f"s3://{BUCKET}/{prefix}/" + "/".join(version)
    assert remote.splits == local.splits
    _assert_bucket_equals_local(s3_env, local.data_path, f"{prefix}/" + "/".join(version))
    # Nothing but the published version: no incomplete prefix, no plan, no publish lock, no attempt.
    assert {k.split("/")[0] for k in _objects(s3_env, prefix)} == {version[0]}
    assert not list(scratch.glob("vidvol-shard-*"))
    again = build.build(dataset, manual_dir=url, data_dir=f"s3://{BUCKET}/{prefix}")
    assert not again.built and again.splits == local.splits  # read from the bucket's skip report
    # Read where it lies (records by ranged GETs): the local build's batches, same seed, same pixels.
    monkeypatch.setenv("VIDVOL_CACHE_DIR", str(tmp_path / "cache"))
    read = lambda data_dir: [tuple(np.asarray(t) for t in tf.nest.flatten(b)) for b in vidvol.load(
        dataset, "train", 1, data_dir=data_dir, seed=11, repeat=False)]
    want, got = read(str(tmp_path / "local")), read(f"s3://{BUCKET}/{prefix}")
    assert len(want) == len(got) > 0
    for a, b in zip(want, got):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


@pytest.mark.long  # CI: test_dask.py's test_workers_sharing_only_the_bucket_build_from_it_into_it (installed workers)
def test_dask_workers_sharing_only_the_bucket_build_into_it(s3_env, s3_dask, tmp_path, monkeypatch):
    """Raw data and output in the bucket; the workers' scratch (their own TMPDIR) holds no shard afterwards."""
    from vidvol.beam_jobs import build

    monkeypatch.setenv("VIDVOL_STAGING_DIR", str(tmp_path / "staging"))
    url = f"s3://{BUCKET}/mri"
    local = build.build("mri_volumes/small_32", manual_dir=url, data_dir=str(tmp_path / "local"))
    prefix = "out-dask-mri"
    remote = build.build("mri_volumes/small_32", manual_dir=url, data_dir=f"s3://{BUCKET}/{prefix}", runner="dask",
                         beam_flags=[f"--dask_client_address={s3_dask.address}"])
    assert remote.built and remote.splits == local.splits
    _assert_bucket_equals_local(s3_env, local.data_path, f"{prefix}/mri_volumes/small_32/2.0.0")
    assert not list(pathlib.Path(s3_dask.scratch).rglob("vidvol-shard-*"))
    staged = [p for p in (tmp_path / "staging").rglob("*") if p.is_file() and ".tfrecord" in p.name]
    assert staged == []  # the driver never held a shard either


def test_two_builds_cannot_both_publish_into_one_prefix(s3_env, tmp_path):
    """A publish lock held by another build (its object in the bucket) stops this one before it replaces anything."""
    from vidvol.beam_jobs import build
    from vidvol.builders.writer import bucket

    prefix = "out-conflict"
    lock = f"{prefix}/mri_volumes/small_32/2.0.0{bucket.PUBLISH_LOCK_SUFFIX}"
    s3_env.client().put_object(Bucket=BUCKET, Key=lock, Body=b'{"host": "elsewhere", "pid": 1}')
    with pytest.raises(bucket.PublishConflictError, match="another build is publishing") as err:
        build.build("mri_volumes/small_32", manual_dir=f"s3://{BUCKET}/mri", data_dir=f"s3://{BUCKET}/{prefix}")
    assert "pid 1 on elsewhere" in str(err.value)
    keys = _objects(s3_env, prefix)
    assert not any(k.endswith("dataset_info.json") for k in keys)  # nothing was published


def test_pull_and_push_copy_a_version_checking_every_shard(s3_env, tmp_path, monkeypatch):
    """pull/push copy a version (shards first, metadata last) and a damaged shard stops the pull naming it. (The
    readers on a bucket data_dir: test_bucket_reads.py and the build test above.)"""
    from vidvol.beam_jobs import build
    from vidvol.cli import main as cli

    monkeypatch.setenv("VIDVOL_STAGING_DIR", str(tmp_path / "staging"))
    local = build.build("mri_volumes/small_32", manual_dir=f"s3://{BUCKET}/mri", data_dir=str(tmp_path / "local"))

    # push a local build to another prefix, pull it back: the same files
    assert cli.main(["push", "mri_volumes/small_32", "--data_dir", str(tmp_path / "local"), "--to",
                     f"s3://{BUCKET}/out-pushed"]) == 0
    assert cli.main(["pull", "mri_volumes/small_32", "--from", f"s3://{BUCKET}/out-pushed", "--data_dir",
                     str(tmp_path / "pulled")]) == 0
    version = "mri_volumes/small_32/2.0.0"
    pulled = _local_files(str(tmp_path / "pulled" / version))
    assert pulled == {k: v for k, v in _local_files(local.data_path).items() if not k.startswith("build-")}
    # a shard changed in the bucket: the pull stops, naming it
    shard = sorted(k for k in pulled if ".tfrecord-" in k)[0]
    s3_env.client().put_object(Bucket=BUCKET, Key=f"out-pushed/{version}/{shard}", Body=b"not the shard")
    code = cli.main(["pull", "mri_volumes/small_32", "--from", f"s3://{BUCKET}/out-pushed", "--data_dir",
                     str(tmp_path / "pulled2")])
    assert code == 1
    assert not (tmp_path / "pulled2" / version / "dataset_info.json").exists()  # nothing readable was left
