"""The build lease in a bucket (a real S3 server, SeaweedFS): conditional writes, renewal, expiry, takeover, loss."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from services import SeaweedS3
from vidvol.builders.writer import build_lock, lease
from vidvol.core import store

BUCKET = "vidvol-lease"


@pytest.fixture(scope="module")
def server():
    with SeaweedS3(buckets=(BUCKET,)) as s3:
        yield s3


@pytest.fixture
def s3(server, monkeypatch):
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    for name in (lease.ENV_LEASE, lease.ENV_RENEW, lease.ENV_EXPIRY, build_lock.ENV_MODE, build_lock.ENV_TIMEOUT):
        monkeypatch.delenv(name, raising=False)
    return server


def _url(request) -> str:
    return f"s3://{BUCKET}/{request.node.name}/toy/build_1.0.0.lock"


@pytest.mark.slow
def test_the_store_makes_conditional_writes(s3, request):
    """What the lease stands on, probed on the server: If-None-Match: * and If-Match on PUT and DELETE."""
    url = _url(request)
    first = store.put_conditional(url, b"a", etag=None)
    with pytest.raises(store.PreconditionFailedError):
        store.put_conditional(url, b"b", etag=None)  # exists
    second = store.put_conditional(url, b"c", etag=first)
    assert second != first and store.read_with_etag(url) == (b"c", second)
    with pytest.raises(store.PreconditionFailedError):
        store.put_conditional(url, b"d", etag=first)  # stale ETag
    assert store.remove_conditional(url, first) is False and store.exists(url)
    assert store.remove_conditional(url, second) is True and store.read_with_etag(url) is None
    with pytest.raises(store.PreconditionFailedError):
        store.put_conditional(url, b"e", etag=second)  # gone

    race = url + ".race"
    base = store.put_conditional(race, b"base", etag=None)

    def over(i):
        try:
            store.put_conditional(race, str(i).encode(), etag=base)
            return i
        except store.PreconditionFailedError:
            return None

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        winners = [w for w in pool.map(over, range(32)) if w is not None]
    assert len(winners) == 1 and store.read_with_etag(race)[0] == str(winners[0]).encode()


def test_bad_lease_settings_are_refused_naming_the_smallest_that_works(monkeypatch):
    monkeypatch.setenv(lease.ENV_RENEW, "5")
    monkeypatch.setenv(lease.ENV_EXPIRY, "7")
    with pytest.raises(ValueError, match=r"VIDVOL_LEASE_EXPIRY_S=7: .* smallest expiry that works is 10"):
        lease.settings()
    monkeypatch.setenv(lease.ENV_RENEW, "0")
    with pytest.raises(ValueError, match="VIDVOL_LEASE_RENEW_S=0: .* must be positive"):
        lease.settings()
    monkeypatch.delenv(lease.ENV_RENEW)
    monkeypatch.delenv(lease.ENV_EXPIRY)
    assert lease.settings() == (lease.RENEW_S, lease.EXPIRY_S) == (10.0, 60.0)


@pytest.mark.slow
def test_a_renewed_lease_is_never_taken_and_is_removed_at_release(s3, request, caplog):
    url = _url(request)
    holder = lease.BucketLease(url, what="toy/a", renew_s=0.2, expiry_s=1.0)
    holder.acquire()
    try:
        first = lease.read(url)
        with pytest.raises(build_lock.BuildInProgressError, match=rf"pid {os.getpid()}.*{BUCKET}"):
            lease.BucketLease(url, what="toy/a", mode="fail", renew_s=0.2, expiry_s=1.0).acquire()
        waiter = lease.BucketLease(url, what="toy/a", mode="wait", timeout_s=2.5, renew_s=0.2, expiry_s=1.0)
        began = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(build_lock.BuildInProgressError, match="waited 3 s"):
            waiter.acquire()  # 2.5 s, past the 1 s expiry: the renewals keep the lease its holder's
        assert time.monotonic() - began >= 2.5 and "waiting for it to finish" in caplog.text
        now = lease.read(url)
        assert now[0]["token"] == holder.content["token"] and now[0]["seq"] > first[0]["seq"] and now[1] != first[1]
        holder.check_held()
    finally:
        holder.release()
    assert lease.read(url) is None


_CHILD = textwrap.dedent("""
    import sys, time
    from vidvol.builders.writer import lease
    held = lease.BucketLease(sys.argv[1], what="toy/child", renew_s=0.3, expiry_s=2.0)
    held.acquire()
    print("held", flush=True)
    while held.lost_to is None:
        time.sleep(0.1)
    try:
        held.check_held()
    except Exception as e:
        print(type(e).__name__, e, flush=True)
    held.release()
    print("released", flush=True)
