"""Example functions run in a child process the Beam worker can lose: a decoder that crashes takes only its source.

A native decoder (OpenCV's FFmpeg, libjpeg, ...) can die on a damaged file of a signal (SIGSEGV,
SIGABRT, SIGBUS, SIGFPE) that no `except` catches. In the worker it would take every shard that
worker writes with it, and in an in-process build the driver, leaving its lock and `incomplete.*`
folder behind. `InChild(example_fn)` is an example function that runs `example_fn(record)` in a
child process and streams the items back; a child that dies is `DecoderCrash` (an input error, so
the source's skip, its reason naming the signal and the file) and the next source gets a new child.

The child is forked from the worker, so it starts at once with everything imported and the worker's
setup (OpenCV's thread count) in place, and it serves source after source (one fork per worker
thread, renewed after `RECYCLE_AFTER` sources or a crash; not one per source). It runs only the
example function (OpenCV, NumPy, fsspec: nothing of TensorFlow's or Beam's threads, which a fork
does not copy). Requests and answers are pickles on two pipes: the items, the log records it emits
(logged again in the worker, so they reach the build log) and the example function's exception,
raised again in the worker. Its temporary files (URL fetches, safe names for OpenCV) live in one
folder the worker removes when the child ends, however it ends.

`VIDVOL_DECODE_IN_CHILD=0` runs example functions in the worker itself (e.g. to debug one with
pdb); so does a platform without `os.fork`.
"""

from __future__ import annotations

import atexit
import gc
import io
import logging
import os
import pickle
import shutil
import signal
import struct
import sys
import tempfile
import threading
import traceback
from typing import Any, Iterator

from vidvol.builders import example_io
from vidvol.builders.sources import files
from vidvol.core.names import NAMES_ERRORS, shown

logger = logging.getLogger(__name__)

__all__ = ["DecoderCrash", "DecoderError", "InChild", "decode_in_child"]

ENV = "VIDVOL_DECODE_IN_CHILD"
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
_REQUEST, _ITEM, _LOG, _DONE, _ERROR = b"R", b"I", b"L", b"D", b"E"


class DecoderCrash(ValueError):
    """The child decoding a source died of a signal (or exited): the input is damaged or hits a decoder bug."""


class DecoderError(ValueError):
    """An input error in the child whose exception could not travel back, or that only its traceback classified."""


class ChildStopped(RuntimeError):
    """The decoding child was stopped from outside (SIGINT, SIGTERM, SIGHUP): the build stops too."""


def decode_in_child() -> bool:
    """Whether example functions wrapped in `InChild` run in a child (`VIDVOL_DECODE_IN_CHILD`, default on)."""
    off = os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off")
    return not off and hasattr(os, "fork")


# --------------------------------------------------------------------------------------------
# The child's side
# --------------------------------------------------------------------------------------------


def _send(out: io.BufferedWriter, kind: bytes, payload: bytes = b"") -> None:
    out.write(_HEADER.pack(kind, len(payload)))
    out.write(payload)
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
            fields["msg"] = record.getMessage()
            fields["args"] = None
            if record.exc_info:
                fields["exc_text"] = "".join(traceback.format_exception(*record.exc_info))
            elif record.exc_text:
                fields["exc_text"] = record.exc_text
            _send(self.out, _LOG, pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # pylint: disable=broad-except  (a log line is never worth the source)
            pass


def _error_payload(error: BaseException) -> bytes:
    """What the worker needs to raise `error` again: whether it is an input error, its text, the child's traceback, itself."""
    text = f"{type(error).__name__}: {error}"
    tb = "".join(traceback.format_exception(error))
    try:
        pickled = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(pickled)
    except Exception:  # pylint: disable=broad-except  (an exception that cannot travel: its text does)
        pickled = b""
    return pickle.dumps((example_io.is_input_error(error), text, tb, pickled), protocol=pickle.HIGHEST_PROTOCOL)


def _serve(requests: io.BufferedReader, replies: io.BufferedWriter, scratch: str) -> None:
    """The child's loop: run each requested `(example_fn, record)`, stream the answer; return at end of input."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    os.environ[files.FETCH_DIR_ENV] = scratch  # URL fetches and safe names land where the worker cleans up
    tempfile.tempdir = scratch
    root = logging.getLogger()
    root.handlers = [_PipeLogHandler(replies)]
    while True:
        message = _receive(requests)
        if message is None:
            return
        try:
            example_fn, record = pickle.loads(message[1])
            for item in example_fn(record):
                _send(replies, _ITEM, pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
                del item
        except Exception as e:  # pylint: disable=broad-except  (every error goes back to the worker)
            payload = _error_payload(e)
            del e
            _send(replies, _ERROR, payload)
        else:
            _send(replies, _DONE)


# --------------------------------------------------------------------------------------------
# The worker's side
# --------------------------------------------------------------------------------------------

_lock = threading.Lock()
_idle: list[_Child] = []  # children waiting for their next source, any thread may take one
_in_child = False  # True in a child: an InChild met there runs inline
_fork_failed = False  # once a fork failed (no memory, process limit), this worker decodes inline


class _Child:
    """One forked child and the worker's ends of its pipes."""

    def __init__(self):
        self.scratch = tempfile.mkdtemp(prefix="vidvol-decoder-", dir=_scratch_root())
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            with _lock:
                # The worker's objects go to gc's permanent generation for the fork: the child's collections
                # then never walk (and so never copy) the pages they sit on. The worker takes them back at once.
                gc.freeze()
                try:
                    pid = os.fork()
                    if pid == 0:  # the child: never returns
                        _child_main(req_r, rep_w, self.scratch)
                finally:
                    gc.unfreeze()
        except OSError:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        os.close(req_r)
        os.close(rep_w)
        self.pid = pid
        self.served = 0
        self.requests = open(req_w, "wb")  # pylint: disable=consider-using-with
        self.replies = open(rep_r, "rb")  # pylint: disable=consider-using-with

    def end(self, *, kill: bool = False) -> int | None:
        """Closes the pipes, reaps the child (killed first when `kill`); its wait status (None if already reaped)."""
        for stream in (self.requests, self.replies):
            try:
                stream.close()
            except OSError:
                pass
        status = None
        if self.pid:
            if kill:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                status = None
            self.pid = 0
        shutil.rmtree(self.scratch, ignore_errors=True)
        return status


def _scratch_root() -> str:
    root = files.fetch_dir()
    os.makedirs(root, exist_ok=True)
    return root


def _release_inherited(keep: set[int]) -> None:
    """In the child: point every inherited descriptor but stdio and `keep` at /dev/null.

    The child must not hold the worker's sockets, shard files, lock files or other children's pipes
    open after the worker lets go of them. Each number stays taken (by /dev/null) rather than closed,
    so that no file the child opens later gets the number of a stale file object that may close it.
    """
    try:
        fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
    except OSError:
        fds = list(range(3, 1024))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd > 2 and fd not in keep and fd != devnull:
            try:
                os.dup2(devnull, fd, inheritable=False)
            except OSError:
                pass
    os.close(devnull)
    # The worker's sys.stdout/sys.stderr may be such a descriptor (a build session's log file): use fds 1 and 2.
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors=NAMES_ERRORS)  # pylint: disable=consider-using-with
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors=NAMES_ERRORS)  # pylint: disable=consider-using-with


