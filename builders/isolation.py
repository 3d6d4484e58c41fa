"""Example functions run in a child process the Beam worker can lose: a decoder that crashes takes only its source.

A native decoder (OpenCV's FFmpeg, libjpeg, ...) can die on a damaged file of a signal (SIGSEGV,
SIGABRT, SIGBUS, SIGFPE) that no `except` catches, taking the worker's shards (or, in-process, the
driver) with it. `InChild(example_fn)` runs `example_fn(record)` in a child process and streams the
items back; a child that dies is `DecoderCrash` (the source's skip). How the child lives is in
`InChild`; its pipe protocol and process life are `vidvol.builders.decoding_child`'s, what its deaths and
silences mean (a crash, a source's deadline passed, a stop from outside) is decided here. `VIDVOL_DECODE_IN_CHILD=0` runs example functions in the worker itself (e.g. to debug
one with pdb); so does a platform that is not POSIX, and a worker that cannot start a process.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import time
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import cloudpickle

from vidvol.builders import decoding_child
from vidvol.builders import example_io
from vidvol.builders.decoding_child import ChildStartError as ChildStartError  # raised by InChild's first start
from vidvol.builders.decoding_child import _DONE, _ITEM, _LOG, _REQUEST, _SIZE, _STOP_SIGNALS
from vidvol.builders.decoding_child import _Child, _describe_death, _receive_by, _send, _surroundings
from vidvol.core import redact
from vidvol.core.names import shown

logger = logging.getLogger(__name__)

__all__ = ["DecoderCrash", "DecoderError", "DecoderTimeout", "InChild", "decode_in_child", "decode_timeout_s"]

ENV = "VIDVOL_DECODE_IN_CHILD"
TIMEOUT_ENV = "VIDVOL_DECODE_TIMEOUT_S"  # seconds one source may keep its child busy (0: no limit)
TIMEOUT_S = 600.0  # the default deadline of one source, plus TIMEOUT_S_PER_GIB for each GiB of its file
TIMEOUT_S_PER_GIB = 1200.0  # a source's file of 1 GiB gets 600 + 1200 s (a slow disk, a long video)
RECYCLE_AFTER = 256  # sources one child serves before a fresh one takes over (whatever the decoders leaked)


class DecoderCrash(ValueError):
    """The child decoding a source died of a signal (or exited): the input is damaged or hits a decoder bug."""


class DecoderError(ValueError):
    """An input error in the child whose exception could not travel back, or that only its traceback classified."""


class DecoderTimeout(DecoderCrash):
    """The child decoding a source gave no answer before the source's deadline: it was killed (a hung decoder)."""


class ChildStopped(RuntimeError):
    """The decoding child was stopped from outside (SIGINT, SIGTERM, SIGHUP): the build stops too."""


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
# The worker's side: a pool of children, what their deaths and silences mean
# --------------------------------------------------------------------------------------------

_lock = decoding_child._lock  # one lock for the pool and the spawner thread
_idle: list[_Child] = []  # children waiting for their next source, any thread may take one
_start_failed = False  # once a child could not start (no memory, process limit), this worker decodes inline


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
    if decoding_child.in_child:
        return
    with _lock:
        children, _idle[:] = list(_idle), []
    for child in children:
        child.end()


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
        if decoding_child.in_child or not decode_in_child():
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
