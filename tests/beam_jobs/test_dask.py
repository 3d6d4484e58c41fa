"""Builds on Beam's DaskRunner against a real dask.distributed scheduler and worker processes.

The module's cluster is started by the tests on 127.0.0.1 (scheduler + 2 single-threaded worker
processes) and stopped after them, as a cluster that shares nothing with this checkout: its
processes run the interpreter of a fresh venv where vidvol was installed from the wheel
(`installed.InstalledEnv`), in a working folder of their own, with no PYTHONPATH and none of the
driver's environment but the AWS_* variables of a real S3 server (SeaweedFS) that holds inputs. Every dataset's Dask build must equal its direct build record for record,
with the same split infos and skip report; a worker SIGKILLed in the middle of a build is survived
(Dask reruns its tasks, shard writes are whole-file renames) with every example exactly once.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

import array_record_testing
import installed
import services

from vidvol.beam_jobs import build
from vidvol.beam_jobs import dask_cluster
from vidvol.builders.writer import progress
from vidvol.datasets.fire_hrr import make_dummy_data as fire_dummy
from vidvol.datasets.hmdb51 import make_dummy_data as hmdb_dummy
from vidvol.datasets.mri_volumes import make_dummy_data as mri_dummy
from vidvol.testing import samples

pytestmark = pytest.mark.slow  # real dask processes: `make test` runs them, `make test-fast` does not

CASES = [
    ("hmdb51/split1_20x64x64", hmdb_dummy.DUMMY_DIR),
    ("fire_hrr/161x135x240", fire_dummy.DUMMY_DIR),
    ("mri_volumes/small_32", mri_dummy.DUMMY_DIR),
]


def records(data_path: str) -> dict[str, list[bytes]]:
    """Every shard file of a prepared dataset, by file name, its records in file order."""
    return {
        name: list(tf.data.TFRecordDataset(os.path.join(data_path, name)).as_numpy_iterator())
        for name in sorted(os.listdir(data_path))
        if ".tfrecord-" in name
    }


def split_infos(data_path: str) -> list[dict]:
    """The split infos TFDS reads (names, shard lengths, bytes)."""
    with open(os.path.join(data_path, "dataset_info.json")) as f:
        return json.load(f)["splits"]


def skip_report(data_path: str) -> dict:
    with open(os.path.join(data_path, "skip_report.json")) as f:
        return json.load(f)


BUCKET = "vidvol-test"


@pytest.fixture(scope="module")
def s3():
    """A SeaweedFS S3 server holding the mri_volumes and hmdb51 dummy data under s3://vidvol-test/<name>/."""
    with services.SeaweedS3(buckets=(BUCKET,)) as server:
        client = server.client()
        for name, root in (("mri_volumes", mri_dummy.DUMMY_DIR), ("hmdb51", hmdb_dummy.DUMMY_DIR)):
            for here, _, names in os.walk(root):
                for n in names:
                    path = os.path.join(here, n)
                    with open(path, "rb") as body:
                        client.put_object(Bucket=BUCKET, Key=f"{name}/{os.path.relpath(path, root)}", Body=body)
        yield server


def _installed_cluster(env: installed.InstalledEnv, root, n_workers: int, worker_env: dict[str, str]):
    """Scheduler + workers run by `env`'s interpreter in their own folder, seeing only `worker_env` of ours."""
    home = root / "worker_home"
    home.mkdir(parents=True, exist_ok=True)
    return dask_cluster.LocalDaskCluster(n_workers=n_workers, log_dir=str(root / "logs"), python=env.python,
                                         cwd=str(home), share_driver=False, env=worker_env, worker_homes=str(home))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, wheel_env, s3):
    with _installed_cluster(wheel_env, tmp_path_factory.mktemp("dask"), 2, s3.env()) as c:
        yield c


def test_the_cluster_runs_the_installed_wheel_not_the_checkout(cluster):
    answers = dask_cluster.check_workers(cluster.address)
    assert len(answers) == 2
    for answer in answers.values():
        assert "wheel_env" in answer["python"] and "worker_home" in answer["cwd"]
        assert not answer["cwd"].startswith(str(installed.REPO))
    assert len({a["cwd"] for a in answers.values()}) == 2  # each worker in a folder of its own
    from distributed import Client

    with Client(cluster.address) as client:
        seen = client.run(lambda: (__import__("vidvol").__file__, os.environ.get("PYTHONPATH")))
    for file, pythonpath in seen.values():
        assert "wheel_env" in file and "site-packages" in file and pythonpath is None, file


