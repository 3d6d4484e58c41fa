"""What a user watching a build sees: progress, warnings and errors on the terminal; the rest in a log file.

A build runs inside a `session`: the terminal shows progress bars, vidvol's warnings and errors and the summary
last; every other line, Beam's workers' included, goes to the build's log file, redacted (`Session`).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import io
import logging
import os
import sys
import tempfile
import threading
from typing import TextIO
from collections.abc import Iterator, Sequence

from vidvol.builders.writer import progress
from vidvol.core import redact
from vidvol.core.names import NAMES_ERRORS  # file names that are not UTF-8 as `caf\xe9`, as everywhere vidvol writes one

logger = logging.getLogger(__name__)

VERBOSE_ENV = "VIDVOL_VERBOSE"
# `logger.info(..., extra=CONSOLE)`: a line meant for the terminal even though it is not a warning.
CONSOLE = {"vidvol_console": True}
# Loggers whose records reach the terminal only from ERROR up (their warnings are start-up chatter).
CHATTY_LOGGERS = frozenset({
    "absl", "tensorflow", "tensorflow_datasets", "root", "py.warnings", "grpc", "urllib3", "botocore", "boto3",
    "s3fs", "fsspec", "aiobotocore", "distributed", "dask", "h5py", "matplotlib", "PIL", "numexpr", "jax",
})
# Beam's records never do: a failed worker's error reaches the terminal as the build's exception.
SILENT_LOGGERS = frozenset({"apache_beam"})
TERMINAL_FORMAT = "%(levelname)s[%(filename)s]: %(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def is_verbose() -> bool:
    """`VIDVOL_VERBOSE=1` (or true/yes/on): leave every log line on the terminal, write no log file."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def log_path_for(log_dir: str, version: str = "", *, now: datetime.datetime | None = None) -> str:
    """`LOG_DIR/build-VERSION-YYYYmmdd-HHMMSS.log`, or a local temporary folder's when log_dir is remote."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    name = f"build-{version}-{stamp}.log" if version else f"build-{stamp}.log"
    if progress.is_remote(log_dir):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in log_dir.split("://", 1)[1].strip("/"))
        log_dir = os.path.join(tempfile.gettempdir(), "vidvol_build_logs", safe)
    return os.path.join(log_dir, name)


def for_terminal(record: logging.LogRecord) -> bool:
    """Whether a log record belongs on the terminal of a quiet build (it always goes to the log file)."""
    if getattr(record, "vidvol_console", False):
        return True
    top = record.name.split(".", 1)[0]
    if top in SILENT_LOGGERS:
        return record.levelno >= logging.CRITICAL
    if top in CHATTY_LOGGERS:
        return record.levelno >= logging.ERROR
    return record.levelno >= logging.WARNING


class _TerminalHandler(logging.Handler):
    """Writes the records `for_terminal` lets through to the session's terminal (tqdm-aware)."""

    def __init__(self, session: Session):
        super().__init__(logging.INFO)
        self.session = session
        self.setFormatter(logging.Formatter(TERMINAL_FORMAT))
        self.addFilter(for_terminal)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage() if getattr(record, "vidvol_console", False) else self.format(record)
            self.session.console(text)
        except Exception:
            self.handleError(record)


