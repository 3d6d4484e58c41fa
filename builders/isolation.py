"""Example functions run in a child process the Beam worker can lose: a decoder that crashes takes only its source.

A native decoder (OpenCV's FFmpeg, libjpeg, ...) can die on a damaged file of a signal (SIGSEGV,
SIGABRT, SIGBUS, SIGFPE) that no `except` catches, taking the worker's shards (or, in-process, the
driver) with it. `InChild(example_fn)` runs `example_fn(record)` in a child process and streams the
items back; a child that dies is `DecoderCrash` (the source's skip). How the child lives is in
`InChild`. `VIDVOL_DECODE_IN_CHILD=0` runs example functions in the worker itself (e.g. to debug
one with pdb); so does a platform that is not POSIX, and a worker that cannot start a process.
"""

from __future__ import annotations

import atexit
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
from collections.abc import Callable, Iterator, Sequence

import cloudpickle

from vidvol.builders import example_io
from vidvol.builders.sources import files
from vidvol.core import redact
from vidvol.core.names import shown

logger = logging.getLogger(__name__)

__all__ = ["DecoderCrash", "DecoderError", "DecoderTimeout", "InChild", "decode_in_child", "decode_timeout_s"]

ENV = "VIDVOL_DECODE_IN_CHILD"
TIMEOUT_ENV = "VIDVOL_DECODE_TIMEOUT_S"  # seconds one source may keep its child busy (0: no limit)
TIMEOUT_S = 600.0  # the default deadline of one source, plus TIMEOUT_S_PER_GIB for each GiB of its file
TIMEOUT_S_PER_GIB = 1200.0  # a source's file of 1 GiB gets 600 + 1200 s (a slow disk, a long video)
START_TIMEOUT_S = 300.0  # a child that does not say it is ready within this is a failed start
_PARENT_ENV = "VIDVOL_CHILD_PARENT"
_SCRATCH_RE = re.compile(r"^vidvol-decoder-(\d+)-(\d+)-")  # worker pid, its PID namespace's inode


def _pid_namespace() -> int:
    """The inode of this process's PID namespace (0 where unknown): a pid means a process only inside it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0
RECYCLE_AFTER = 256  # sources one child serves before a fresh one takes over (whatever the decoders leaked)
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


class DecoderCrash(ValueError):
    """The child decoding a source died of a signal (or exited): the input is damaged or hits a decoder bug."""


class DecoderError(ValueError):
    """An input error in the child whose exception could not travel back, or that only its traceback classified."""


class DecoderTimeout(DecoderCrash):
    """The child decoding a source gave no answer before the source's deadline: it was killed (a hung decoder)."""


class ChildStopped(RuntimeError):
    """The decoding child was stopped from outside (SIGINT, SIGTERM, SIGHUP): the build stops too."""


class ChildStartError(OSError):
    """A decoding child could not start (its Python failed before serving): the worker decodes inline."""


def decode_in_child() -> bool:
    """Whether example functions wrapped in `InChild` run in a child (`VIDVOL_DECODE_IN_CHILD`, default on)."""
    off = os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off")
    return not off and os.name == "posix"


def decode_timeout_s(path: str = "", timeout_s: float | None = None) -> float | None:
    """The deadline of one source (seconds its child may work on it; None: no limit).

    `timeout_s` (`InChild(timeout_s=...)`), else `VIDVOL_DECODE_TIMEOUT_S`, else sized from the source:
    `TIMEOUT_S` plus `TIMEOUT_S_PER_GIB` per GiB of its file when that is a local file (a URL's size is not
    asked for: it gets `TIMEOUT_S`, its fetch included). 0 or less: no limit.
    """
    if timeout_s is None:
        given = os.environ.get(TIMEOUT_ENV, "").strip()
        if given:
            try:
                timeout_s = float(given)
            except ValueError:
                raise ValueError(f"{TIMEOUT_ENV}={given!r}: expected a number of seconds (0: no limit)") from None
    if timeout_s is None:
        size = 0
        if path and "://" not in path:
            try:
                size = os.stat(path).st_size
            except (OSError, ValueError):
                size = 0
        timeout_s = TIMEOUT_S + TIMEOUT_S_PER_GIB * size / 2**30
    return timeout_s if timeout_s > 0 else None


# --------------------------------------------------------------------------------------------
# The child's side
# --------------------------------------------------------------------------------------------


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