def _child_main(req_r: int, rep_w: int, scratch: str) -> None:
    """Right after the fork, in the child: serve until the worker closes the pipe, then exit without cleanup."""
    global _in_child
    code = 0
    try:
        _in_child = True
        _idle.clear()
        _release_inherited({req_r, rep_w})
        with open(req_r, "rb") as requests, open(rep_w, "wb") as replies:
            _serve(requests, replies, scratch)
    except BaseException:  # pylint: disable=broad-except
        code = 1
    finally:
        os._exit(code)  # pylint: disable=protected-access  (no atexit, no flushing of the worker's buffers)


def _take() -> _Child | None:
    """An idle child, else a new one; None when this worker cannot fork (then it decodes inline)."""
    global _fork_failed
    with _lock:
        if _idle:
            return _idle.pop()
    if _fork_failed:
        return None
    try:
        return _Child()
    except OSError as e:
        _fork_failed = True
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


def _describe_death(status: int | None) -> tuple[str, int | None]:
    """('died of SIGSEGV (signal 11, a segmentation fault)', 11) or ('exited with code 1', None)."""
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            sig = signal.Signals(number)
            name = sig.name
        except ValueError:
            sig, name = None, f"signal {number}"
        words = _SIGNAL_WORDS.get(sig)
        return f"died of {name} (signal {number}{', ' + words if words else ''})", number
    if status is not None and os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}", None
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


def _raised_again(payload: bytes) -> BaseException:
    """The child's exception, as the worker raises it (an input error stays one)."""
    is_input, text, tb, pickled = pickle.loads(payload)
    error = None
    if pickled:
        try:
            error = pickle.loads(pickled)
        except Exception:  # pylint: disable=broad-except
            error = None
    if error is None or (is_input and not example_io.is_input_error(error)):
        error = DecoderError(text) if is_input else RuntimeError(text)
    error.add_note("raised in the decoding child process:\n" + tb.rstrip())
    return error


def _relog(payload: bytes) -> None:
    fields = pickle.loads(payload)
    record = logging.makeLogRecord(fields)
    logging.getLogger(record.name).handle(record)


def _run_in_child(example_fn: example_io.ExampleFn, record: Any) -> Iterator[Any]:
    """Streams `example_fn(record)`'s items from a child; a child that dies raises DecoderCrash naming the file."""
    path = example_io.source_file(record)
    request = pickle.dumps((example_fn, record), protocol=pickle.HIGHEST_PROTOCOL)
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
            message = _receive(child.replies)
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
        if child.pid:
            if finished:
                _give_back(child)
            else:  # left mid-stream (the consumer stopped, or the worker was interrupted): the pipe is out of step
                child.end(kill=True)


class InChild:
    """An example function that runs `example_fn` in a child process the worker can lose (see the module docstring).

    Picklable (Beam ships it to the workers); the child is made in the worker on first use.
    """

    def __init__(self, example_fn: example_io.ExampleFn):
        self.example_fn = example_fn

    def __call__(self, record: Any) -> Iterator[Any]:
        if _in_child or not decode_in_child():
            return iter(self.example_fn(record))
        return _run_in_child(self.example_fn, record)

    def __repr__(self) -> str:
        return f"InChild({self.example_fn!r})"