@pytest.mark.parametrize("dataset,manual", [pytest.param(*CASES[0], marks=pytest.mark.long), *CASES[1:]],
                         ids=[c[0].split("/")[0] for c in CASES])
def test_dask_build_equals_direct_build(cluster, dataset, manual, tmp_path):
    direct = build.build(dataset, manual_dir=manual, data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=2"])
    on_dask = build.build(dataset, manual_dir=manual, data_dir=str(tmp_path / "dask"), runner="dask",
                          beam_flags=[f"--dask_client_address={cluster.address}"])
    assert on_dask.built and on_dask.splits == direct.splits and on_dask.skipped == direct.skipped
    assert sum(s["examples"] for s in direct.splits.values()) > 0
    assert records(on_dask.data_path) == records(direct.data_path)  # same shards, byte for byte
    assert split_infos(on_dask.data_path) == split_infos(direct.data_path)
    assert skip_report(on_dask.data_path) == skip_report(direct.data_path)
    assert not glob.glob(os.path.join(on_dask.data_path, "*.tmp")) and not glob.glob(os.path.join(on_dask.data_path, "*.partial"))


def test_dask_array_record_build_holds_the_direct_builds_records(cluster, tmp_path):
    """`--file_format array_record` on Dask: the same records as the direct TFRecord build, shard for shard."""
    dataset = "mri_volumes/small_32"
    direct = build.build(dataset, manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    on_dask = build.build(dataset, manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path / "dask"), runner="dask",
                          beam_flags=[f"--dask_client_address={cluster.address}"], file_format="array_record")
    assert on_dask.splits == direct.splits and skip_report(on_dask.data_path) == skip_report(direct.data_path)
    assert array_record_testing.array_record_records(on_dask.data_path) == records(direct.data_path)
    assert not [n for n in os.listdir(on_dask.data_path) if n.endswith((".tmp", ".partial", ".info.json"))]


def test_tfds_build_cli_with_the_short_runner_name(cluster, tmp_path, tfds_build):
    proc = tfds_build("mri_volumes/small_32", mri_dummy.DUMMY_DIR, tmp_path / "cli",
                      f"--beam_pipeline_options=runner=dask,dask_client_address={cluster.address}")
    direct = build.build("mri_volumes/small_32", manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    cli_path = os.path.join(tmp_path, "cli", "mri_volumes", "small_32", direct.data_path.rsplit(os.sep, 1)[-1])
    assert records(cli_path) == records(direct.data_path), proc.stderr[-3000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_fails_fast_naming_the_address(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=address):
        build.build("mri_volumes/small_32", manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path), runner="dask",
                    beam_flags=[f"--dask_client_address={address}"])
    assert time.monotonic() - start < 15
    assert not os.path.exists(os.path.join(tmp_path, "mri_volumes"))
    with pytest.raises(ValueError, match="--dask_client_address or --dask_scheduler_file"):
        build.build("mri_volumes/small_32", manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path), runner="dask")


def _dask_processes() -> set[str]:
    return set(os.popen("pgrep -f 'distributed[.]cli[.]dask_'").read().split())


def test_local_services_start_and_stop_a_dask_cluster(tmp_path, monkeypatch):
    """`--local_services` builds on a mutual-TLS cluster (its address `tls://`: a client without its key is
    refused), then stops it."""
    addresses = []
    real_enter = dask_cluster.LocalDaskCluster.__enter__

    def enter(self):
        out = real_enter(self)
        addresses.append(self.address)
        import dask.config

        with dask.config.set({"distributed.comm.tls.ca-file": None, "distributed.comm.tls.client.cert": None,
                              "distributed.comm.tls.client.key": None}):
            with pytest.raises(Exception, match="TLS|ssl"):  # another local user, without the key
                dask_cluster.check_reachable(self.address, timeout=3)
        return out

    monkeypatch.setattr(dask_cluster.LocalDaskCluster, "__enter__", enter)
    before = _dask_processes()
    result = build.build("mri_volumes/small_32", manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path),
                         runner="dask", local_services=True)
    assert result.built and result.splits["train"]["examples"] > 0
    assert len(addresses) == 1 and addresses[0].startswith("tls://127.0.0.1:"), addresses
    assert _dask_processes() <= before  # the scheduler and workers it started are gone


