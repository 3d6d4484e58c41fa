"""The build lock under contention: waiters racing for one stale lock (threads and processes), holders in
another PID namespace, and a build that lost its lock stopping before TFDS's final rename."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.beam_jobs import build as build_cli
from vidvol.builders.writer import build_lock
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples

DATASET = "mri_volumes/small_32"
MODULE_FILE = pathlib.Path(build_lock.__file__)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _here() -> dict:
    return {"host": socket.gethostname(), "boot_id": build_lock.boot_id(), "pid_ns": build_lock.pid_namespace()}


def _write_lock(path, **content) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f)


def _stale_lock(path, kind: str) -> None:
    """A lock left by a dead build: its process gone (same host, boot, namespace), or its heartbeat old."""
    if kind == "dead_pid":
        _write_lock(path, **_here(), pid=_dead_pid(), started=time.time(), heartbeat=time.time(), token="dead")
    else:
        _write_lock(path, host="node-7", pid=1, started=time.time() - 900, heartbeat=time.time() - 600, token="old")


def test_the_lock_records_boot_id_and_pid_namespace(tmp_path):
    path = str(tmp_path / "build_1.0.0.lock")
    lock = build_lock.BuildLock(path, what="x")
    lock.acquire()
    try:
        held = build_lock.read(path)
        assert held["boot_id"] == pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert held["pid_ns"] == os.readlink("/proc/self/ns/pid")
        assert build_lock.same_process_space(held)
    finally:
        lock.release()


@pytest.mark.parametrize("other", ["pid_namespace", "boot", "old_format"])
def test_a_holder_whose_pid_means_nothing_here_is_judged_by_its_heartbeat(tmp_path, other):
    """Same host name, a pid that is not running here: in another PID namespace (a container with host
    networking), another boot, or a lock without these fields, it is live while its heartbeat is fresh."""
    path = str(tmp_path / "cfg" / "build_1.0.0.lock")
    holder = {**_here(), "pid": _dead_pid(), "started": time.time() - 30, "token": "live"}
    if other == "pid_namespace":
        holder["pid_ns"] = "pid:[4026599999]"
    elif other == "boot":
        holder["boot_id"] = "00000000-0000-0000-0000-000000000000"
    else:
        del holder["boot_id"], holder["pid_ns"]
    _write_lock(path, **holder, heartbeat=time.time() - 5)
    assert build_lock.stale_reason(build_lock.read(path), stale_s=120) is None
    with pytest.raises(build_lock.BuildInProgressError, match=f"pid {holder['pid']}"):
        build_lock.BuildLock(path, what="x", mode="fail").acquire()
    assert build_lock.read(path)["token"] == "live"  # untouched
    _write_lock(path, **holder, heartbeat=time.time() - 600)  # its heartbeat stopped: now it is stale
    assert "heartbeat stopped" in build_lock.stale_reason(build_lock.read(path), stale_s=120)


def test_remove_incomplete_leaves_a_live_build_in_another_namespace_alone(tmp_path, monkeypatch, caplog):
    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    samples.write_mri_volumes(str(manual), num_subjects=3, shape=(8, 8, 8))
    data_path = tfds.builder(DATASET, data_dir=str(data_dir)).data_path
    incomplete = data_path.parent / f"incomplete.abc123_{data_path.name}"
    incomplete.mkdir(parents=True)
    (incomplete / "shard.partial").write_bytes(b"being written")
    _write_lock(build_lock.lock_path(data_path), **{**_here(), "pid_ns": "pid:[4026599999]"}, pid=_dead_pid(),
                started=time.time() - 60, heartbeat=time.time() - 3, token="container")
    monkeypatch.setenv(build_lock.ENV_MODE, "fail")
    with caplog.at_level(logging.WARNING), pytest.raises(build_lock.BuildInProgressError):
        build_cli.build(DATASET, manual_dir=str(manual), data_dir=str(data_dir), remove_incomplete=True)
    assert (incomplete / "shard.partial").read_bytes() == b"being written"
    assert "is left alone" in caplog.text


def test_a_takeover_never_deletes_a_lock_it_did_not_judge_stale(tmp_path):
    """A waiter that read the stale lock, then lost the race: what it would take over is now a fresh lock."""
    path = str(tmp_path / "build_1.0.0.lock")
    _stale_lock(path, "dead_pid")
    old, old_ident = build_lock._read_local(path)
    winner = build_lock.BuildLock(path, what="winner", mode="fail")
    winner.acquire()  # takes the stale lock over
    try:
        assert not build_lock._take_over_local(path, old, old_ident, "late")
        assert build_lock.read(path)["token"] == winner.content["token"]
        assert sorted(os.listdir(tmp_path)) == ["build_1.0.0.lock"]  # no claim or moved file left
    finally:
        winner.release()


def test_an_abandoned_takeover_claim_does_not_block_forever(tmp_path, monkeypatch):
    path = str(tmp_path / "build_1.0.0.lock")
    _stale_lock(path, "old_heartbeat")
    holder, ident = build_lock._read_local(path)
    # A waiter that died right after claiming: its claim (a hard link of the stale lock) stays.
    name = build_lock.hashlib.sha256(repr((holder.get("token"), ident)).encode()).hexdigest()[:16]
    os.link(path, f"{path}.takeover-{name}")
    with pytest.raises(build_lock.BuildInProgressError, match="timeout|waited"):
        build_lock.BuildLock(path, what="x", timeout_s=0.3).acquire()  # the claim is fresh: nobody takes over
    monkeypatch.setattr(build_lock, "CLAIM_ABANDONED_S", 0.0)
    lock = build_lock.BuildLock(path, what="x", mode="fail")
    lock.acquire()
    assert build_lock.read(path)["token"] == lock.content["token"]
    lock.release()
    assert os.listdir(tmp_path) == []


def _race_threads(path: str, n: int) -> list[str]:
    """`n` threads take one lock at once in fail mode; each says won or lost (the winners hold until all said)."""
    start, said = threading.Barrier(n), threading.Barrier(n)
    outcome: list[str] = []
    locks: list[build_lock.BuildLock] = []

    def contend() -> None:
        lock = build_lock.BuildLock(path, what="racer", mode="fail")
        start.wait()
        try:
            lock.acquire()
            outcome.append("won")
            locks.append(lock)
        except build_lock.BuildInProgressError:
            outcome.append("lost")
        said.wait()

    threads = [threading.Thread(target=contend) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for lock in locks:
        lock.release()
    return outcome


@pytest.mark.parametrize("kind", ["dead_pid", "old_heartbeat"])
def test_threads_racing_for_one_stale_lock_have_exactly_one_winner(tmp_path, kind):
    for round_ in range(40):
        path = str(tmp_path / f"r{round_}" / "build_1.0.0.lock")
        _stale_lock(path, kind)
        outcome = _race_threads(path, 8)
        assert sorted(outcome) == ["lost"] * 7 + ["won"], (round_, outcome)
        assert os.listdir(os.path.dirname(path)) == []  # the winner released; no claim or moved file left


_RACER = r"""
import importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("build_lock", sys.argv[1])
build_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_lock)
root, me, n, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def wait_for(predicate):
    deadline = time.monotonic() + 60
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit("timed out at a barrier")
        time.sleep(0.0005)

