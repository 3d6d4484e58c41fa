"""The decoding child process: its pipe protocol, its own side, and how a worker starts, watches and ends it.

`vidvol.builders.isolation` runs example functions in such a child (`InChild`) and decides what its deaths and
silences mean (a crash, a deadline passed, a stop from outside); this module only moves messages and processes.
Messages are frames on two pipes: a kind byte and a length, then a pickle (a request, an item, a log record, an
error, done). The child is a fresh Python started from one long-lived thread of the worker (`_spawn`), holds a
private scratch folder that a janitor removes when it is gone, and dies with its worker (`_die_with_worker`).
"""

from __future__ import annotations

import ctypes
import io
import json
import logging
import os
import pickle
import queue
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any
from collections.abc import Callable

from vidvol.builders import example_io
from vidvol.builders.sources import files
from vidvol.core import redact
from vidvol.core.names import shown

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # a child that does not say it is ready within this is a failed start
_PARENT_ENV = "VIDVOL_CHILD_PARENT"
_SCRATCH_RE = re.compile(r"^vidvol-decoder-(\d+)-(\d+)-")  # worker pid, its PID namespace's inode
in_child = False  # True in a child: an InChild met there runs inline


def _pid_namespace() -> int:
    """The inode of this process's PID namespace (0 where unknown): a pid means a process only inside it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0
# Signals that mean someone stopped the build (Ctrl-C, a scheduler), not that a decoder crashed.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
_SIGNAL_WORDS = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGBUS: "a bus error",
    signal.SIGABRT: "an abort",
    signal.SIGFPE: "an arithmetic fault",
    signal.SIGILL: "an illegal instruction",
    signal.SIGKILL: "killed: the kernel's out-of-memory killer, or a kill -9",
}
_HEADER = struct.Struct("!cQ")  # message kind, payload length
_SIZE = struct.Struct("!Q")
_REQUEST, _READY, _ITEM, _LOG, _DONE, _ERROR = b"R", b"Y", b"I", b"L", b"D", b"E"


class ChildStartError(OSError):
    """A decoding child could not start (its Python failed before serving): the worker decodes inline."""


_send_lock = threading.Lock()  # one frame at a time: the child's log records may come from any thread (fsspec's IO)


def _send(out: io.BufferedWriter, kind: bytes, payload: bytes = b"") -> None:
    with _send_lock:
        out.write(_HEADER.pack(kind, len(payload)) + payload)
        out.flush()


def _receive(stream: io.BufferedReader) -> tuple[bytes, bytes] | None:
    """The next (kind, payload), or None at end of stream (the other side is gone)."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    kind, length = _HEADER.unpack(head)
    payload = stream.read(length)
    if len(payload) < length:
        return None
    return kind, payload


class _PipeLogHandler(logging.Handler):
    """In the child: each log record, formatted, to the worker."""

    def __init__(self, out: io.BufferedWriter):
        super().__init__(logging.NOTSET)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {k: getattr(record, k, None) for k in (
                "name", "levelno", "levelname", "pathname", "filename", "module", "lineno", "funcName", "created",
                "msecs", "relativeCreated",
            )}
            # A name that is not UTF-8 as caf\xe9, as vidvol writes names; a URL's secrets masked here already.
            fields["msg"] = shown(redact.text(record.getMessage()))
            fields["args"] = None
            if record.exc_info:
                fields["exc_text"] = shown(redact.text("".join(traceback.format_exception(*record.exc_info))))
            elif record.exc_text:
                fields["exc_text"] = shown(redact.text(record.exc_text))
            _send(self.out, _LOG, pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # a log line is never worth the source
            pass


def _error_payload(error: BaseException) -> bytes:
    """What the worker needs to raise `error` again: whether it is an input error, its text, the child's traceback, itself."""
    redact.exception(error)  # in place, before anything of it travels (its text, traceback and pickle)
    text = redact.text(f"{type(error).__name__}: {error}")
    tb = redact.text("".join(traceback.format_exception(error)))
    try:
        pickled = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)
    except Exception:  # an exception that cannot travel: its text does
        pickled = b""
    return pickle.dumps((example_io.is_input_error(error), text, tb, pickled), protocol=pickle.HIGHEST_PROTOCOL)


