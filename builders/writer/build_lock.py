"""One build of a config at a time per data_dir: a lock file next to TFDS's `incomplete.*` folder.

A build takes `DATA_DIR/NAME/CONFIG/build_VERSION.lock` (host, pid, boot id, PID namespace, start time and a
heartbeat), waits for or refuses a live holder, takes a stale lock over, and checks it still holds the lock
before publishing; `hold` says how.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)

ENV_MODE = "VIDVOL_BUILD_LOCK"
ENV_TIMEOUT = "VIDVOL_BUILD_LOCK_TIMEOUT"
ENV_STALE = "VIDVOL_BUILD_LOCK_STALE_S"
MODES = ("wait", "fail")
HEARTBEAT_S = 10.0
STALE_S = 120.0
POLL_S = 0.2  # a waiter sees each new holder (a build lasts seconds), so it names the one it reuses
REPORT_EVERY_S = 60.0
CLAIM_ABANDONED_S = 30.0  # a takeover claim lives milliseconds; one this old was left by a waiter that died
_RETRY_S = 0.005  # after a lost takeover race: the winner's lock appears within microseconds


class BuildInProgressError(RuntimeError):
    """Another build of the same config is writing into the same data_dir."""


class BuildLockLostError(BuildInProgressError):
    """This build's lock was taken over by another build while it ran; it stops before publishing its dataset."""


def _tf():
    """TensorFlow, for object-store data_dirs only (local locks need nothing but the standard library)."""
    import tensorflow as tf

    return tf


def lock_path(data_path: str | os.PathLike) -> str:
    """`DATA_DIR/NAME/CONFIG/build_VERSION.lock` for the version folder `data_path`."""
    data_path = os.fspath(data_path).rstrip("/")
    parent, version = data_path.rsplit("/", 1) if "/" in data_path else ("", data_path)
    return f"{parent}/build_{version}.lock" if parent else f"build_{version}.lock"


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _now() -> float:
    return time.time()


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


@functools.lru_cache(maxsize=1)
def boot_id() -> str | None:
    """This kernel's boot id (`/proc/sys/kernel/random/boot_id`), None where there is none (not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def pid_namespace() -> str | None:
    """This process's PID namespace (`pid:[4026531836]`), None where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def mode_from_env(mode: str | None = None) -> str:
    """`wait` or `fail`: the argument, else `VIDVOL_BUILD_LOCK`, else `wait`; ValueError for anything else."""
    value = (mode or os.environ.get(ENV_MODE) or "wait").strip().lower()
    if value not in MODES:
        raise ValueError(f"{ENV_MODE}={value!r}: use one of {', '.join(MODES)}")
    return value