for r in range(rounds):
    folder = os.path.join(root, f"r{r}")
    open(os.path.join(folder, f"ready.{me}"), "w").close()
    wait_for(lambda: sum(name.startswith("ready.") for name in os.listdir(folder)) == n)
    lock = build_lock.BuildLock(os.path.join(folder, "lock", "build_1.0.0.lock"), what=me, mode="fail")
    try:
        lock.acquire()
        won = True
    except build_lock.BuildInProgressError:
        won = False
    with open(os.path.join(folder, f"said.{me}"), "w") as f:
        f.write("won" if won else "lost")
    wait_for(lambda: sum(name.startswith("said.") for name in os.listdir(folder)) == n)
    if won:
        lock.release()
"""


@pytest.mark.slow  # several Python processes, many rounds
def test_processes_racing_for_one_stale_lock_have_exactly_one_winner(tmp_path):
    """Separate processes (the build_lock module alone, no TensorFlow) meet at a file barrier each round and race
    for that round's stale lock; exactly one wins every round."""
    n, rounds = 6, 30
    for r in range(rounds):
        _stale_lock(str(tmp_path / f"r{r}" / "lock" / "build_1.0.0.lock"), "dead_pid" if r % 2 else "old_heartbeat")
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    procs = [subprocess.Popen([sys.executable, str(script), str(MODULE_FILE), str(tmp_path), f"p{i}", str(n), str(rounds)],
                              stderr=subprocess.PIPE, text=True) for i in range(n)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * n, errors
    for r in range(rounds):
        folder = tmp_path / f"r{r}"
        said = sorted((folder / f"said.p{i}").read_text() for i in range(n))
        assert said == ["lost"] * (n - 1) + ["won"], (r, said)
        assert os.listdir(folder / "lock") == [], r


def test_a_build_whose_heartbeat_finds_the_lock_taken_stops_there(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(build_lock, "HEARTBEAT_S", 0.1)
    path = str(tmp_path / "build_1.0.0.lock")
    lock = build_lock.BuildLock(path, what="mri_volumes/small_32")
    lock.acquire()
    other = {"host": "node-12", "pid": 4242, "started": 1_700_000_000, "heartbeat": time.time(), "token": "theirs"}
    with caplog.at_level(logging.ERROR, logger=build_lock.__name__):
        _write_lock(path, **other)
        deadline = time.monotonic() + 10
        while lock.lost_to is None and time.monotonic() < deadline:
            time.sleep(0.05)
    assert lock.lost_to == other and "host node-12, pid 4242" in caplog.text
    with pytest.raises(build_lock.BuildLockLostError) as e:
        lock.check_held()
    assert "host node-12, pid 4242, started 2023-11-14T22:13:20+00:00" in str(e.value)
    lock.release()
    assert build_lock.read(path)["token"] == "theirs"  # the other holder's lock stays


def test_a_build_that_lost_its_lock_stops_before_the_final_rename(tmp_path):
    """A real in-process build: while it runs its lock is replaced by another build's; it fails naming that build,
    no version folder appears, TFDS removes its incomplete.* folder, and the other build's lock stays."""
    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    samples.write_mri_volumes(str(manual), num_subjects=4, shape=(8, 8, 8))
    builder = mri.Builder(data_dir=str(data_dir), config="small_32")
    path = build_lock.lock_path(builder.data_path)
    other = {"host": "node-3", "pid": 777, "started": 1_700_000_000, "heartbeat": time.time() + 3600, "token": "other"}
    swapped = threading.Event()

    def take_it() -> None:  # as a waiter that (wrongly) judged this build stale would
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            held = build_lock.read(path)
            if held and held.get("token") != "other":
                _write_lock(path, **other)
                swapped.set()
                return
            time.sleep(0.002)

    thief = threading.Thread(target=take_it)
    thief.start()
    from conftest import in_process_config

    with pytest.raises(build_lock.BuildLockLostError) as e:
        builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    thief.join()
    assert swapped.is_set()
    assert "host node-3, pid 777, started 2023-11-14T22:13:20+00:00" in str(e.value)
    assert "stops before publishing" in str(e.value)
    parent = builder.data_path.parent
    assert not builder.data_path.exists()
    assert not [n for n in os.listdir(parent) if n.startswith("incomplete.")], os.listdir(parent)
    assert build_lock.read(path)["token"] == "other"
