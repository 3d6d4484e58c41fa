"""Cluster stand-in: a Beam job service + external SDK worker pool on loopback; PortableRunner output == direct."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.beam_jobs import build
from vidvol.beam_jobs import local_cluster
from vidvol.datasets.hmdb51 import make_dummy_data

pytestmark = pytest.mark.slow  # subprocess builds/CLIs: `make test` runs them, `make test-fast` does not

DATASET = "hmdb51/split1_20x64x64"


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """Job service + worker pool for this module; both process groups are always stopped."""
    log_dir = str(tmp_path_factory.mktemp("portable_logs"))
    context = local_cluster.local_portable_services(log_dir=log_dir)
    running = context.__enter__()
    try:
        yield running
    finally:
        context.__exit__(None, None, None)
        for pid in (running.job_service_pid, running.worker_pool_pid):
            assert not _alive(pid), f"service {pid} still running"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of a process."""
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN]


def _records(data_path: str) -> dict[str, list[bytes]]:
    return {n: list(tf.data.TFRecordDataset(os.path.join(data_path, n)).as_numpy_iterator())
            for n in sorted(os.listdir(data_path)) if ".tfrecord-" in n}


def _video_ids(records: list[bytes]) -> list[str]:
    return [tf.train.Example.FromString(r).features.feature["video_id"].bytes_list.value[0].decode() for r in records]


def test_services_listen_on_loopback_only(services):
    port = int(services.job_endpoint.rsplit(":", 1)[1])
    pool_port = int(services.worker_pool_endpoint.rsplit(":", 1)[1])
    job = [a for a, p in _listening(services.job_service_pid) if p == port]
    pool = [a for a, p in _listening(services.worker_pool_pid) if p == pool_port]
    assert job and pool
    for address in job + pool:
        assert _ip(address).is_loopback, f"{address} is not a loopback address"
    assert [str(_ip(a)) for a in pool] == ["127.0.0.1"]


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, with an IPv4-mapped IPv6 address (gRPC's dual-stack sockets) as plain IPv4."""
    ip = ipaddress.ip_address(address)
    return (ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else ip


def test_portable_build_equals_direct_build(services, tmp_path):
    manual = tmp_path / "manual"
    shutil.copytree(make_dummy_data.DUMMY_DIR, manual)
    direct = build.build(DATASET, manual_dir=str(manual), data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=2"])
    portable = build.build(DATASET, manual_dir=str(manual), data_dir=str(tmp_path / "portable"), runner="portable",
                           beam_flags=services.flags(num_workers=2))
    assert portable.built and portable.splits == direct.splits
    assert portable.skipped == direct.skipped == []
    info_d = json.load(open(os.path.join(direct.data_path, "dataset_info.json")))
    info_p = json.load(open(os.path.join(portable.data_path, "dataset_info.json")))
    assert info_p["splits"] == info_d["splits"]  # names, shard lengths, num_bytes
    rec_d, rec_p = _records(direct.data_path), _records(portable.data_path)
    assert list(rec_p) == list(rec_d) and len(rec_d) == sum(s["shards"] for s in direct.splits.values())
    for name in rec_d:
        assert _video_ids(rec_p[name]) == _video_ids(rec_d[name])  # example keys, in order
        assert rec_p[name] == rec_d[name], f"{name}: serialized records differ"
    assert sum(len(r) for r in rec_d.values()) == 9
    # The job really went through the services: the job service log names the finished job.
    with open(os.path.join(services.log_dir, "job_service.log")) as f:
        assert "with state DONE" in f.read()


@pytest.mark.long
def test_portable_array_record_build_holds_the_direct_builds_records(services, tmp_path):
    """`--file_format array_record` on the portable runner: the direct TFRecord build's records, shard for shard."""
    import array_record_testing  # tests/ is on sys.path via conftest

    direct = build.build(DATASET, manual_dir=make_dummy_data.DUMMY_DIR, data_dir=str(tmp_path / "direct"),
                         beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    portable = build.build(DATASET, manual_dir=make_dummy_data.DUMMY_DIR, data_dir=str(tmp_path / "portable"),
                           runner="portable", beam_flags=services.flags(num_workers=2), file_format="array_record")
    assert portable.splits == direct.splits
    assert array_record_testing.array_record_records(portable.data_path) == _records(direct.data_path)


def test_a_service_that_dies_is_reported_with_its_log(tmp_path):
    log = str(tmp_path / "svc.log")
    with pytest.raises(RuntimeError, match=r"exited with 3 before serving(.|\n)*port in use, say"):
        local_cluster.start_service(
            [sys.executable, "-c", "import sys; print('port in use, say', flush=True); sys.exit(3)"],
            port=local_cluster.free_port(), log_path=log, env=dict(os.environ), timeout=30,
        )


def test_stopping_a_service_kills_its_whole_process_group():
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    children: list[psutil.Process] = []
    while not children and time.monotonic() < deadline:
        children = psutil.Process(proc.pid).children()
        time.sleep(0.05)
    assert len(children) == 1
    local_cluster.stop_process_group(proc, timeout=5)
    assert proc.returncode is not None
    deadline = time.monotonic() + 10
    while _alive(children[0].pid) and time.monotonic() < deadline:  # the orphan dies with its group
        time.sleep(0.05)
    assert not _alive(children[0].pid)