""")


def _child(url: str, s3: SeaweedS3) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, url], env=dict(os.environ, **s3.env()), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow
def test_a_dead_holders_lease_expires_and_one_waiter_takes_it_over(s3, request, caplog):
    url = _url(request)
    proc = _child(url, s3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    dead = lease.read(url)
    assert dead is not None  # a SIGKILL leaves the lease
    waiters = [lease.BucketLease(url, what="toy/w", renew_s=0.3, expiry_s=2.0) for _ in range(3)]
    began = time.monotonic()

    def take(w):
        try:
            w.acquire()
            return w
        except build_lock.BuildInProgressError:
            return None

    with caplog.at_level(logging.WARNING), concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(take, w) for w in waiters]
        first = next(concurrent.futures.as_completed(futures)).result()
        waited = time.monotonic() - began
        assert first is not None and first.took_over["pid"] == proc.pid
        assert waited >= 2.0  # unchanged for the expiry, by the waiter's own clock
        assert "took over the build lease of a build that stopped renewing it" in caplog.text
        time.sleep(3.0)  # the winner renews: no other waiter takes it over
        assert lease.read(url)[0]["token"] == first.content["token"]
        assert sum(f.done() for f in futures) == 1
        first.release()  # now the other waiters take it in turn, each once the one before released it
        pending = [f for f in futures if not f.done()]
        while pending:
            done, _ = concurrent.futures.wait(pending, timeout=30, return_when=concurrent.futures.FIRST_COMPLETED)
            assert len(done) == 1
            (f,) = done
            f.result().release()
            pending.remove(f)
    assert lease.read(url) is None


@pytest.mark.slow
def test_a_holder_whose_lease_was_taken_stops_and_leaves_the_new_lease(s3, request):
    url = _url(request)
    proc = _child(url, s3)
    try:
        os.killpg(proc.pid, signal.SIGSTOP)  # a suspended driver: its renewals stop
        new = lease.BucketLease(url, what="toy/new", renew_s=0.3, expiry_s=2.0)
        new.acquire()
        assert new.took_over["pid"] == proc.pid
        os.killpg(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=60)
        assert "BuildLockLostError" in out and "lost its build lease to another build" in out
        assert f"pid {os.getpid()}" in out and "VIDVOL_LEASE_EXPIRY_S=2" in out and "released" in out
        assert lease.read(url)[0]["token"] == new.content["token"]  # its release removed nothing of the new holder's
        new.check_held()
        new.release()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert lease.read(url) is None


@pytest.mark.slow
def test_the_state_of_a_bucket_build_is_found_from_any_staging_folder(s3, request, tmp_path, caplog, monkeypatch):
    """The lease and the incomplete.* prefixes are read from the bucket, whatever the local staging folder holds."""
    from vidvol.builders.writer import bucket, bucket_state

    url = f"s3://{BUCKET}/{request.node.name}"
    target = bucket.BucketTarget(url, str(tmp_path / "stage"))  # an empty staging folder: another host's
    version = os.path.join(target.staging, "toy", "cfg", "1.0.0")
    for name in ("incomplete.AAA_1.0.0", "incomplete.BBB_1.0.0", "incomplete.CCC_2.0.0", "1.0.0"):
        store.write_bytes(f"{url}/toy/cfg/{name}/x.partial.info.json", b"{}")
    assert bucket_state.in_bucket(target) and not bucket_state.in_bucket(bucket.BucketTarget("memory://b/p", "/x"))
    assert bucket_state.incomplete_prefixes(target, version) == [f"{url}/toy/cfg/incomplete.AAA_1.0.0",
                                                                   f"{url}/toy/cfg/incomplete.BBB_1.0.0"]
    own = os.path.join(target.staging, "toy", "cfg", "incomplete.BBB_1.0.0")
    assert bucket_state.previous_folders(target, own) == [os.path.join(target.staging, "toy", "cfg", "incomplete.AAA_1.0.0")]
    assert bucket_state.lease_url(target, version) == f"{url}/toy/cfg/build_1.0.0.lock"
    assert bucket_state.running_build(target, version) is None
    with bucket_state.hold(version, what="toy/cfg", target=target) as held:
        assert isinstance(held, lease.BucketLease) and store.exists(f"{url}/toy/cfg/build_1.0.0.lock")
        assert not os.path.exists(build_lock.lock_path(version))  # nothing on this driver
        assert f"pid {os.getpid()}" in bucket_state.running_build(target, version)
    assert not store.exists(f"{url}/toy/cfg/build_1.0.0.lock")
    other = bucket.BucketTarget("memory://vidvol-lease/p", str(tmp_path / "mem"))
    with caplog.at_level(logging.WARNING), bucket_state.hold(os.path.join(other.staging, "t", "1.0.0"), what="t",
                                                               target=other) as held:
        assert isinstance(held, build_lock.BuildLock)  # no conditional writes there: the driver's lock, said so
    assert "memory:// has no conditional writes in vidvol" in caplog.text and "stay on this driver" in caplog.text
    monkeypatch.setenv(lease.ENV_LEASE, "0")  # a store that ignores the conditions: the driver's lock, said so
    with caplog.at_level(logging.WARNING), bucket_state.hold(version, what="toy/cfg", target=target) as held:
        assert isinstance(held, build_lock.BuildLock) and not store.exists(f"{url}/toy/cfg/build_1.0.0.lock")
    assert "VIDVOL_BUCKET_LEASE=0, so this bucket build's lock and resume state stay on this driver" in caplog.text


@pytest.mark.slow
def test_in_fail_mode_a_lease_whose_clock_says_dead_is_watched_for_the_expiry_then_taken(s3, request, caplog):
    url = _url(request)
    then = time.time() - 100
    store.put_conditional(url, json.dumps({"host": "gone", "pid": 7, "token": "t", "started": then, "renewed": then,
                                           "seq": 1, "expiry_s": 2.0}).encode(), etag=None)
    taker = lease.BucketLease(url, what="toy/f", mode="fail", renew_s=0.3, expiry_s=2.0)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING):
        taker.acquire()  # not refused: its holder's own clock says it stopped renewing 100 s ago
    try:
        assert time.monotonic() - began >= 2.0 and taker.took_over["host"] == "gone"
        assert "the build lease looks expired (host gone, pid 7" in caplog.text
    finally:
        taker.release()