class _Block(logging.Filter):
    """Put on the terminal handlers that were there before the session: they stay quiet during it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


_BLOCK = _Block()


def _is_console_handler(handler: logging.Handler, streams: Sequence[object]) -> bool:
    """A handler writing to the terminal (stderr/stdout, or absl's handler, which writes to stderr)."""
    if type(handler).__name__ == "ABSLHandler":
        return True
    if isinstance(handler, logging.FileHandler) or not isinstance(handler, logging.StreamHandler):
        return False
    stream = handler.stream
    if any(stream is s for s in streams if s is not None):
        return True
    try:
        return stream.fileno() in (1, 2)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False


def _terminal_stream() -> tuple[TextIO | None, bool]:
    """Where the user sees output while fd 2 points at the log: a copy of fd 2, or sys.stderr itself
    where it is not fd 2 (Jupyter, a test's capture). Second item: whether the stream is ours to close."""
    err = sys.stderr
    if err is None:
        return None, False
    try:
        fd = err.fileno()
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return err, False
    if fd != 2:
        return err, False
    err.flush()
    encoding = getattr(err, "encoding", None) or "utf-8"
    return os.fdopen(os.dup(2), "w", buffering=1, encoding=encoding, errors=NAMES_ERRORS), True


class Session:
    """One build's terminal and log file.

    A build (one `StreamingBeamBuilder.download_and_prepare`, or one `python -m vidvol.beam_jobs.build`)
    runs inside a `session`. Unless `VIDVOL_VERBOSE=1` (`--verbose` on the build command):

    - the log file is `DATA_DIR/NAME/CONFIG/build-VERSION-YYYYmmdd-HHMMSS.log`, next to the dataset's
      version folder (not inside TFDS's `incomplete.*` folder, which is deleted when a build fails;
      a local temporary folder when data_dir is remote); its path is printed once, at the start;
    - file descriptors 1 and 2 of this process point at that file while the build runs, so the
      SDK worker processes Beam starts (which inherit them), TensorFlow's C++ start-up lines, gRPC
      and TFDS's prints all land there; `sys.stdout`/`sys.stderr` too (also where they are not
      fds 1/2, e.g. in Jupyter);
    - no URL's credentials or query string, in any line (`vidvol.core.redact`: the command line, every
      log record of the process and of the Beam workers, the summary);
    - Python logging: every record at INFO and above goes to the log file; the terminal gets
      vidvol's warnings and errors (and the few lines marked `CONSOLE`, e.g. the small-build choice),
      other libraries' errors, never Beam's own records (a failing worker's error reaches the terminal
      as the build's exception, which names the input that caused it);
    - the terminal gets one progress bar per split (plain lines when it is not a TTY: see
      `vidvol.builders.writer.progress`) and, last, the per-split summary lines and where the skip report is.
      Under the `tfds build` CLI those come at process exit, after TFDS's own output, whose
      `DatasetInfo` dump goes to the log file too.

    On an exception everything is put back first, so the traceback reaches the terminal, followed
    by the log file's path. `VIDVOL_VERBOSE=1` leaves the terminal and logging as they are (no log
    file) and only adds the plain progress lines and the summary.
    """

    def __init__(self, title: str, log_path: str | None, *, quiet: bool, print_summary: bool = True):
        self.title = title
        self.log_path = log_path
        self.quiet = quiet
        self.print_summary = print_summary
        self.summaries: list[str] = []
        self.terminal: TextIO | None = sys.stderr
        self._owns_terminal = False
        self._log: TextIO | None = None
        self._saved_fds: dict[int, int] = {}
        self._saved_streams: tuple[TextIO | None, TextIO | None] = (sys.stdout, sys.stderr)
        self._handlers: list[logging.Handler] = []
        self._blocked: list[logging.Handler] = []
        self._root_level: int | None = None
        self._lock = threading.RLock()

    # -- output -----------------------------------------------------------------------------------
    def console(self, text: str) -> None:
        """A line for the user (bar-aware: it does not tear a tqdm bar)."""
        stream = self.terminal
        if stream is None:
            return
        text = redact.text(text)
        with self._lock:
            try:
                from tqdm import tqdm

                tqdm.write(text, file=stream)
                stream.flush()
            except (ValueError, OSError):  # closed stream: nothing to show it on
                pass

    def log_line(self, text: str) -> None:
        """A line for the log file only (nothing in verbose mode, where there is no log file)."""
        if self._log is None:
            return
        with self._lock:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            try:
                self._log.write(f"{stamp} {redact.text(text)}\n")
            except (ValueError, OSError):
                pass

    def progress_display(self, states: Sequence[progress.SplitProgress]) -> progress.Display:
        """Bars on a TTY (or in a notebook with ipywidgets), else plain lines; plain lines in the log file too."""
        if not self.quiet:
            return progress.LineDisplay(self.title, self.console)
        to_log = progress.LineDisplay(self.title, self.log_line)
        stream = self.terminal
        if stream is not None and (progress.is_tty(stream) or progress.notebook_bars_available()):
            return progress.Displays(progress.BarDisplay(self.title, stream, states), to_log)
        return progress.Displays(progress.LineDisplay(self.title, self.console), to_log)

    def add_summary(self, lines: Sequence[str]) -> None:
        """Lines to show last, when the build ends (they also go to the log file now)."""
        self.summaries.extend(lines)
        for line in lines:
            self.log_line(line)

    # -- set-up and tear-down ---------------------------------------------------------------------
    def _start_quiet(self) -> None:
        assert self.log_path is not None
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "a", buffering=1, encoding="utf-8", errors=NAMES_ERRORS)
        self._log.write(f"=== vidvol build of {self.title}, {datetime.datetime.now().isoformat(timespec='seconds')}, "
                        f"pid {os.getpid()}: {redact.text(' '.join(sys.argv))}\n")
        self.terminal, self._owns_terminal = _terminal_stream()
        for stream in self._saved_streams:
            with contextlib.suppress(Exception):
                stream.flush()
        for fd in (1, 2):
            try:
                saved = os.dup(fd)
            except OSError:
                continue
            os.dup2(self._log.fileno(), fd)
            self._saved_fds[fd] = saved
        sys.stdout = sys.stderr = self._log
        root = logging.getLogger()
        self._root_level = root.level
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)
        self._blocked = [h for h in root.handlers if _is_console_handler(h, self._saved_streams + (sys.__stderr__, sys.__stdout__))]
        for h in self._blocked:
            h.addFilter(_BLOCK)
        to_file = logging.StreamHandler(self._log)
        to_file.setLevel(logging.INFO)
        to_file.setFormatter(logging.Formatter(FILE_FORMAT))
        self._handlers = [to_file, _TerminalHandler(self)]
        for h in self._handlers:
            root.addHandler(h)

    def _restore_streams(self) -> None:
        """fds 1 and 2, sys.stderr back to the terminal (sys.stdout too unless `keep_stdout`)."""
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.flush()
        for fd, saved in self._saved_fds.items():
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
            with contextlib.suppress(OSError):
                os.close(saved)
        self._saved_fds = {}
        sys.stderr = self._saved_streams[1]

    def _restore_rest(self) -> None:
        """sys.stdout, logging and the log file as they were before the session."""
        sys.stdout = self._saved_streams[0]
        root = logging.getLogger()
        for h in self._handlers:
            root.removeHandler(h)
        self._handlers = []
        for h in self._blocked:
            h.removeFilter(_BLOCK)
        self._blocked = []
        if self._root_level is not None:
            root.setLevel(self._root_level)
            self._root_level = None
        if self._owns_terminal and self.terminal is not None:
            with contextlib.suppress(Exception):
                self.terminal.close()
        self.terminal = sys.stderr
        self._owns_terminal = False
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.close()
            self._log = None

    def restore(self) -> None:
        """Everything back as it was before the session (nothing was changed in verbose mode)."""
        if not self.quiet:
            return
        self._restore_streams()
        self._restore_rest()


