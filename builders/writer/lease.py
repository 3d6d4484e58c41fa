"""The build lock of a bucket data_dir: a lease object in the bucket, renewed by conditional writes, that expires.

A build takes `NAME/CONFIG/build_VERSION.lock` in the bucket with `If-None-Match: *` and renews it every
`VIDVOL_LEASE_RENEW_S` seconds (default 10) with `If-Match:` its last ETag. A waiter takes it over, with
`If-Match:` the ETag it saw, once that ETag has stayed for `VIDVOL_LEASE_EXPIRY_S` seconds (default 60) by
its own clock; a holder that cannot renew gives it up first. docs/clusters.md, "A bucket build that any
host can finish", says more.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from vidvol.builders.writer import build_lock
from vidvol.builders.writer.build_lock import BuildInProgressError, BuildLockLostError
from vidvol.core import redact, store

logger = logging.getLogger(__name__)

ENV_LEASE = "VIDVOL_BUCKET_LEASE"  # 0/off: an s3:// build keeps its lock on the driver (a store without conditions)
ENV_RENEW = "VIDVOL_LEASE_RENEW_S"
ENV_EXPIRY = "VIDVOL_LEASE_EXPIRY_S"
RENEW_S = 10.0
EXPIRY_S = 60.0
REPORT_EVERY_S = 60.0
OK, FAILING, LOST = "ok", "failing", "lost"


class ConditionsIgnoredError(ValueError):
    """The store accepted a conditional write whose condition does not hold (a setup error: the CLI exits 2)."""


def enabled() -> bool:
    """Whether s3:// builds take the lease in the bucket (not when `VIDVOL_BUCKET_LEASE=0`)."""
    return os.environ.get(ENV_LEASE, "").strip().lower() not in ("0", "false", "no", "off")


def settings(renew_s: float | None = None, expiry_s: float | None = None) -> tuple[float, float]:
    """(renewal period, expiry) in seconds: the arguments, else `VIDVOL_LEASE_RENEW_S`/`VIDVOL_LEASE_EXPIRY_S`.

    Raises:
      ValueError: a period that is not positive, or an expiry under twice the period (one late renewal
        would lose the lease), naming the smallest value that works.
    """
    renew = build_lock._float_env(ENV_RENEW, RENEW_S) if renew_s is None else float(renew_s)
    expiry = build_lock._float_env(ENV_EXPIRY, EXPIRY_S) if expiry_s is None else float(expiry_s)
    if not renew > 0:
        raise ValueError(f"{ENV_RENEW}={renew:g}: the lease's renewal period must be positive (e.g. {RENEW_S:g})")
    if expiry < 2 * renew:
        raise ValueError(f"{ENV_EXPIRY}={expiry:g}: a lease must outlive two renewal periods ({ENV_RENEW}={renew:g}), "
                         f"so that one late renewal does not lose it; the smallest expiry that works is {2 * renew:g}")
    return renew, expiry


def _iso(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return "?"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def describe(holder: dict[str, Any] | None, url: str) -> str:
    """`host H, pid P, started T, last renewed T (lease s3://...)`, the URL without credentials."""
    where = f"lease {redact.url(url)}"
    if not holder:
        return where
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, started {_iso(holder.get('started'))}, "
            f"last renewed {_iso(holder.get('renewed'))} ({where})")


def read(url: str) -> tuple[dict[str, Any], str] | None:
    """(the lease's content, its ETag); None when there is no lease. An unreadable body reads as {}."""
    got = store.read_with_etag(url)
    if got is None:
        return None
    try:
        doc = json.loads(got[0])
    except ValueError:
        doc = {}
    return (doc if isinstance(doc, dict) else {}), got[1]


def looks_live(holder: dict[str, Any], now: float | None = None) -> bool:
    """Whether the holder's own clock says it renewed within its expiry (a hint only: clocks differ between hosts)."""
    renewed, expiry = holder.get("renewed"), holder.get("expiry_s", EXPIRY_S)
    if not isinstance(renewed, (int, float)) or not isinstance(expiry, (int, float)):
        return True
    return (time.time() if now is None else now) - renewed < expiry


