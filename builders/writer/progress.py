"""Build progress from the workers' own records: one bar (or plain line) per split, on every runner.

Workers write, next to the shard they are writing, a tiny JSON record `<shard>.partial.progress`
(`ProgressRecorder`); the driver polls those records while the pipeline runs (`ProgressMonitor`).
Nothing comes from runner metrics, so the same display works on the FnApiRunner (in memory or
multi-process), the portable runner and Dask. Displays: `BarDisplay` (tqdm bars) and
`LineDisplay` (plain lines, for logs and CI).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import sys
import threading
import time
from typing import Any, Protocol, TextIO
from collections.abc import Callable, Mapping, Sequence

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.builders.writer import outputs

logger = logging.getLogger(__name__)

PROGRESS_SUFFIX = ".progress"
WRITE_INTERVAL_S = 0.5  # how often a worker rewrites its shard's record (local data_dir)
REMOTE_WRITE_INTERVAL_S = 5.0  # the same on gs://, s3://: each rewrite is a remote object write
POLL_INTERVAL_S = 0.5  # how often the driver reads the records (local data_dir)
REMOTE_POLL_INTERVAL_S = 5.0
LINE_INTERVAL_S = 10.0  # plain progress lines: at most one per split this often (plus a final one)


def progress_path(shard_path: str) -> str:
    """Where the worker writing `shard_path` keeps its progress record."""
    return shard_path + PROGRESS_SUFFIX


def is_remote(path: str) -> bool:
    """True for URLs (`gs://...`, `s3://...`: every file operation is a remote call)."""
    return "://" in path


def _write_whole(path: str, text: str) -> None:
    """Writes a small file whole: a temporary file (`*.tmp`, swept up after the pipeline), then a rename."""
    outputs.write_whole(path, text.encode("utf-8"))


def read_progress(path: str) -> dict[str, Any] | None:
    """A shard's progress record, or None when there is none (yet) or it cannot be read right now."""
    try:
        return json.loads(outputs.read_bytes(path))
    except (tf.errors.NotFoundError, tf.errors.OpError, ValueError, OSError, RuntimeError):
        return None


class ProgressRecorder:
    """Worker side: counts one shard's inputs as they are done and rewrites its record now and then.

    The record `<shard>.partial.progress` holds inputs done so far, examples written and inputs
    skipped; it is rewritten whole (temporary file, then rename) at most every `WRITE_INTERVAL_S`
    and once more when the shard is complete. `collect_split` removes the records with the shards'
    other sidecars.
    """

    def __init__(self, path: str, num_sources: int, *, interval: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.num_sources = num_sources
        self.interval = interval if interval is not None else (REMOTE_WRITE_INTERVAL_S if is_remote(path) else WRITE_INTERVAL_S)
        self._clock = clock
        self._last_write = clock()
        self.done = 0
        self.examples = 0
        self.skips = 0

    def record(self) -> dict[str, int]:
        """The record as written: inputs done of the shard's inputs, examples written, inputs skipped."""
        return {"done": self.done, "sources": self.num_sources, "examples": self.examples, "skips": self.skips}

    def source_done(self, examples: int, skips: int) -> None:
        """One more input finished (`examples` written and `skips` whole-input skips so far in the shard)."""
        self.done += 1
        self.examples, self.skips = examples, skips
        if self._clock() - self._last_write >= self.interval:
            self.write()

    def write(self) -> None:
        """Rewrites the record now. A failed write only costs the display an update, never the shard."""
        self._last_write = self._clock()
        try:
            _write_whole(self.path, json.dumps(self.record()))
        except (tf.errors.OpError, OSError) as e:
            logger.warning("could not write progress record %s: %s", self.path, e)


@dataclasses.dataclass
class SplitProgress:
    """What the records of one split's shards add up to."""

    split: str
    total: int  # inputs planned for the split
    done: int = 0  # inputs done, skipped ones included
    examples: int = 0
    skips: int = 0

    @property
    def finished(self) -> bool:
        return self.done >= self.total


class Display(Protocol):
    """Something that shows the per-split progress."""

    def update(self, states: Sequence[SplitProgress]) -> None: ...

    def close(self, states: Sequence[SplitProgress]) -> None: ...


def _eta(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(round(seconds))))