def _serve(requests: io.BufferedReader, replies: io.BufferedWriter) -> None:
    """The child's loop: run each requested `(function, record)`, stream the answer; return at end of input.

    A request is the pickled `(setup, example_fn)` (the same bytes for every source of a split: its
    functions are unpickled, and its setup run, once) followed by the pickled record.
    """
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    redact.install_log_redaction()  # the child's records name its inputs, which may be URLs with credentials
    root = logging.getLogger()
    root.handlers = [_PipeLogHandler(replies)]
    root.setLevel(int(os.environ.get(_LOG_LEVEL_ENV, logging.WARNING)))
    functions: dict[bytes, Callable[[Any], Any]] = {}
    while True:
        message = _receive(requests)
        if message is None:
            return
        try:
            size = _SIZE.unpack_from(message[1])[0]
            blob = message[1][_SIZE.size:_SIZE.size + size]
            example_fn = functions.get(blob)
            if example_fn is None:
                setup, example_fn = pickle.loads(blob)
                for fn in setup:
                    fn()
                functions[blob] = example_fn
            record = pickle.loads(message[1][_SIZE.size + size:])
            for item in example_fn(record):
                _send(replies, _ITEM, pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
                del item
        except Exception as e:  # every error goes back to the worker
            payload = _error_payload(e)
            del e
            _send(replies, _ERROR, payload)
        else:
            _send(replies, _DONE)


def _die_with_worker(req_fd: int) -> None:
    """In the child: it ends, and its scratch goes, when the worker dies (even of SIGKILL) while it is busy.

    Two guards. The kernel's parent-death signal (Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`: it fires when
    the thread that started the child ends, which is why the worker starts children from one thread that
    lives as long as it does, `_spawn`) ends a child stuck in native code. A watchdog thread sees the request
    pipe hang up (the kernel closes the worker's end when the worker dies) and ends the child where there is
    no such signal. The scratch folder goes with the child either way: its janitor (see `_Child`) removes it
    when the child is gone, and the next child's sweep (`_sweep_orphans`) removes any left behind.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    parent = os.environ.pop(_PARENT_ENV, "")
    if parent.isdigit() and os.getppid() != int(parent):  # the worker died before the signal was set
        os._exit(1)

    def watch() -> None:
        poller = select.poll()
        poller.register(req_fd, 0)  # no event asked for: only a hang-up (or error) is reported
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            if any(e & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, e in events):
                scratch = os.environ.get(files.FETCH_DIR_ENV, "")
                if os.path.basename(scratch).startswith("vidvol-decoder-"):
                    shutil.rmtree(scratch, ignore_errors=True)
                os._exit(1)

    threading.Thread(target=watch, name="vidvol-worker-watch", daemon=True).start()


def child_main(req_fd: int, rep_fd: int) -> None:
    """The child's entry (see `_BOOTSTRAP`): serve until the worker closes the pipe."""
    global in_child
    in_child = True
    _die_with_worker(req_fd)
    with open(req_fd, "rb") as requests, open(rep_fd, "wb") as replies:
        _send(replies, _READY)
        _serve(requests, replies)


# The child's first lines: the worker's sys.path; the `vidvol` package entered without its facade, which is
# loaded (TensorFlow and all) only when something asks it for a name that is not a submodule.
_BOOTSTRAP = """\
import importlib, importlib.util, json, os, sys
sys.path[:] = json.loads(os.environ.pop("VIDVOL_CHILD_SYS_PATH"))
spec = importlib.util.find_spec("vidvol")
package = importlib.util.module_from_spec(spec)
def facade(name, package=package, spec=spec):
    if importlib.util.find_spec(f"vidvol.{name}") is not None:
        return importlib.import_module(f"vidvol.{name}")
    del package.__getattr__
    spec.loader.exec_module(package)
    return getattr(package, name)
package.__getattr__ = facade
sys.modules["vidvol"] = package
from vidvol.builders import decoding_child
decoding_child.child_main(int(sys.argv[1]), int(sys.argv[2]))
"""
_LOG_LEVEL_ENV = "VIDVOL_CHILD_LOG_LEVEL"
# The janitor's script ($0: the child's scratch folder): wait for the end of its input, then remove the folder.
_JANITOR = 'cat > /dev/null; case "$(basename "$0")" in vidvol-decoder-*) rm -rf -- "$0";; esac'


_lock = threading.Lock()
_spawn_requests: queue.Queue = queue.Queue()
_spawner: threading.Thread | None = None


def _spawner_loop() -> None:
    while True:
        start, answer = _spawn_requests.get()
        try:
            answer.put((True, start()))
        except BaseException as e:  # handed to the thread that asked
            answer.put((False, e))


def _spawn(start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """`start()` run on the one thread that starts every child: a child's parent-death signal fires when the
    thread that started it ends, and a Beam worker's threads come and go; this one lives as long as the worker."""
    global _spawner
    with _lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawner_loop, name="vidvol-decoder-spawner", daemon=True)
            _spawner.start()
    answer: queue.Queue = queue.Queue(maxsize=1)
    _spawn_requests.put((start, answer))
    ok, value = answer.get()
    if not ok:
        raise value
    return value


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def _sweep_orphans(root: str) -> None:
    """Removes the scratch folders of workers that are gone (killed before they could remove them), of this PID
    namespace only."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        found = _SCRATCH_RE.match(name)
        # Only folders of workers of this PID namespace: a container sharing this /tmp has its own pids.
        if (found and int(found.group(2)) == _pid_namespace() and int(found.group(1)) != os.getpid()
                and not _pid_alive(int(found.group(1)))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


class _Child:
    """One child process and the worker's ends of its pipes."""

    def __init__(self):
        root = files.private_dir(files.fetch_dir())
        _sweep_orphans(root)
        self.scratch = tempfile.mkdtemp(prefix=f"vidvol-decoder-{os.getpid()}-{_pid_namespace()}-", dir=root)
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = dict(
            os.environ, VIDVOL_CHILD_SYS_PATH=json.dumps(sys.path), TMPDIR=self.scratch,
            **{files.FETCH_DIR_ENV: self.scratch, _LOG_LEVEL_ENV: str(logging.getLogger().getEffectiveLevel()),
               _PARENT_ENV: str(os.getpid())},
        )
        # The janitor: a shell that removes the scratch folder once the child is gone, however it goes (a child the
        # kernel kills with its dead worker cannot remove it itself). It waits for the end of a pipe whose only
        # writer is the child.
        jan_r, jan_w = os.pipe()
        self.janitor: subprocess.Popen | None = None
        try:
            try:
                self.janitor = subprocess.Popen(["/bin/sh", "-c", _JANITOR, self.scratch], stdin=jan_r,
                                                stdout=subprocess.DEVNULL, close_fds=True)
            except OSError as e:  # no janitor: the worker and the next child's sweep still remove the folder
                logger.info("no janitor for the decoding child's scratch folder (%s)", e)
            self.process = _spawn(lambda: subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(req_r), str(rep_w)],
                pass_fds=(req_r, rep_w, jan_w), stdin=subprocess.DEVNULL, env=env, close_fds=True,
            ))
        except BaseException:
            for fd in (req_w, rep_r):
                os.close(fd)
            os.close(jan_w)
            jan_w = -1
            if self.janitor is not None:
                self.janitor.wait()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        finally:
            for fd in (req_r, rep_w, jan_r, jan_w):
                if fd >= 0:
                    os.close(fd)
        self.served = 0
        self.started_in = _surroundings()
        self.requests = open(req_w, "wb")
        self.replies = open(rep_r, "rb", buffering=0)  # read with a deadline (select), so not buffered
        try:
            ready = _receive_by(self.replies, time.monotonic() + START_TIMEOUT_S)
        except TimeoutError:
            ready = None
        if ready is None or ready[0] != _READY:
            how, _ = _describe_death(self.end(kill=True))
            raise ChildStartError(f"the decoding child process {how} before it could serve (its error, if any, "
                                  "is on this process's stderr or in the build log)")

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def end(self, *, kill: bool = False) -> int | None:
        """Closes the pipes and reaps the child (killed first when `kill`); its return code (-N: signal N)."""
        for stream in (self.requests, self.replies):
            try:
                stream.close()
            except OSError:
                pass
        if kill and self.process.returncode is None:
            try:
                self.process.kill()
            except ProcessLookupError:
                pass
        code = self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.janitor is not None:
            try:
                self.janitor.wait(timeout=10)  # it ends with the child (its pipe's only writer)
            except subprocess.TimeoutExpired:
                self.janitor.kill()
        return code


