"""Bucket builds by real driver processes (SeaweedFS): a build killed on one host is finished from another, and two
live drivers never both publish.

Each driver (`lease_driver.py`) runs in its own working folder with its own TMPDIR, as a second host would: it
shares nothing with the first but the bucket.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

import resume_toy
from resume_toy import NAME
from services import SeaweedS3
from vidvol.builders.writer import lease
from vidvol.core import store

pytestmark = pytest.mark.slow  # a SeaweedFS server and driver processes (each ~30 s of imports on a busy machine)

BUCKET = "vidvol-lease-builds"
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lease_driver.py")
SHORT_LEASE = {lease.ENV_RENEW: "1", lease.ENV_EXPIRY: "6"}


def _published(url: str) -> dict[str, bytes]:
    """Every object of a published version prefix, by name (build.json without its timestamps and runner)."""
    out = {}
    for obj in store.find(url):
        name = obj[len(url) + 1:]
        out[name] = store.read_bytes(obj)
        if name == "build.json":
            doc = json.loads(out[name])
            out[name] = json.dumps({k: v for k, v in doc.items() if k not in resume_toy.TIMES}, sort_keys=True).encode()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The server, the inputs, and the objects of an uninterrupted bucket build (built in this process)."""
    root = tmp_path_factory.mktemp("lease_builds")
    manual = str(root / "manual")
    resume_toy.write_inputs(manual)
    with SeaweedS3(buckets=(BUCKET,)) as server:
        saved = {k: os.environ.get(k) for k in server.env()}
        os.environ.update(server.env())
        try:
            resume_toy.build(str(root / "stage_ref"), manual, bucket_url=f"s3://{BUCKET}/ref")
            reference = _published(f"s3://{BUCKET}/ref/{NAME}/1.0.0")
            assert "dataset_info.json" in reference and any(".tfrecord-" in n for n in reference)
            yield {"server": server, "manual": manual, "reference": reference, "decoded": resume_toy.GATE["count"]}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class Host:
    """A driver host: its own working folder and TMPDIR (so its own staging folder)."""

    def __init__(self, root, name: str, world: dict, **env: str):
        self.cwd = root / name
        (self.cwd / "tmp").mkdir(parents=True)
        self.result = str(self.cwd / "result.json")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RESUME_TOY_", "VIDVOL_"))}
        self.env.update(world["server"].env(), TMPDIR=str(self.cwd / "tmp"), TF_CPP_MIN_LOG_LEVEL="2", **env)
        self.proc: subprocess.Popen | None = None

    def start(self, url: str, world: dict) -> subprocess.Popen:
        self.log = str(self.cwd / "driver.log")  # a file, not a pipe: a driver held at a gate never blocks on it
        with open(self.log, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen([sys.executable, DRIVER, url, world["manual"], self.result], cwd=self.cwd,
                                         env=self.env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        return self.proc

    def stderr(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def finish(self, timeout: float = 400) -> tuple[dict, str]:
        self.proc.wait(timeout=timeout)
        assert os.path.exists(self.result), self.stderr()[-3000:]
        with open(self.result, encoding="utf-8") as f:
            return json.load(f), self.stderr()

    def wait_for(self, path: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                pytest.fail(f"driver exited {self.proc.returncode} early:\n{self.stderr()[-3000:]}")
            assert time.monotonic() < deadline, f"timed out waiting for {path}"
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=60)


def _leftovers(url: str) -> list[str]:
    return [o for o in store.find(url) if "/incomplete." in o or o.endswith(".lock") or o.endswith(".publishing")]


def test_a_build_killed_on_one_host_is_finished_from_another(world, tmp_path):
    url = f"s3://{BUCKET}/crosshost"
    one = Host(tmp_path, "host1", world, RESUME_TOY_STOP_AT="source:13", RESUME_TOY_MARKER=str(tmp_path / "stopped"),
               **SHORT_LEASE)
    two = Host(tmp_path, "host2", world, **SHORT_LEASE)
    try:
        one.start(url, world)
        one.wait_for(str(tmp_path / "stopped"))  # mid-shard: two shards whole, a third being written
        one.signal(signal.SIGKILL)
        assert one.proc.wait(timeout=60) == -signal.SIGKILL
        dead = lease.read(f"{url}/{NAME}/build_1.0.0.lock")
        assert dead is not None and dead[0]["pid"] == one.proc.pid  # the dead driver's lease stays in the bucket
        whole = [o for o in store.find(url) if o.endswith(".partial.info.json")]
        assert len(whole) == 2
        began = time.monotonic()
        two.start(url, world)
        result, err = two.finish()
    finally:
        one.kill()
        two.kill()
    assert "error" not in result, result
    assert "took over the build lease of a build that stopped renewing it" in err and f"pid {one.proc.pid}" in err
    assert time.monotonic() - began >= 6  # it waited for the dead lease to expire
    assert result["staging"].startswith(str(two.cwd / "tmp"))  # its own staging folder: nothing of host1's
    assert result["resumed"] == [2, resume_toy.SHARDS] and f"resuming: 2 of {resume_toy.SHARDS} shards kept" in err
    assert result["decoded"] == world["decoded"] - 10  # the kept shards' 10 inputs were not decoded again
    assert _published(f"{url}/{NAME}/1.0.0") == world["reference"]
    assert _leftovers(url) == []  # no incomplete prefix, no lease


def test_a_second_live_driver_waits_and_reuses_what_the_first_publishes(world, tmp_path):
    url = f"s3://{BUCKET}/twolive"
    one, two = Host(tmp_path, "host1", world), Host(tmp_path, "host2", world,
                                                    LEASE_DRIVER_WAITING=str(tmp_path / "waiting"))
    try:
        one.start(url, world)
        deadline = time.monotonic() + 300
        while lease.read(f"{url}/{NAME}/build_1.0.0.lock") is None:
            assert one.proc.poll() is None and time.monotonic() < deadline, one.stderr()[-3000:]
            time.sleep(0.05)
        one.signal(signal.SIGSTOP)  # held mid-build (for less than its 60 s lease) until the second driver waits
        two.start(url, world)
        two.wait_for(str(tmp_path / "waiting"))
        one.signal(signal.SIGCONT)
        first, _ = one.finish()
        second, err = two.finish()
    finally:
        one.kill()
        two.kill()
    assert "error" not in first and "error" not in second, (first, second)
    assert first["reused_from"] is None and first["decoded"] == world["decoded"]
    assert f"pid {first['pid']}" in second["reused_from"] and second["decoded"] == 0  # it published nothing
    assert _published(f"{url}/{NAME}/1.0.0") == world["reference"]
    assert _leftovers(url) == []


def test_a_driver_whose_lease_was_taken_over_does_not_publish(world, tmp_path):
    url = f"s3://{BUCKET}/takeover"
    one = Host(tmp_path, "host1", world, RESUME_TOY_STOP_AT="source:13", RESUME_TOY_MARKER=str(tmp_path / "stopped"),
               **SHORT_LEASE)
    two = Host(tmp_path, "host2", world, **SHORT_LEASE)
    try:
        one.start(url, world)
        one.wait_for(str(tmp_path / "stopped"))
        one.signal(signal.SIGSTOP)  # a driver suspended past its lease (a paused VM, a frozen pod)
        two.start(url, world)
        second, err = two.finish()
        assert "error" not in second, second
        assert second["resumed"] == [2, resume_toy.SHARDS]  # it took the lease over and kept the frozen one's shards
        one.signal(signal.SIGCONT)  # its next renewal finds the lease taken
        # and stops the build at once (a SIGINT to its main thread). The toy's decode waits at its stop point
        # forever, unlike a real one; a main thread blocked on that decode would never see the SIGINT: let it go on.
        (tmp_path / "stopped.go").write_text("go")
        first, first_err = one.finish(timeout=120)
    finally:
        one.kill()
        two.kill()
    assert one.proc.returncode == 3 and first["error"].startswith("BuildLockLostError"), (first, first_err[-2000:])
    # The second driver ended (its lease removed) before the first woke: nobody holds the lease it lost.
    assert "lost its build lease to nobody" in first["error"] and "took it over and ended" in first["error"]
    assert "stops before publishing" in first["error"] and "the build lease was taken over" in first_err
    assert _published(f"{url}/{NAME}/1.0.0") == world["reference"]
    assert _leftovers(url) == []


def test_the_publish_lock_of_a_driver_killed_while_publishing_goes_with_its_lease(world, tmp_path, monkeypatch, caplog):
    """A driver killed while publishing leaves its lease and its publish lock: the build that takes the expired lease
    over removes that publish lock (its owner's lease is the one it took), and publishes."""
    url = f"s3://{BUCKET}/killedpublishing"
    for key, value in SHORT_LEASE.items():
        monkeypatch.setenv(key, value)
    then = time.time() - 100
    dead = {"host": "elsewhere", "pid": 1, "token": "dead-token", "started": then, "renewed": then, "seq": 9,
            "renew_s": 1.0, "expiry_s": 6.0}
    store.put_conditional(f"{url}/{NAME}/build_1.0.0.lock", json.dumps(dead).encode(), etag=None)
    store.write_bytes(f"{url}/{NAME}/1.0.0.publishing", json.dumps({"host": "elsewhere", "pid": 1, "lease": "dead-token"}).encode())
    with caplog.at_level(logging.WARNING):
        resume_toy.build(str(tmp_path / "stage"), world["manual"], bucket_url=url)
    assert "took over the build lease of a build that stopped renewing it" in caplog.text
    assert "removing the publish lock left by the build whose expired lease this one took over" in caplog.text
    assert _published(f"{url}/{NAME}/1.0.0") == world["reference"]
    assert _leftovers(url) == []