@pytest.mark.long
def test_sigkill_of_a_worker_mid_build_loses_and_duplicates_nothing(tmp_path):
    manual = tmp_path / "manual"
    samples.write_hmdb51_layout(str(manual), classes=["cartwheel", "catch", "climb"], videos_per_class=12,
                                num_frames=(300, 400), height=120, width=160, splits=(1,), seed=5)
    dataset = "hmdb51/split1_20x64x64"
    direct = build.build(dataset, manual_dir=str(manual), data_dir=str(tmp_path / "direct"), num_shards=4,
                         beam_flags=["--direct_num_workers=2"])
    data_dir = str(tmp_path / "dask")
    with dask_cluster.LocalDaskCluster(n_workers=2, log_dir=str(tmp_path / "logs")) as c:
        pids = sorted(c.worker_pids().values())
        outcome: dict = {}

        def run():
            try:
                outcome["result"] = build.build(dataset, manual_dir=str(manual), data_dir=data_dir, runner="dask",
                                                num_shards=4, beam_flags=[f"--dask_client_address={c.address}"])
            except BaseException as e:
                outcome["error"] = e

        thread = threading.Thread(target=run)
        thread.start()
        pattern = os.path.join(data_dir, "hmdb51", "split1_20x64x64", "incomplete.*", "*.tmp")

        def writer_pid():  # a worker process holding a shard attempt open (not a small progress record)
            for pid in pids:
                fd_dir = f"/proc/{pid}/fd"
                for fd in os.listdir(fd_dir) if os.path.isdir(fd_dir) else []:
                    try:
                        target = os.readlink(os.path.join(fd_dir, fd))
                    except OSError:
                        continue  # closed between listdir and readlink
                    if fnmatch.fnmatch(target, pattern) and progress.PROGRESS_SUFFIX not in target:
                        return pid, target
            return None

        deadline = time.monotonic() + 120
        writing = None
        while writing is None and thread.is_alive() and time.monotonic() < deadline:
            writing = writer_pid()
            time.sleep(0.005)
        assert writing, f"no worker seen writing a shard: the kill would prove nothing ({outcome})"
        victim, attempt = writing
        os.kill(victim, signal.SIGKILL)  # in the middle of writing `attempt`
        thread.join(timeout=300)
        assert not thread.is_alive()
        assert len(c.worker_pids()) == 1  # the killed worker stayed dead; the other finished its tasks
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.built and result.splits == direct.splits
    assert records(result.data_path) == records(direct.data_path)  # every example exactly once, same bytes
    assert not glob.glob(os.path.join(result.data_path, "*.tmp"))
    assert not os.path.exists(attempt)  # the dead worker's half-written attempt went with the incomplete folder


@pytest.mark.parametrize("dataset,prefix", [("mri_volumes/small_32", "mri_volumes"),
                                            pytest.param("hmdb51/split1_20x64x64", "hmdb51", marks=pytest.mark.long)],
                         ids=["mri_volumes", "hmdb51"])
