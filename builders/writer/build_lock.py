"""One build of a config at a time per data_dir: a lock file next to TFDS's `incomplete.*` folder.

Two builds of the same `NAME/CONFIG` version into the same data_dir (two notebooks, two cluster
jobs, a job array) used to both do the whole build, and the second then died on TFDS's rename
(`FileExistsError: ... Destination .../2.0.0 already exists`). Now a build first takes
`DATA_DIR/NAME/CONFIG/build_VERSION.lock`, a small JSON file holding the host, pid, start time
and a heartbeat refreshed every `HEARTBEAT_S` seconds while it runs; it is removed when the build
ends, however it ends. A second build that finds it either

- waits (`wait`, the default) until the first ends, logging who holds it, and then reuses the
  dataset that build prepared (or builds it itself if that build failed), or
- stops at once (`fail`) with a `BuildInProgressError` naming the holder and the lock file.

Choose with the environment variable `VIDVOL_BUILD_LOCK=wait|fail` (works under `tfds build`)
or `python -m vidvol.beam_jobs.build --if_building wait|fail`. `VIDVOL_BUILD_LOCK_TIMEOUT`
(seconds) bounds the wait; past it the waiting build fails as in `fail` mode.

A lock is stale, and is taken over with a warning, when its holder is on this host and its pid
is gone (killed, crashed, machine rebooted into a new pid space is covered by the heartbeat), or
when its heartbeat is older than `VIDVOL_BUILD_LOCK_STALE_S` (default 120 s; the holder
refreshes it every 10 s), which covers a holder on another host that died. `--overwrite` keeps
its meaning: it waits for a running build like any other, then rebuilds.

Local data_dirs take the lock with an exclusive create (`O_CREAT | O_EXCL`), which is atomic on
local and NFSv3+ file systems. Other data_dirs (`gs://`, ...) go through `tf.io.gfile`, which has
no exclusive create: the lock is written, then read back, and only the build whose token is
there proceeds; two builds starting within the same instant on an object store may both see
their own token in a read-after-write race, which this narrows but cannot exclude.
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
from typing import Any, Callable, Iterator

import tensorflow as tf

logger = logging.getLogger(__name__)

ENV_MODE = "VIDVOL_BUILD_LOCK"
ENV_TIMEOUT = "VIDVOL_BUILD_LOCK_TIMEOUT"
ENV_STALE = "VIDVOL_BUILD_LOCK_STALE_S"
MODES = ("wait", "fail")
HEARTBEAT_S = 10.0
STALE_S = 120.0
POLL_S = 0.2  # a waiter sees each new holder (a build lasts seconds), so it names the one it reuses
REPORT_EVERY_S = 60.0


class BuildInProgressError(RuntimeError):
    """Another build of the same config is writing into the same data_dir."""


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
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


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


def read(path: str) -> dict[str, Any] | None:
    """The lock's content; None if there is no lock; {} for an unreadable one (being written)."""
    try:
        if _is_local(path):
            with open(_local(path), encoding="utf-8") as f:
                text = f.read()
        else:
            with tf.io.gfile.GFile(path, "r") as f:
                text = f.read()
    except (FileNotFoundError, tf.errors.NotFoundError):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _mtime(path: str) -> float | None:
    try:
        if _is_local(path):
            return os.path.getmtime(_local(path))
        return tf.io.gfile.stat(path).mtime_nsec / 1e9
    except (OSError, tf.errors.OpError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def stale_reason(holder: dict[str, Any], *, stale_s: float, now: float | None = None) -> str | None:
    """Why the lock `holder` is stale (None: it is live). An unreadable lock counts as live until it ages."""
    now = _now() if now is None else now
    beat = holder.get("heartbeat", holder.get("started"))
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        if not _pid_alive(holder["pid"]):
            return f"its process {holder['pid']} on this host is gone"
    if isinstance(beat, (int, float)) and now - beat > stale_s:
        return f"its heartbeat stopped {now - beat:.0f} s ago (stale after {stale_s:.0f} s)"
    return None


def _write(path: str, content: dict[str, Any], *, exclusive: bool) -> bool:
    """Writes the lock; with `exclusive`, only if there is none (False if one appeared first)."""
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
    if exclusive and tf.io.gfile.exists(path):
        return False
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
    if exclusive:
        back = read(path)
        return bool(back) and back.get("token") == content["token"]
    return True


def _remove(path: str) -> None:
    try:
        if _is_local(path):
            os.remove(_local(path))
        else:
            tf.io.gfile.remove(path)
    except (FileNotFoundError, tf.errors.NotFoundError):
        pass


class BuildLock:
    """The lock of one build; `acquire()` then `release()` (or use `hold`)."""

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
            "started": _now(),
            "token": uuid.uuid4().hex,
            "build": what,
        }
        self.waited_for: dict[str, Any] | None = None  # the holder this build waited for, if any
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _parent_exists(self) -> None:
        parent = self.path.rsplit("/", 1)[0]
        if _is_local(self.path):
            os.makedirs(_local(parent), exist_ok=True)
        else:
            tf.io.gfile.makedirs(parent)

    def _in_progress(self, holder: dict[str, Any] | None, detail: str) -> BuildInProgressError:
        return BuildInProgressError(
            f"{self.what}: another build of this config is writing into the same data_dir ({describe(holder, self.path)}); "
            f"{detail}. Wait for it ({ENV_MODE}=wait, the default, reuses what it builds), build into another "
            f"--data_dir, or, if that build is dead on another host, remove {self.path}."
        )

    def acquire(self, on_wait: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Takes the lock, waiting (or failing at once in `fail` mode) while a live build holds it."""
        self._parent_exists()
        waited_since = None
        last_report = 0.0
        while True:
            self.content["started"] = self.content["heartbeat"] = _now()
            if _write(self.path, self.content, exclusive=True):
                break
            holder = read(self.path)
            if holder is None:
                continue  # released between our create and our read: try again at once
            # An empty or unreadable lock (being written, or left so by a crash) ages by its file's mtime.
            why = stale_reason(holder or {"heartbeat": _mtime(self.path)}, stale_s=self.stale_s)
            if why:
                again = read(self.path)
                if again == holder:  # nobody took it over in the meantime
                    logger.warning("%s: taking over a stale build lock, %s: %s", self.what, why, describe(holder, self.path))
                    _remove(self.path)
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
            if self.timeout_s is not None and now - waited_since > self.timeout_s:
                raise self._in_progress(holder, f"waited {now - waited_since:.0f} s ({ENV_TIMEOUT}={self.timeout_s:g})")
            time.sleep(POLL_S)
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="vidvol-build-lock", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            held = read(self.path)
            if not held or held.get("token") != self.content["token"]:
                logger.warning("%s: the build lock %s was taken over by another build while this one runs", self.what, self.path)
                return
            self.content["heartbeat"] = _now()
            try:
                _write(self.path, self.content, exclusive=False)
            except (OSError, tf.errors.OpError) as e:  # a full disk must not kill the build from here
                logger.info("could not refresh the build lock %s: %s", self.path, e)

    def release(self) -> None:
        """Removes the lock if it is still ours."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        held = read(self.path)
        if held and held.get("token") == self.content["token"]:
            _remove(self.path)


@contextlib.contextmanager
def hold(data_path: str | os.PathLike, *, what: str, mode: str | None = None,
         on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[BuildLock]:
    """Holds the build lock of the version folder `data_path` for the `with` block."""
    lock = BuildLock(lock_path(data_path), what=what, mode=mode)
    lock.acquire(on_wait)
    try:
        yield lock
    finally:
        lock.release()