def _child_main(req_fd: int, rep_fd: int) -> None:
    """The child's entry (see `_BOOTSTRAP`): serve until the worker closes the pipe."""
    global _in_child
    _in_child = True
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
from vidvol.builders import isolation
isolation._child_main(int(sys.argv[1]), int(sys.argv[2]))
"""
_LOG_LEVEL_ENV = "VIDVOL_CHILD_LOG_LEVEL"
# The janitor's script ($0: the child's scratch folder): wait for the end of its input, then remove the folder.
_JANITOR = 'cat > /dev/null; case "$(basename "$0")" in vidvol-decoder-*) rm -rf -- "$0";; esac'


# --------------------------------------------------------------------------------------------
# The worker's side
# --------------------------------------------------------------------------------------------

_lock = threading.Lock()
_idle: list[_Child] = []  # children waiting for their next source, any thread may take one
_in_child = False  # True in a child: an InChild met there runs inline
_start_failed = False  # once a child could not start (no memory, process limit), this worker decodes inline


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


def _take() -> _Child | None:
    """An idle child, else a new one; None when this worker cannot start one (then it decodes inline)."""
    global _start_failed
    while True:
        with _lock:
            child = _idle.pop() if _idle else None
        if child is None:
            break
        if child.process.poll() is None and child.started_in == _surroundings():
            return child
        # Died while idle (killed from outside: not the next source's fault), or started before this process's
        # environment changed (a notebook that set AWS_* after its first build): a new child gets the current one.
        child.end(kill=True)
    if _start_failed:
        return None
    try:
        return _Child()
    except OSError as e:
        _start_failed = True
        logger.warning("cannot start a decoding child process (%s): this worker decodes in its own process, "
                       "so a decoder crash would take the worker with it", e)
        return None


def _give_back(child: _Child) -> None:
    if child.served >= RECYCLE_AFTER:
        child.end()
        return
    with _lock:
        _idle.append(child)


@atexit.register
def _end_all() -> None:
    """At the worker's exit: every idle child ends (they also end by themselves when the pipe closes)."""
    if _in_child:
        return
    with _lock:
        children, _idle[:] = list(_idle), []
    for child in children:
        child.end()


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


def _crash(child: _Child, path: str) -> BaseException:
    """The error for a child that ended in the middle of a source: DecoderCrash, or ChildStopped for a stop signal."""
    how, number = _describe_death(child.end(kill=True))
    what = shown(path) if path else "this source"
    if number in _STOP_SIGNALS:
        return ChildStopped(f"{what}: the process decoding it {how}; the build was stopped from outside")
    return DecoderCrash(
        f"{what}: the decoder crashed; the process decoding this file {how}. The file is damaged or hits a "
        "decoder bug: re-encode it (e.g. `ffmpeg -i IN -c:v libx264 OUT.mp4`) or leave it out"
    )


def _timed_out(child: _Child, path: str, timeout_s: float) -> DecoderTimeout:
    """The error for a child past its source's deadline, killed (its scratch removed) before this returns."""
    child.end(kill=True)
    what = shown(path) if path else "this source"
    return DecoderTimeout(
        f"{what}: the decoder gave no answer within {timeout_s:g} s (a hung decoder, or a file far slower to "
        f"decode than its size suggests); the process decoding it was killed. Leave the file out or re-encode it, "
        f"or give decoding more time: {TIMEOUT_ENV}=SECONDS (0: no limit)"
    )


def _raised_again(payload: bytes) -> BaseException:
    """The child's exception, as the worker raises it (an input error stays one)."""
    is_input, text, tb, pickled = pickle.loads(payload)
    error = None
    if pickled:
        try:
            error = pickle.loads(pickled)
        except Exception:
            error = None
    if error is None or (is_input and not example_io.is_input_error(error)):
        error = DecoderError(text) if is_input else RuntimeError(text)
    error.add_note("raised in the decoding child process:\n" + redact.text(tb.rstrip()))
    return redact.exception(error)


def _relog(payload: bytes) -> None:
    """A log record of the child, logged here (so it reaches the build log); a broken one is dropped."""
    try:
        # makeLogRecord runs the record factory on an empty record, then sets the child's fields: redact them here.
        record = redact.record(logging.makeLogRecord(pickle.loads(payload)))
        if isinstance(record.msg, str):
            record.msg = redact.text(record.msg)
        logging.getLogger(record.name).handle(record)
    except Exception:  # a log line is never worth the source
        pass