def test_cli_build_from_the_bucket_on_installed_workers_equals_the_direct_build(cluster, s3, dataset, prefix, tmp_path,
                                                                                 monkeypatch):
    """The build CLI as users type it (`--dask_client_address ADDR`), inputs in the bucket, on the wheel's workers."""
    url = f"s3://{BUCKET}/{prefix}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **s3.env())
    cmd = [sys.executable, "-m", "vidvol.beam_jobs.build", dataset, "--manual_dir", url, "--data_dir",
           str(tmp_path / "dask"), "--runner", "dask", "--dask_client_address", cluster.address]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    on_dask = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    direct = build.build(dataset, manual_dir=url, data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert on_dask["splits"] == direct.splits and sum(s["examples"] for s in direct.splits.values()) > 0
    assert records(on_dask["data_path"]) == records(direct.data_path)
    assert skip_report(on_dask["data_path"]) == skip_report(direct.data_path)
    assert s3.secret_key not in proc.stdout + proc.stderr


def test_workers_without_credentials_get_one_error_naming_them_and_the_fix(wheel_env, s3, tmp_path, monkeypatch):
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)  # the driver has them; its workers do not
    with _installed_cluster(wheel_env, tmp_path, 1, {}) as c:
        start = time.monotonic()
        with pytest.raises(dask_cluster.WorkerSetupError) as info:
            build.build("mri_volumes/small_32", manual_dir=f"s3://{BUCKET}/mri_volumes", data_dir=str(tmp_path / "out"),
                        runner="dask", beam_flags=[f"--dask_client_address={c.address}"])
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert "dask worker worker-0" in message and f"cannot read manual_dir s3://{BUCKET}/mri_volumes" in message
    assert "AWS_ACCESS_KEY_ID" in message and "no AWS_* variable" in message and "dask worker" in message
    assert s3.secret_key not in message
    assert elapsed < 60
    assert not glob.glob(str(tmp_path / "out" / "mri_volumes" / "small_32" / "*" / "*.tfrecord*"))


def test_workers_that_cannot_import_vidvol_get_one_error_naming_them_and_the_fix(tmp_path):
    bare = installed.InstalledEnv.bare(tmp_path / "bare_env")  # the dependencies, not vidvol
    with _installed_cluster(bare, tmp_path, 1, {}) as c:
        start = time.monotonic()
        with pytest.raises(dask_cluster.WorkerSetupError) as info:
            build.build("mri_volumes/small_32", manual_dir=mri_dummy.DUMMY_DIR, data_dir=str(tmp_path / "out"),
                        runner="dask", beam_flags=[f"--dask_client_address={c.address}"])
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert "dask worker worker-0" in message and "cannot import vidvol" in message
    assert "No module named 'vidvol'" in message and "pip install vidvol-" in message and "bare_env" in message
    assert elapsed < 60


def test_workers_sharing_only_the_bucket_build_from_it_into_it(cluster, s3, tmp_path, monkeypatch):
    """Raw data and output in the bucket, workers from the wheel venv each with its own folder and TMPDIR: the
    bucket's dataset is the direct local build's, file for file and as vidvol.load batches; no worker kept a shard."""
    import numpy as np

    import vidvol

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("VIDVOL_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("VIDVOL_CACHE_DIR", str(tmp_path / "cache"))
    dataset, url, out = "mri_volumes/small_32", f"s3://{BUCKET}/mri_volumes", f"s3://{BUCKET}/out-wheel"
    local = build.build(dataset, manual_dir=url, data_dir=str(tmp_path / "local"),
                        beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    remote = build.build(dataset, manual_dir=url, data_dir=out, runner="dask",
                         beam_flags=[f"--dask_client_address={cluster.address}"])
    assert remote.built and remote.splits == local.splits
    client, prefix = s3.client(), "out-wheel/mri_volumes/small_32/2.0.0/"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="out-wheel/")["Contents"]]
    assert all(k.startswith(prefix) for k in keys), keys  # nothing but the published version
    for name in sorted(os.listdir(local.data_path)):
        if ".tfrecord-" in name or name in ("shards.json", "skip_report.json"):
            body = client.get_object(Bucket=BUCKET, Key=prefix + name)["Body"].read()
            with open(os.path.join(local.data_path, name), "rb") as f:
                assert body == f.read(), name
    read = lambda data_dir: [tuple(np.asarray(t) for t in tf.nest.flatten(b)) for b in vidvol.load(
        dataset, "train", 1, data_dir=data_dir, seed=2, repeat=False)]
    want, got = read(str(tmp_path / "local")), read(out)
    assert len(want) == len(got) > 0
    for a, b in zip(want, got):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    homes = glob.glob(os.path.join(os.path.dirname(cluster.log_dir), "worker_home", "worker-*"))
    assert len(homes) == 2
    for home in homes:
        left = [p for p in glob.glob(os.path.join(home, "**", "*"), recursive=True)
                if ".tfrecord-" in os.path.basename(p) or "vidvol-shard-" in os.path.basename(p)]
        assert left == [], left
