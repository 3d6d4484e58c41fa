"""LocalDaskCluster: real scheduler + worker processes; Beam's DaskRunner on them, with a worker SIGKILLed."""

from __future__ import annotations

import collections
import os
import signal
import socket
import sys
import time

import psutil
import pytest

from vidvol.beam_jobs import dask_cluster

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _listen_ips(pid: int) -> set[str]:
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def _pipeline(flags):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    return beam.Pipeline(options=PipelineOptions(flags))


def _file_writer(out_dir: str, sleep_s: float):
    """A DoFn class defined in a function, so cloudpickle ships it by value (the test module is not importable on workers)."""
    import apache_beam as beam

    class WriteOneFile(beam.DoFn):
        def process(self, task):
            with open(os.path.join(out_dir, "_attempts.log"), "a") as f:
                f.write(f"start {task} {os.getpid()}\n")
            time.sleep(sleep_s)
            final = os.path.join(out_dir, f"{task}.txt")
            tmp = f"{final}.{os.getpid()}.partial"
            with open(tmp, "w") as f:
                f.write(task)
            os.replace(tmp, final)
            yield task

    return WriteOneFile()


def _starts(out_dir: str) -> list[tuple[str, int]]:
    path = os.path.join(out_dir, "_attempts.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(t, int(pid)) for _, t, pid in (line.split() for line in f if line.strip())]


def test_cluster_processes_ports_and_cleanup(tmp_path):
    t0 = time.monotonic()
    with dask_cluster.LocalDaskCluster(2, log_dir=str(tmp_path)) as cluster:
        started = time.monotonic() - t0
        ident = dask_cluster.check_reachable(cluster.address)
        assert ident["type"] == "Scheduler" and len(ident["workers"]) == 2
        assert cluster.address.startswith("tcp://127.0.0.1:")
        pids = cluster.process_pids()
        workers = cluster.worker_pids()
        # --no-nanny: the processes started here are the ones that run tasks.
        assert sorted(workers.values()) == sorted(pids[f"worker-{i}"] for i in range(2))
        for pid in pids.values():
            ips = _listen_ips(pid)
            assert ips and ips <= {"127.0.0.1"}, f"pid {pid} listens on {ips}"
        assert {"scheduler.log", "worker-0.log", "worker-1.log"} <= set(os.listdir(tmp_path))
    assert started < 30
    assert not [pid for pid in pids.values() if _alive(pid)]
    assert cluster.process_pids() == {}


def test_check_reachable_names_the_address_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=f"tcp://127.0.0.1:{closed}"):
        dask_cluster.check_reachable(f"tcp://127.0.0.1:{closed}", timeout=5)
    assert time.monotonic() - t0 < 5
    with socket.socket() as silent:  # accepts TCP, never speaks dask
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=address):
            dask_cluster.check_reachable(address, timeout=2)
        assert time.monotonic() - t0 < 5
    with pytest.raises(ConnectionError, match="not a dask scheduler address"):
        dask_cluster.check_reachable("no-port-here")


def test_dask_runner_survives_a_sigkilled_worker(tmp_path):
    tasks = [f"task{i}" for i in range(8)]
    out = tmp_path / "out"
    out.mkdir()
    with dask_cluster.LocalDaskCluster(2, log_dir=str(tmp_path / "logs")) as cluster:
        # One partition per task; without it DaskRunner puts all 8 in one partition (one worker, serial).
        p = _pipeline(cluster.dask_runner_flags() + ["--dask_npartitions=8"])
        import apache_beam as beam

        _ = p | beam.Create(tasks) | beam.Reshuffle() | beam.ParDo(_file_writer(str(out), 1.0))
        result = p.run()
        try:
            deadline = time.monotonic() + 60
            while len(_starts(str(out))) < 3:
                assert time.monotonic() < deadline, "tasks did not start"
                time.sleep(0.05)
            victim = _starts(str(out))[-1][1]
            assert victim in cluster.worker_pids().values()
            os.kill(victim, signal.SIGKILL)
            assert result.wait_until_finish(duration=120_000) == "DONE"
        finally:
            result.client.close()
        with pytest.raises(NotImplementedError):
            result.metrics()
        survivors = cluster.worker_pids()
    assert sorted(p.name for p in out.glob("*.txt")) == sorted(f"{t}.txt" for t in tasks)
    assert all((out / f"{t}.txt").read_text() == t for t in tasks)
    starts = collections.Counter(t for t, _ in _starts(str(out)))
    assert set(starts) == set(tasks)
    assert sum(starts.values()) > len(tasks)  # the killed worker's task (at least) ran again
    assert victim not in survivors.values() and len(survivors) == 1