def _run_in_child(functions: bytes, example_fn: example_io.ExampleFn, record: Any,
                  timeout_s: float | None = None) -> Iterator[Any]:
    """Streams `example_fn(record)`'s items from a child; a child that dies raises DecoderCrash naming the file,
    one that is still busy when the source's deadline (`decode_timeout_s`) passes is killed: DecoderTimeout.

    `functions`: the pickled `(setup, example_fn)`, made once per `InChild`. The deadline counts the time this
    worker waits on the child, not the time the consumer spends on the items between two answers.
    """
    path = example_io.source_file(record)
    budget = decode_timeout_s(path, timeout_s)
    try:
        pickled = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # e.g. a record holding a lambda: cloudpickle takes it by value
        pickled = cloudpickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    request = b"".join((_SIZE.pack(len(functions)), functions, pickled))
    child = _take()
    if child is None:
        yield from example_fn(record)
        return
    finished = False
    try:
        child.served += 1
        try:
            _send(child.requests, _REQUEST, request)
        except (BrokenPipeError, OSError):
            raise _crash(child, path) from None
        while True:
            began = time.monotonic()
            try:
                message = _receive_by(child.replies, None if budget is None else began + budget)
            except TimeoutError:
                raise _timed_out(child, path, decode_timeout_s(path, timeout_s) or 0.0) from None
            if budget is not None:
                budget -= time.monotonic() - began
            if message is None:
                raise _crash(child, path)
            kind, payload = message
            if kind == _ITEM:
                item = pickle.loads(payload)
                del payload
                yield item
                del item
            elif kind == _LOG:
                _relog(payload)
            elif kind == _DONE:
                finished = True
                return
            else:
                finished = True
                raise _raised_again(payload)
    finally:
        if child.alive:
            if finished:
                _give_back(child)
            else:  # left mid-stream (the consumer stopped, or the worker was interrupted): the pipe is out of step
                child.end(kill=True)


class InChild:
    """An example function that runs `example_fn` in a child process the worker can lose (see below).

    `setup` functions run once in each child before its first source (what a Beam worker's setup does
    for the worker, e.g. `video.single_threaded_opencv`). Picklable (Beam ships it to the workers);
    the child is started in the worker on first use.

    Why: a decoder killed by a signal in the worker would take every shard that worker writes with
    it, and in an in-process build the driver, leaving its lock and `incomplete.*` folder behind. A
    child that dies is `DecoderCrash` (an input error, so the source's skip, its reason naming the
    signal and the file) and the next source gets a new child.

    The child is a fresh Python (not a fork: a Beam worker runs gRPC and TensorFlow threads, whose
    state a forked child would inherit half-way), started when the worker meets its first source and
    kept for the following ones (renewed after `RECYCLE_AFTER` sources or a crash; not one per
    source). It imports only what the example function needs: the `vidvol` package is entered
    without running its facade (`vidvol/__init__.py`, which loads TensorFlow), until something asks
    the facade for a name. The example function's setup functions (`setup`, e.g. OpenCV's thread
    count) run in it once. Requests and answers are pickles on two pipes: the items, the log records
    it emits (logged again in the worker, so they reach the build log) and the example function's
    exception, raised again in the worker. Its temporary files (URL fetches, safe names for OpenCV)
    live in one folder the worker removes when the child ends, however it ends.
    """

    def __init__(self, example_fn: example_io.ExampleFn, *, setup: Sequence[Callable[[], None]] = (),
                 timeout_s: float | None = None):
        self.example_fn = example_fn
        self.setup = tuple(setup)
        self.timeout_s = timeout_s
        self._functions: bytes | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"example_fn": self.example_fn, "setup": self.setup, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["example_fn"], setup=state["setup"], timeout_s=state.get("timeout_s"))

    def __call__(self, record: Any) -> Iterator[Any]:
        if _in_child or not decode_in_child():
            return iter(self.example_fn(record))
        if self._functions is None:
            # cloudpickle, as Beam ships functions: a function of a script's __main__ travels by value.
            self._functions = cloudpickle.dumps((self.setup, self.example_fn), protocol=pickle.HIGHEST_PROTOCOL)
        return _run_in_child(self._functions, self.example_fn, record, self.timeout_s)

    def close(self) -> None:
        """The worker is done with its sources (Beam's DoFn teardown): its idle children end, their scratch goes."""
        _end_all()

    def __repr__(self) -> str:
        return f"InChild({self.example_fn!r})"