def _read_by(stream: io.RawIOBase, size: int, deadline: float | None) -> bytes | None:
    """`size` bytes from the pipe, None at its end; TimeoutError when `deadline` (time.monotonic) passes first."""
    chunks, got, fd = [], 0, stream.fileno()
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        data = os.read(fd, min(size - got, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _receive_by(stream: io.RawIOBase, deadline: float | None) -> tuple[bytes, bytes] | None:
    """`_receive` on the worker's side: the next (kind, payload), None at end; TimeoutError past `deadline`."""
    head = _read_by(stream, _HEADER.size, deadline)
    if head is None:
        return None
    kind, length = _HEADER.unpack(head)
    payload = _read_by(stream, length, deadline) if length else b""
    return None if payload is None else (kind, payload)


def _surroundings() -> int:
    """What a child inherits when it starts (the environment, with bucket credentials, and sys.path), as a hash."""
    return hash((frozenset(os.environ.items()), tuple(sys.path)))


def _describe_death(code: int | None) -> tuple[str, int | None]:
    """('died of SIGSEGV (signal 11, a segmentation fault)', 11) or ('exited with code 1', None), from a return code."""
    if code is not None and code < 0:
        number = -code
        try:
            sig = signal.Signals(number)
            name = sig.name
        except ValueError:
            sig, name = None, f"signal {number}"
        words = _SIGNAL_WORDS.get(sig)
        return f"died of {name} (signal {number}{', ' + words if words else ''})", number
    if code is not None:
        return f"exited with code {code}", None
    return "ended", None