class BucketLease(build_lock.HeldBuild):
    """The lease of one build; `acquire()`, `check_held()` before publishing, then `release()` (or use `hold`).

    The same interface as `build_lock.BuildLock` (`waited_for`, `lost_to`, `on_lost`, `stop_interrupts`).
    """

    def __init__(self, url: str, *, what: str, mode: str | None = None, timeout_s: float | None = None,
                 renew_s: float | None = None, expiry_s: float | None = None):
        self.path = url
        self.what = what
        self.mode = build_lock.mode_from_env(mode)
        self.timeout_s = build_lock._float_env(build_lock.ENV_TIMEOUT, None) if timeout_s is None else timeout_s
        self.renew_s, self.expiry_s = settings(renew_s, expiry_s)
        self.content: dict[str, Any] = {
            "host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex, "build": what,
            "started": time.time(), "renewed": time.time(), "seq": 0, "renew_s": self.renew_s,
            "expiry_s": self.expiry_s,
        }
        self.etag: str | None = None
        self.waited_for: dict[str, Any] | None = None  # the holder this build waited for, if any
        self.took_over: dict[str, Any] | None = None  # the expired holder whose lease this build took
        self.lost_to: dict[str, Any] | None = None  # set once the lease is found not ours ({}: nobody holds it)
        self.lost_because: str | None = None
        self.on_lost: Callable[[], None] | None = None  # called (under the mutex) when the renewal finds it lost
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._mutex = threading.Lock()
        self._last_sent = 0.0  # monotonic time at which the last successful write of the lease was sent

    def _body(self) -> bytes:
        return json.dumps(self.content, sort_keys=True).encode()

    def _put(self, etag: str | None) -> bool:
        """Writes the lease over `etag` (None: only if there is none); False when the store refused the condition."""
        self.content["renewed"] = time.time()
        sent = time.monotonic()
        try:
            self.etag = store.put_conditional(self.path, self._body(), etag=etag)
        except store.PreconditionFailedError:
            return False
        self._last_sent = sent
        return True

    def _in_progress(self, holder: dict[str, Any] | None, detail: str) -> BuildInProgressError:
        return BuildInProgressError(
            f"{self.what}: another build of this config is writing into the same bucket data_dir "
            f"({describe(holder, self.path)}); {detail}. Wait for it ({build_lock.ENV_MODE}=wait, the default, reuses "
            f"what it builds), or build into another --data_dir. A build that died loses its lease "
            f"{self.expiry_s:g} s after its last renewal ({ENV_EXPIRY}); another build then takes it over.")

    def acquire(self, on_wait: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Takes the lease, waiting (or failing at once in `fail` mode) while a live build renews it."""
        seen: str | None = None
        seen_at = began = time.monotonic()
        waited_since: float | None = None
        last_report = 0.0
        while True:
            self.content["seq"] = 0
            self.content["started"] = time.time()
            if self._put(None):
                break
            got = read(self.path)
            if got is None:
                continue  # released between our create and our read: create again
            holder, etag = got
            now = time.monotonic()
            if etag != seen:
                seen, seen_at = etag, now
            theirs = holder.get("expiry_s")
            expiry = max(self.expiry_s, float(theirs) if isinstance(theirs, (int, float)) else 0.0)  # the longer one
            quiet = now - seen_at
            if quiet >= expiry:
                if self._put(etag):  # of the waiters, the one whose conditional overwrite lands
                    self.took_over = holder
                    logger.warning("%s: took over the build lease of a build that stopped renewing it (unchanged for "
                                   "%.0f s, %s=%g): %s", self.what, quiet, ENV_EXPIRY, expiry, describe(holder, self.path))
                    break
                continue
            if self.mode == "fail" and looks_live(holder):
                raise self._in_progress(holder, f"{build_lock.ENV_MODE}=fail stops here")
            self.waited_for = holder
            if waited_since is None:
                waited_since = last_report = now
                if looks_live(holder):
                    logger.warning("%s: another build of this config is running (%s); waiting for it to finish, then "
                                   "reusing its result (%s=fail stops instead)", self.what, describe(holder, self.path),
                                   build_lock.ENV_MODE)
                else:
                    logger.warning("%s: the build lease looks expired (%s); it is taken over once it has stayed "
                                   "unrenewed for %g s (%s)", self.what, describe(holder, self.path), expiry, ENV_EXPIRY)
                if on_wait is not None:
                    on_wait(holder)
            elif now - last_report >= REPORT_EVERY_S:
                logger.warning("%s: still waiting (%.0f s) for %s", self.what, now - waited_since,
                               describe(holder, self.path))
                last_report = now
            waited = now - began
            if self.timeout_s is not None and waited > self.timeout_s:
                raise self._in_progress(holder, f"waited {waited:.0f} s ({build_lock.ENV_TIMEOUT}={self.timeout_s:g})")
            time.sleep(min(1.0, self.renew_s / 4))
        self._check_conditions()
        self.lost_to = None
        self._stop.clear()
        self._beat = threading.Thread(target=self._beats, name="vidvol-build-lease", daemon=True)
        self._beat.start()

    def _check_conditions(self) -> None:
        """ConditionsIgnoredError unless the store refuses a create over the lease and an overwrite of another ETag.

        Both writes would put this build's own lease back unchanged, so a store that ignores them harms nothing.
        """
        for etag in (None, '"00000000000000000000000000000000"'):
            try:
                store.put_conditional(self.path, self._body(), etag=etag)
            except store.PreconditionFailedError:
                continue
            got = read(self.path)
            if got is not None:
                self.etag = got[1]
            self.release()
            raise ConditionsIgnoredError(
                f"{self.what}: the store behind {redact.url(self.path)} ignores S3 conditional writes "
                f"({'If-None-Match: *' if etag is None else 'If-Match'} was accepted where it does not hold), so a "
                f"lease there cannot keep two builds apart. Use a store that honours them (AWS S3, SeaweedFS 4.x, "
                f"MinIO with conditional writes), or set {ENV_LEASE}=0 to keep the build lock on this driver "
                f"(a build that dies is then resumed from this host only).")

    def _renew(self) -> str:
        """Renews the lease: OK, FAILING (the store did not answer; retried until the give-up age), or LOST."""
        with self._mutex:
            if self.lost_to is not None:
                return LOST
            self.content["seq"] += 1
            sent = time.monotonic()
            try:
                if self._put(self.etag):
                    return OK
                got = read(self.path)
            except Exception as e:  # RemoteReadError, AccessDeniedError, OSError: the store did not answer
                failing = time.monotonic() - self._last_sent
                logger.warning("%s: could not renew the build lease %s (%s: %s; failing for %.0f s, retried every %g s)",
                               self.what, redact.url(self.path), type(e).__name__, store.scrub(str(e)), failing,
                               self.renew_s)
                if failing >= self.expiry_s - self.renew_s:
                    self.lost_because = (f"it could not be renewed for {failing:.0f} s, and a waiter may take a lease "
                                         f"over after {self.expiry_s:g} s ({ENV_EXPIRY}); last error "
                                         f"{type(e).__name__}: {store.scrub(str(e))}")
                    self.lost_to = {}
                    return LOST
                return FAILING
            if got is not None and got[0].get("token") == self.content["token"]:
                # Our own write landed though its answer was lost (a retried PUT): the lease is ours, with that ETag.
                self.content, self.etag, self._last_sent = got[0], got[1], sent
                return OK
            logger.error("%s: the build lease was taken over while this build runs (now %s); this build will stop "
                         "before publishing its dataset", self.what,
                         describe(got[0], self.path) if got else f"removed: {redact.url(self.path)}")
            self.lost_to = got[0] if got else {}
            return LOST

    noun = "build lease"
    _describe = staticmethod(describe)

    def _interval(self) -> float:
        return self.renew_s

    def _still_held(self) -> bool:
        return self._renew() != LOST

    def check_held(self) -> None:
        """Renews the lease now; BuildLockLostError naming the other holder if it is not this build's any more."""
        while True:
            state = self._renew()
            if state == OK:
                return
            if state == LOST:
                break
            time.sleep(min(1.0, self.renew_s / 4))
        other = self._other_holder(f"its lease {redact.url(self.path)} was removed (by a build that took it over "
                                   f"and ended, or by hand)")
        raise BuildLockLostError(
            f"{self.what}: this build lost its build lease to {other} while it ran, and stops before publishing its "
            f"dataset so that two builds never both publish. A lease is taken over when it stays unrenewed for "
            f"{ENV_EXPIRY}={self.expiry_s:g} s (a suspended process, a store this host could not reach): check for "
            f"another build of this config, then run this one again (it resumes from the shards in the bucket).")

    def release(self) -> None:
        """Removes the lease if it is still ours (a conditional delete: never another build's lease)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=30)
            self._beat = None
        with self._mutex:
            if self.lost_to is not None or self.etag is None:
                return
            try:
                if not store.remove_conditional(self.path, self.etag):
                    logger.warning("%s: the build lease %s is not this build's any more; left as it is", self.what,
                                   redact.url(self.path))
            except Exception as e:  # it expires by itself
                logger.warning("%s: could not remove the build lease %s (%s); another build takes it over %g s "
                               "after its last renewal", self.what, redact.url(self.path), type(e).__name__,
                               self.expiry_s)


@contextlib.contextmanager
def hold(url: str, *, what: str, mode: str | None = None,
         on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[BucketLease]:
    """Holds the build lease `url` for the `with` block (see the module doc; `build_lock.hold` for local builds).

    Args:
      url: the lease object (`.../NAME/CONFIG/build_VERSION.lock` in the bucket).
      what: the build, as logs and errors name it.
      mode: "wait" or "fail" (default: `VIDVOL_BUILD_LOCK`, else "wait").
      on_wait: called with the holder's record when this build starts waiting.

    Returns:
      A context manager yielding the held BucketLease.
    """
    lease = BucketLease(url, what=what, mode=mode)
    lease.acquire(on_wait)
    try:
        yield lease
    finally:
        lease.release()