_current: Session | None = None
_tail: Session | None = None  # a finished quiet session still catching TFDS's CLI output (see `_under_tfds_cli`)
_deferred: list[str] = []  # summary lines the tfds CLI shows at exit
_atexit_registered = False


def current() -> Session | None:
    """The session of the build running in this process, if any."""
    return _current


def _under_tfds_cli() -> bool:
    """Whether this build was started by TFDS's `tfds build` CLI (its `cli_utils.download_and_prepare`).

    After the build, that CLI logs and prints the whole `DatasetInfo` (a hundred lines), so the
    summary is shown at exit instead, as the last lines of the command.
    """
    frame = sys._getframe(1)
    suffix = os.path.join("scripts", "cli", "cli_utils.py")
    while frame is not None:
        if frame.f_code.co_name == "download_and_prepare" and frame.f_code.co_filename.endswith(suffix):
            return True
        frame = frame.f_back
    return False


def _end_tail() -> None:
    global _tail
    if _tail is not None:
        tail, _tail = _tail, None
        tail.restore()


def _at_exit() -> None:
    _end_tail()
    if _deferred:
        stream = sys.stderr or sys.__stderr__
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            for line in _deferred:
                stream.write(redact.text(line) + "\n")
            stream.flush()
        _deferred.clear()


@contextlib.contextmanager
def session(title: str, log_dir: str, *, version: str = "", print_summary: bool = True) -> Iterator[Session]:
    """The build's terminal/log arrangement for the duration of the block (reentrant: an inner call
    joins the outer session, whose owner prints the summary)."""
    global _current, _tail, _atexit_registered
    if _current is not None:
        yield _current
        return
    _end_tail()
    redact.install_log_redaction()  # every record of this process, the build's and its libraries'
    quiet = not is_verbose()
    log_path = log_path_for(log_dir, version) if quiet else None
    s = Session(title, log_path, quiet=quiet, print_summary=print_summary)
    cli = _under_tfds_cli()
    if quiet:
        try:
            s._start_quiet()
            s.console(f"{title}: build log {log_path}")
        except OSError as e:  # no writable log folder: everything stays on the terminal
            s.restore()
            s.quiet, s.log_path = False, None
            logger.warning("%s: cannot write the build log %s (%s); output stays on the terminal", title, log_path, e)
    _current = s
    try:
        yield s
    except BaseException:
        _current = None
        s.restore()
        if quiet:
            print(f"{title}: build failed; full log: {log_path}", file=sys.stderr, flush=True)
        raise
    _current = None
    lines = s.summaries if print_summary else []
    if cli:
        _deferred.extend(lines)
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
        if quiet:  # keep catching the CLI's DatasetInfo dump (stdout) and INFO lines until exit
            s._restore_streams()
            sys.stdout = s._log
            _tail = s
        return
    s.restore()
    for line in lines:
        print(redact.text(line), file=sys.stderr)
    sys.stderr.flush()


def summary(lines: Sequence[str]) -> None:
    """Summary lines of a build: shown last by the session, or logged at WARNING when there is none."""
    s = current()
    if s is None:
        for line in lines:
            logger.warning("%s", line)
    else:
        s.add_summary(lines)