def _float_env(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: a number of seconds") from None


def describe(holder: dict[str, Any] | None, path: str) -> str:
    """`host H, pid P, started 2026-12-01T03:00:00+00:00 (lock file PATH)`."""
    if not holder:
        return f"lock file {path}"
    started = holder.get("started")
    when = _iso(started) if isinstance(started, (int, float)) else "?"
    return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, started {when} (lock file {path})"


def _parse(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _read_local(local: str) -> tuple[dict[str, Any] | None, tuple[int, ...] | None]:
    """(content, identity) of a local lock file, both from one open file: None, None if there is none.

    The identity (device, inode, mtime in ns, size) tells this very file from a lock written later
    at the same path (every heartbeat replaces the file).
    """
    try:
        f = open(local, "rb")
    except FileNotFoundError:
        return None, None
    with f:
        st = os.fstat(f.fileno())
        text = f.read().decode("utf-8", errors="replace")
    return _parse(text), (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def read(path: str) -> dict[str, Any] | None:
    """The lock's content; None if there is no lock; {} for an unreadable one (being written)."""
    if _is_local(path):
        return _read_local(_local(path))[0]
    tf = _tf()
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return _parse(f.read())
    except tf.errors.NotFoundError:
        return None


def _mtime(path: str) -> float | None:
    try:
        if _is_local(path):
            return os.path.getmtime(_local(path))
        return _tf().io.gfile.stat(path).mtime_nsec / 1e9
    except OSError:
        return None
    except Exception as e:  # tf.errors.OpError
        logger.info("could not stat %s: %s", path, e)
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def same_process_space(holder: dict[str, Any]) -> bool:
    """Whether the holder's pid means the same process here: same host name, boot id and PID namespace."""
    here = (socket.gethostname(), boot_id(), pid_namespace())
    there = (holder.get("host"), holder.get("boot_id"), holder.get("pid_ns"))
    return None not in here and here == there


def stale_reason(holder: dict[str, Any], *, stale_s: float, now: float | None = None) -> str | None:
    """Why the lock `holder` is stale (None: it is live). An unreadable lock counts as live until it ages.

    A lock is stale, and is taken over with a warning, when its process is gone, or when its heartbeat
    is older than `VIDVOL_BUILD_LOCK_STALE_S` (default 120 s; the holder refreshes it every 10 s). The
    pid is only asked about when the holder ran on the same host name, the same boot (the kernel's
    `boot_id`) and in the same PID namespace as the waiter: a container sharing the host's network
    (and so its host name) has its own pids, and a pid from there says nothing here. Any other holder
    (another machine, another container, a lock written before vidvol recorded these) is judged by its
    heartbeat alone.
    """
    now = _now() if now is None else now
    beat = holder.get("heartbeat", holder.get("started"))
    pid = holder.get("pid")
    if isinstance(pid, int) and pid > 0 and same_process_space(holder) and not _pid_alive(pid):
        return f"its process {pid} on this host is gone"
    if isinstance(beat, (int, float)) and now - beat > stale_s:
        return f"its heartbeat stopped {now - beat:.0f} s ago (stale after {stale_s:.0f} s)"
    return None


def _write(path: str, content: dict[str, Any], *, exclusive: bool) -> bool:
    """Writes the lock; with `exclusive`, only if there is none (False if one appeared first).

    Local data_dirs (and NFS) use the exclusive create and the link and rename above. Other data_dirs
    (`gs://`, ...) go through `tf.io.gfile`, which has neither: the lock is written, then read back,
    and only the build whose token is there proceeds; two builds starting within the same instant on
    an object store may both see their own token in a read-after-write race, which this narrows but
    cannot exclude (the check before publishing then stops one of them).

    """
    text = json.dumps(content, sort_keys=True)
    if _is_local(path):
        local = _local(path)
        if exclusive:
            try:
                fd = os.open(local, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return True
        tmp = f"{local}.{content['token']}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, local)  # readers never see a half-written heartbeat
        return True
    tf = _tf()
    if exclusive and tf.io.gfile.exists(path):
        return False
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
    if exclusive:
        back = read(path)
        return bool(back) and back.get("token") == content["token"]
    return True


def _remove(path: str) -> None:
    if _is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(_local(path))
        return
    tf = _tf()
    with contextlib.suppress(tf.errors.NotFoundError):
        tf.io.gfile.remove(path)


def _is_that_lock(path: str, holder: dict[str, Any], ident: tuple[int, ...]) -> bool:
    """Whether the file at `path` is the lock read as (`holder`, `ident`): same file, same token."""
    content, now_ident = _read_local(path)
    return now_ident == ident and content is not None and content.get("token") == holder.get("token")


def _drop_abandoned_claim(claim: str) -> None:
    """Removes a takeover claim left by a waiter that died within its takeover (by a rename, so only once)."""
    try:
        age = _now() - os.stat(claim).st_ctime  # ctime: when the claim's link was made
    except FileNotFoundError:
        return
    if age > CLAIM_ABANDONED_S:
        aside = f"{claim}.abandoned-{uuid.uuid4().hex}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(claim, aside)
            os.remove(aside)
            logger.warning("removed a takeover claim left %.0f s ago by a waiter that died: %s", age, claim)


def _take_over_local(local: str, holder: dict[str, Any], ident: tuple[int, ...], token: str) -> bool:
    """Removes the stale lock (`holder`, `ident`) at `local` if this waiter wins it; False when another did.

    Claim (a hard link no second waiter can make), check, then an atomic rename to this waiter's own
    name, check again: a lock that is not the one judged stale is never deleted (see the module doc).

    Taking a stale lock over is decided by atomic file operations, so that of many waiters exactly one
    wins: a waiter first claims the stale lock by hard-linking it to a name made from its identity
    (`build_VERSION.lock.takeover-...`, which only one waiter can create), checks that what it claimed
    is still that stale lock, then moves the lock aside by an atomic rename to a name of its own and
    checks again what it moved; only then is the stale lock deleted, and the waiters race for the free
    lock with an exclusive create (`O_CREAT | O_EXCL`), which one of them wins. A takeover never deletes
    a lock it has not identified as the stale one.
    """
    name = hashlib.sha256(repr((holder.get("token"), ident)).encode()).hexdigest()[:16]
    claim: str | None = f"{local}.takeover-{name}"
    try:
        os.link(local, claim)
    except FileExistsError:  # another waiter is taking this very lock over
        _drop_abandoned_claim(claim)
        return False
    except FileNotFoundError:  # gone already
        return False
    except OSError:  # no hard links on this file system: the rename and its check alone decide
        claim = None
    try:
        if claim is not None and not _is_that_lock(claim, holder, ident):
            return False  # the lock changed between our reading and our claim
        moved = f"{local}.stale-{token}"
        try:
            os.rename(local, moved)
        except FileNotFoundError:
            return False
        if _is_that_lock(moved, holder, ident):
            os.remove(moved)
            return True
        # Not the stale lock (only possible without hard links, or if its holder was alive after all):
        # put it back, never over a lock that appeared since.
        try:
            os.link(moved, local)
        except OSError as e:
            logger.error("a build lock moved aside by mistake could not be put back (%s): %s", e,
                         describe(_read_local(moved)[0], local))
        os.remove(moved)
        return False
    finally:
        if claim is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(claim)


class HeldBuild:
    """What a held build lock (`BuildLock`) and a bucket lease (`lease.BucketLease`) share: the beat thread that
    stops the build once it is lost, and who took it over, as `BuildLockLostError` says it."""

    noun = "build lock"
    what: str
    path: str
    on_lost: Callable[[], None] | None
    lost_to: dict[str, Any] | None
    lost_because: str | None
    _stop: threading.Event
    _mutex: threading.Lock

    def _interval(self) -> float:
        raise NotImplementedError

    def _still_held(self) -> bool:
        """Refreshes or renews the hold once; False when it is lost (`lost_to`, `lost_because` say why)."""
        raise NotImplementedError

    @staticmethod
    def _describe(holder: dict[str, Any] | None, path: str) -> str:
        return describe(holder, path)

    def _beats(self) -> None:
        while not self._stop.wait(self._interval()):
            if not self._still_held():
                logger.error("%s: this build lost its %s (%s); it stops now rather than at publish time",
                             self.what, self.noun, self.lost_because or "taken over")
                with self._mutex:
                    if self.on_lost is not None and not self._stop.is_set():
                        self.on_lost()
                return

    def stop_interrupts(self) -> None:
        """No `on_lost` call from here on (the build it would stop is over)."""
        with self._mutex:
            self.on_lost = None

    def _other_holder(self, removed: str) -> str:
        """Who holds it now, for BuildLockLostError: another build, or nobody (and why)."""
        return (f"another build ({self._describe(self.lost_to, self.path)})" if self.lost_to
                else f"nobody: {self.lost_because}" if self.lost_because else f"nobody: {removed}")


class BuildLock(HeldBuild):
    """The lock of one build; `acquire()`, `check_held()` before publishing, then `release()` (or use `hold`)."""

    def __init__(self, path: str, *, what: str, mode: str | None = None,
                 timeout_s: float | None = None, stale_s: float | None = None):
        self.path = path
        self.what = what
        self.mode = mode_from_env(mode)
        self.timeout_s = _float_env(ENV_TIMEOUT, None) if timeout_s is None else timeout_s
        self.stale_s = _float_env(ENV_STALE, STALE_S) if stale_s is None else stale_s
        self.content = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "boot_id": boot_id(),
            "pid_ns": pid_namespace(),
            "started": _now(),
            "token": uuid.uuid4().hex,
            "build": what,
        }
        self.waited_for: dict[str, Any] | None = None  # the holder this build waited for, if any
        self.lost_to: dict[str, Any] | None = None  # set once the lock is found not ours: who holds it ({}: nobody)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._mutex = threading.Lock()  # the heartbeat thread and check_held never write at once
        self._last_ok = _now()  # the last heartbeat written; failures are retried until the stale age
        self.lost_because: str | None = None  # why the lock counts as lost when nobody else took it
        # Called (under the mutex) by the heartbeat thread when it finds the lock lost: the build stops early.
        self.on_lost: Callable[[], None] | None = None

    def _parent_exists(self) -> None:
        parent = self.path.rsplit("/", 1)[0]
        if _is_local(self.path):
            os.makedirs(_local(parent), exist_ok=True)
        else:
            _tf().io.gfile.makedirs(parent)

    def _in_progress(self, holder: dict[str, Any] | None, detail: str) -> BuildInProgressError:
        return BuildInProgressError(
            f"{self.what}: another build of this config is writing into the same data_dir ({describe(holder, self.path)}); "
            f"{detail}. Wait for it ({ENV_MODE}=wait, the default, reuses what it builds), build into another "
            f"--data_dir, or, if that build is dead on another host, remove {self.path}."
        )

    def _holder(self) -> tuple[dict[str, Any] | None, tuple[int, ...] | None]:
        """The current lock's content (an unreadable one ages by its file's mtime) and, locally, its identity."""
        if _is_local(self.path):
            holder, ident = _read_local(_local(self.path))
            if holder == {} and ident is not None:
                holder = {"heartbeat": ident[2] / 1e9}
            return holder, ident
        holder = read(self.path)
        return ({"heartbeat": _mtime(self.path)} if holder == {} else holder), None

    def _take_over(self, holder: dict[str, Any], ident: tuple[int, ...] | None) -> bool:
        """Removes the stale lock `holder` if this build wins the takeover."""
        if ident is not None:
            return _take_over_local(_local(self.path), holder, ident, self.content["token"])
        if read(self.path) == holder:  # object stores: nobody took it over in the meantime (best effort)
            _remove(self.path)
            return True
        return False

    def acquire(self, on_wait: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Takes the lock, waiting (or failing at once in `fail` mode) while a live build holds it."""
        self._parent_exists()
        waited_since = None
        last_report = 0.0
        began = _now()
        while True:
            self.content["started"] = self.content["heartbeat"] = _now()
            if _write(self.path, self.content, exclusive=True):
                break
            holder, ident = self._holder()
            if holder is None:
                continue  # released between our create and our read: try again at once
            why = stale_reason(holder, stale_s=self.stale_s)
            if why:
                if self._take_over(holder, ident):
                    logger.warning("%s: took over a stale build lock, %s: %s", self.what, why, describe(holder, self.path))
                    continue
                # Another waiter is taking it over: its lock shows up at once (a claim it left dying expires).
                self._check_timeout(holder, began)
                time.sleep(_RETRY_S)
                continue
            if self.mode == "fail":
                raise self._in_progress(holder, f"{ENV_MODE}=fail stops here")
            now = _now()
            self.waited_for = holder  # the latest holder: the build whose dataset a waiter reuses
            if waited_since is None:
                waited_since = now
                logger.warning("%s: another build of this config is running (%s); waiting for it to finish, then "
                               "reusing its result (%s=fail stops instead)", self.what, describe(holder, self.path), ENV_MODE)
                if on_wait is not None:
                    on_wait(holder)
                last_report = now
            elif now - last_report >= REPORT_EVERY_S:
                logger.warning("%s: still waiting (%.0f s) for %s", self.what, now - waited_since, describe(holder, self.path))
                last_report = now
            self._check_timeout(holder, waited_since)
            time.sleep(POLL_S)
        self.lost_to = None
        self._last_ok = _now()
        self._stop.clear()
        self._beat = threading.Thread(target=self._beats, name="vidvol-build-lock", daemon=True)
        self._beat.start()

    def _check_timeout(self, holder: dict[str, Any], since: float) -> None:
        waited = _now() - since
        if self.timeout_s is not None and waited > self.timeout_s:
            raise self._in_progress(holder, f"waited {waited:.0f} s ({ENV_TIMEOUT}={self.timeout_s:g})")

    def _refresh(self) -> bool:
        """Refreshes the heartbeat if the lock is still ours; records who holds it otherwise (False)."""
        with self._mutex:
            if self.lost_to is not None:
                return False
            try:
                held = read(self.path)
            except Exception as e:  # OSError, tf.errors.OpError: an NFS EIO, a transient GCS error
                return self._refresh_failed(e)
            if not held or held.get("token") != self.content["token"]:
                # Logged before lost_to is set: whoever sees lost_to (check_held, a test) finds the reason logged.
                logger.error("%s: the build lock was taken over while this build runs (now %s); this build will stop "
                             "before publishing its dataset", self.what,
                             describe(held, self.path) if held else f"removed: {self.path}")
                self.lost_to = held or {}
                return False
            self.content["heartbeat"] = _now()
            try:
                _write(self.path, self.content, exclusive=False)
            except Exception as e:  # OSError, tf.errors.OpError: a full disk must not kill the build here
                return self._refresh_failed(e)
            self._last_ok = _now()
            return True

    def _refresh_failed(self, error: BaseException) -> bool:
        """A read or write of the lock failed: retried at the next beat, given up only past the stale age."""
        failing = _now() - self._last_ok
        logger.warning("%s: could not refresh the build lock %s (%s: %s; failing for %.0f s, retried every %g s)",
                       self.what, self.path, type(error).__name__, error, failing, HEARTBEAT_S)
        if failing > self.stale_s:
            self.lost_because = (f"its heartbeat could not be written for {failing:.0f} s (past "
                                 f"{ENV_STALE}={self.stale_s:g} s), last error {type(error).__name__}: {error}")
            self.lost_to = {}
            return False
        return True

    def _interval(self) -> float:
        return HEARTBEAT_S

    def _still_held(self) -> bool:
        return self._refresh()

    def check_held(self) -> None:
        """BuildLockLostError naming the other holder unless the lock is still this build's (refreshed now)."""
        if self._refresh():
            return
        other = self._other_holder(f"its lock file {self.path} was removed")
        raise BuildLockLostError(
            f"{self.what}: this build lost its build lock to {other} while it ran, and stops before publishing its "
            f"dataset so that two builds never both write the version folder (its incomplete.* folder is removed). "
            f"A build's lock is taken over when its heartbeat stops for {ENV_STALE}={self.stale_s:g} s (a suspended "
            f"process, a clock far off between hosts): check for another build of this config, then run this one again."
        )

    def release(self) -> None:
        """Removes the lock if it is still ours."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        with self._mutex:
            if self.lost_to is not None:
                return
            held = read(self.path)
            if held and held.get("token") == self.content["token"]:
                _remove(self.path)


@contextlib.contextmanager
def hold(data_path: str | os.PathLike, *, what: str, mode: str | None = None,
         on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[BuildLock]:
    """Holds the build lock of the version folder `data_path` for the `with` block.

    Two builds of the same `NAME/CONFIG` version into the same data_dir (two notebooks, two cluster
    jobs, a job array) used to both do the whole build, and the second then died on TFDS's rename
    (`FileExistsError: ... Destination .../2.0.0 already exists`). Now a build first takes
    `DATA_DIR/NAME/CONFIG/build_VERSION.lock`, a small JSON file holding the host, pid, boot id, PID
    namespace, start time and a heartbeat refreshed every `HEARTBEAT_S` seconds while it runs; it is
    removed when the build ends, however it ends. A second build that finds it either

    - waits (`wait`, the default) until the first ends, logging who holds it, and then reuses the
      dataset that build prepared (or builds it itself if that build failed), or
    - stops at once (`fail`) with a `BuildInProgressError` naming the holder and the lock file.

    Choose with the environment variable `VIDVOL_BUILD_LOCK=wait|fail` (works under `tfds build`)
    or `python -m vidvol.beam_jobs.build --if_building wait|fail`. `VIDVOL_BUILD_LOCK_TIMEOUT`
    (seconds) bounds the wait; past it the waiting build fails as in `fail` mode.

    A build checks, right before its dataset is published (TFDS's final rename of `incomplete.*`), that
    the lock file still holds its own token (`BuildLock.check_held`); a build whose lock was taken over
    meanwhile (its heartbeat stalled past the stale age, or the file was removed by hand) stops there
    with a `BuildLockLostError` naming the other holder, so two builds never both publish.

    Args:
      data_path: the version folder the build prepares.
      what: the build, as logs and errors name it (e.g. "mri_volumes/small_32").
      mode: "wait" or "fail" (default: `VIDVOL_BUILD_LOCK`, else "wait").
      on_wait: called with the holder's record when this build starts waiting.

    Returns:
      A context manager yielding the held BuildLock.
    """
    lock = BuildLock(lock_path(data_path), what=what, mode=mode)
    lock.acquire(on_wait)
    try:
        yield lock
    finally:
        lock.release()