def progress_line(title: str, state: SplitProgress, elapsed: float) -> str:
    """`hmdb51/split1_20x64x64 train: 4/6 inputs (67%), 4 examples, 0 skipped, 1.3 inputs/s, ETA 0:00:02`."""
    pct = 100.0 * state.done / state.total if state.total else 100.0
    rate = state.done / elapsed if elapsed > 0 else 0.0
    line = (f"{title} {state.split}: {state.done}/{state.total} inputs ({pct:.0f}%), {state.examples} examples, "
            f"{state.skips} skipped, {rate:.1f} inputs/s")
    if state.finished:
        return line + f", done in {_eta(elapsed)}"
    if rate > 0:
        return line + f", ETA {_eta((state.total - state.done) / rate)}"
    return line


class LineDisplay:
    """One plain line per split at most every `interval` seconds while it moves, and a final one.

    At most every `LINE_INTERVAL_S` by default, plus a final one, for logs and CI.
    """

    def __init__(self, title: str, emit: Callable[[str], None], *, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.title = title
        self.emit = emit
        self.interval = LINE_INTERVAL_S if interval is None else interval
        self._clock = clock
        self._start = clock()
        self._last: dict[str, tuple[float, int]] = {}  # split -> (time of its last line, done at that line)
        self._final: set[str] = set()
        self.lines: list[str] = []

    def _show(self, state: SplitProgress) -> None:
        now = self._clock()
        line = progress_line(self.title, state, now - self._start)
        self._last[state.split] = (now, state.done)
        if state.finished:
            self._final.add(state.split)
        self.lines.append(line)
        self.emit(line)

    def update(self, states: Sequence[SplitProgress]) -> None:
        now = self._clock()
        for state in states:
            if state.split in self._final or not state.total:
                continue
            last_time, last_done = self._last.get(state.split, (self._start, 0))
            if state.finished or (state.done != last_done and now - last_time >= self.interval):
                self._show(state)

    def close(self, states: Sequence[SplitProgress]) -> None:
        for state in states:
            if state.split not in self._final and state.total:
                self._show(state)


def _tqdm_class(stream: TextIO):
    """tqdm's notebook bar in a Jupyter kernel with ipywidgets, else its terminal bar."""
    if "ipykernel" in sys.modules and not is_tty(stream):
        try:
            from IPython import get_ipython
            import ipywidgets  # noqa: F401

            if get_ipython() is not None and "IPKernelApp" in get_ipython().config:
                from tqdm.notebook import tqdm

                return tqdm
        except Exception:  # no IPython, no ipywidgets: terminal bars
            pass
    from tqdm import tqdm

    return tqdm


def is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def notebook_bars_available() -> bool:
    """Whether this process is a Jupyter kernel that can show tqdm's notebook bars (needs ipywidgets)."""
    return _tqdm_class(_NoTTY()).__module__ == "tqdm.notebook"


class _NoTTY:
    def isatty(self) -> bool:
        return False


BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} inputs [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


def _columns(stream: TextIO) -> int:
    """The terminal's width (0 when it reports none)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


class BarDisplay:
    """One tqdm bar per split: inputs done / planned, rate, ETA; examples and skips as its postfix.

    `tqdm.auto` in a notebook with ipywidgets, terminal bars on a TTY.
    """

    def __init__(self, title: str, stream: TextIO, states: Sequence[SplitProgress]):
        tqdm = _tqdm_class(stream)
        self.bars = {}
        if tqdm.__module__ == "tqdm.notebook":
            kwargs: dict[str, Any] = {}
        elif _columns(stream):
            kwargs = {"file": stream, "dynamic_ncols": True}
        else:  # a terminal that reports no size (some CI ptys): tqdm would draw an empty bar
            kwargs = {"file": stream, "ncols": 100}
        for position, state in enumerate(s for s in states if s.total):
            self.bars[state.split] = tqdm(
                total=state.total, desc=f"{title} {state.split}", unit=" inputs", position=position, leave=True,
                mininterval=0.2, smoothing=0.1, bar_format=BAR_FORMAT, **kwargs,
            )

    def update(self, states: Sequence[SplitProgress]) -> None:
        for state in states:
            bar = self.bars.get(state.split)
            if bar is None:
                continue
            bar.set_postfix_str(f"{state.examples} examples, {state.skips} skipped", refresh=False)
            if state.done > bar.n:
                bar.update(state.done - bar.n)
            elif state.done < bar.n:  # a retried shard starts over
                bar.n = state.done
                bar.refresh()

    def close(self, states: Sequence[SplitProgress]) -> None:
        self.update(states)
        for bar in self.bars.values():
            bar.close()


class Displays:
    """Several displays fed the same states (terminal bars plus plain lines in the build log)."""

    def __init__(self, *displays: Display):
        self.displays = displays

    def update(self, states: Sequence[SplitProgress]) -> None:
        for d in self.displays:
            d.update(states)

    def close(self, states: Sequence[SplitProgress]) -> None:
        for d in self.displays:
            d.close(states)


class ProgressMonitor:
    """Driver side: polls the shards' records in a background thread and feeds a display.

    `shards` maps each split to `(record path, inputs in that shard)` of its planned shards. Use as a
    context manager around `pipeline.run().wait_until_finish()`: records are polled every
    `interval` seconds from a daemon thread (so it works whether `run()` blocks, as the
    FnApiRunner's does, or returns at once, as the portable and Dask runners' do) and once more
    when the block ends; `states` then holds the final per-split sums.

    It shows, per split, inputs done / inputs planned (a skipped input counts as done), the rate and
    the ETA. `done` maps the record paths of shards already finished (kept by a resumed build) to their
    records.
    """

    def __init__(self, shards: Mapping[str, Sequence[tuple[str, int]]], display: Display | None = None, *,
                 interval: float | None = None, done: Mapping[str, Mapping[str, int]] | None = None):
        self.shards = {split: list(items) for split, items in shards.items()}
        self.display = display
        remote = any(is_remote(path) for items in self.shards.values() for path, _ in items)
        self.interval = interval if interval is not None else (REMOTE_POLL_INTERVAL_S if remote else POLL_INTERVAL_S)
        self._records: dict[str, dict[str, Any]] = {}
        self._complete: set[str] = set()  # records that reached their shard's size: not read again
        # `done`: the records of shards finished before this pipeline (kept from a dead build), never read.
        self._records.update({path: dict(record) for path, record in (done or {}).items()})
        self._complete.update(done or {})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.states = [SplitProgress(split, sum(n for _, n in items)) for split, items in self.shards.items()]

    def poll(self) -> list[SplitProgress]:
        """Reads the records not yet complete and returns the per-split sums."""
        with self._lock:
            states = []
            for split, items in self.shards.items():
                state = SplitProgress(split, sum(n for _, n in items))
                for path, n in items:
                    if path not in self._complete:
                        record = read_progress(path)
                        if record is not None:
                            self._records[path] = record
                            if record.get("done", 0) >= n:
                                self._complete.add(path)
                    record = self._records.get(path)
                    if record:
                        state.done += min(int(record.get("done", 0)), n)
                        state.examples += int(record.get("examples", 0))
                        state.skips += int(record.get("skips", 0))
                states.append(state)
            self.states = states
            return states

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                states = self.poll()
                if self.display is not None:
                    self.display.update(states)
            except Exception:  # the display must never fail the build
                logger.debug("progress poll failed", exc_info=True)

    def __enter__(self) -> ProgressMonitor:
        if self.display is not None:
            self.display.update(self.states)
        self._thread = threading.Thread(target=self._run, name="vidvol-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        states = self.poll()
        if self.display is not None:
            try:
                self.display.close(states)
            except Exception:
                logger.debug("progress display failed to close", exc_info=True)