def test_nanny_restarts_a_killed_worker(tmp_path):
    with dask_cluster.LocalDaskCluster(2, log_dir=str(tmp_path), nanny=True) as cluster:
        before = cluster.worker_pids()
        nannies = [pid for name, pid in cluster.process_pids().items() if name.startswith("worker")]
        assert len(before) == 2 and not set(before.values()) & set(nannies)
        for pid in [*before.values(), *nannies]:
            assert _listen_ips(pid) <= {"127.0.0.1"}
        victim = sorted(before.values())[0]
        assert psutil.Process(victim).ppid() in nannies
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            now = cluster.worker_pids()
            if len(now) == 2 and victim not in now.values():
                break
            assert time.monotonic() < deadline, f"no restart: {now}"
            time.sleep(0.2)
        children = [c.pid for n in nannies for c in psutil.Process(n).children(recursive=True)]
    assert not [pid for pid in [*nannies, *now.values(), *children] if _alive(pid)]


def test_workers_import_vidvol_and_see_env(tmp_path):
    """A vidvol module-level function is pickled by reference and imported on the worker; env reaches workers."""
    import apache_beam as beam

    with dask_cluster.LocalDaskCluster(1, log_dir=str(tmp_path), env={"VIDVOL_DASK_TEST": "on-worker"}) as cluster:
        p = _pipeline(cluster.dask_runner_flags())
        _ = p | beam.Create([[str(tmp_path)]]) | beam.Map(dask_cluster.driver_pythonpath)  # one element: a path list
        result = p.run()
        try:
            assert result.wait_until_finish(duration=120_000) == "DONE"
        finally:
            result.client.close()
        from distributed import Client

        with Client(cluster.address) as client:
            seen = client.run(lambda: ("vidvol.beam_jobs.dask_cluster" in sys.modules, os.environ.get("VIDVOL_DASK_TEST")))
    assert list(seen.values()) == [(True, "on-worker")]


def test_beam_workers_write_s3_with_env_credentials(tmp_path):
    """DaskRunner workers reach SeaweedFS with only AWS_* variables (no storage_options in the DoFn)."""
    import apache_beam as beam
    import fsspec
    import services  # tests/ is on sys.path via conftest

    def put(i):
        import fsspec

        with fsspec.open(f"s3://vidvol-test/out/{i}.txt", "w") as f:
            f.write(f"{i}:{os.getpid()}")
        return i

    with services.SeaweedS3() as s3, dask_cluster.LocalDaskCluster(2, log_dir=str(tmp_path), env=s3.env()) as cluster:
        p = _pipeline(cluster.dask_runner_flags() + ["--dask_npartitions=4"])
        _ = p | beam.Create(list(range(4))) | beam.Map(put)
        result = p.run()
        try:
            assert result.wait_until_finish(duration=120_000) == "DONE"
        finally:
            result.client.close()
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3.storage_options)
        written = {k.rsplit("/", 1)[1]: fs.cat(k).decode() for k in fs.find("vidvol-test/out")}
        worker_pids = set(cluster.worker_pids().values())
    assert sorted(written) == [f"{i}.txt" for i in range(4)]
    assert {int(v.split(":")[1]) for v in written.values()} <= worker_pids
