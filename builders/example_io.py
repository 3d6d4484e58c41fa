"""What an example function takes and yields: the one vocabulary of the stages and the writer.

A builder hands the writer small picklable *sources* (`(stable id, record)`) and an *example
function* that turns one record into `(key, example)` pairs or `Skip` records. The stages in
`vidvol.builders.transforms` yield these; the writer (`vidvol.builders.writer`) runs them
through `run_example_fn`, which turns an input error into a skip and names the source of any
other error. Both sides import this module and nothing of each other.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable, Iterable, Iterator, Mapping

from vidvol.core.names import shown

# Errors an example function may raise for a bad input; they become skips (`is_input_error`), anything else fails.
# MemoryError: the source needs more memory than this worker has (a huge or lying file); the next source may fit.
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, EOFError, MemoryError)
# Libraries that decode input files (top-level module names): what they raise while reading one input is
# that input's skip, whatever its class (`cv2.error`, `zlib.error`, nibabel's `ImageFileError`, a
# TypeError from inside nibabel on a garbled header field, ...).
DECODER_MODULES = frozenset({
    "cv2", "nibabel", "PIL", "av", "imageio", "pydicom", "h5py",
    "zlib", "gzip", "bz2", "_bz2", "lzma", "_lzma", "zipfile", "tarfile", "rarfile", "libarchive", "struct",
})


def _root_module(name: object) -> str:
    return name.split(".", 1)[0] if isinstance(name, str) else ""


def is_input_error(error: BaseException) -> bool:
    """Whether `error` is about the input in hand (a skip) rather than a fault of the build (a failure).

    Input errors are `INPUT_ERRORS` and anything a decoding library raised: an exception whose
    class lives in one of `DECODER_MODULES`, or that was raised inside one's code.
    """
    if isinstance(error, INPUT_ERRORS):
        return True
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit, GeneratorExit
        return False
    if _root_module(type(error).__module__) in DECODER_MODULES:
        return True
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and _root_module(tb.tb_frame.f_globals.get("__name__")) in DECODER_MODULES

@dataclasses.dataclass(frozen=True)
class Skip:
    """An input that did not become (all or part of) an example, and why."""

    source: str
    reason: str
    split: str = ""
    example: str = ""  # set when the example was still written (e.g. a frame masked out)

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form for the skip report (file names that are not UTF-8 as `names.shown` shows them)."""
        return {k: shown(v) if isinstance(v, str) else v for k, v in dataclasses.asdict(self).items()}


KeyExample = tuple[str, Mapping[str, Any]]
# An example function may also have a `close()`: the worker calls it once it is done with its sources (Beam's
# DoFn teardown), for what it keeps between sources (`isolation.InChild`'s decoding child process).
ExampleFn = Callable[[Any], Iterable["KeyExample | Skip"]]
Source = tuple[str, Any]  # (stable source id, picklable record handed to the example function)
WorkerSetup = Callable[[], None]  # run once per Beam worker before its first example (e.g. thread limits)


class SourceError(RuntimeError):
    """A non-input error while turning one source into examples (its message names the source)."""


def source_file(record: Any) -> str:
    """The file a source record reads (its `path` or `video`), "" when it names none."""
    path = getattr(record, "path", None) or getattr(record, "video", None)
    return path if isinstance(path, str) else ""


def _where(source: Source, split: str) -> str:
    """`[source 'ID' (PATH), split 'train']`: which input an error came from."""
    source_id, record = source
    path = source_file(record)
    path_part = f" ({shown(path)})" if path and path != source_id else ""
    return f"[source {shown(str(source_id))!r}{path_part}, split {split!r}]"


def naming_source(error: BaseException, source: Source, split: str) -> BaseException:
    """`error` again (same type where it can be rebuilt, else SourceError), its message naming the source.

    Input errors become skips; anything else fails the build, and the user must learn which input
    file did it: the runner shows this message (with the worker's traceback) as the build's error.
    """
    where = _where(source, split)
    try:
        if error.args and isinstance(error.args[0], str):
            again = type(error)(f"{error.args[0]} {where}", *error.args[1:])
            if where in str(again):
                return again
    except Exception:  # exception types with other constructors
        pass
    return SourceError(f"{type(error).__name__}: {error} {where}")


def _reason(error: BaseException, record: Any) -> str:
    """`ExceptionName: message`; a MemoryError (numpy's own too) says which file and what happened."""
    if isinstance(error, MemoryError):
        path = source_file(record)
        detail = str(error) or "it needs more memory than this worker has"
        return f"MemoryError: {path + ': ' if path and path not in detail else ''}{detail}"
    return f"{type(error).__name__}: {error}"


def _written_names(item: KeyExample) -> KeyExample:
    """The key and top-level text features as they are written: a name that is not UTF-8 as `shown` shows it."""
    key, example = item
    if isinstance(key, str):
        key = shown(key)
    if isinstance(example, Mapping) and any(isinstance(v, str) and shown(v) is not v for v in example.values()):
        example = {k: shown(v) if isinstance(v, str) else v for k, v in example.items()}
    return key, example


def run_example_fn(example_fn: ExampleFn, source: Source, split: str) -> Iterator[KeyExample | Skip]:
    """Runs one source through the example function, turning input errors (`is_input_error`) into skips."""
    source_id, record = source
    skip = None
    try:
        for item in example_fn(record):
            if isinstance(item, Skip):
                yield dataclasses.replace(item, split=split)
            else:
                yield _written_names(item)
    except Exception as e:  # only input errors are caught: the rest is re-raised
        if not is_input_error(e):
            raise
        skip = Skip(source=source_id, reason=_reason(e, record), split=split)
    # Yielded once the error is gone: its traceback (the frames that held a MemoryError's arrays) is freed first.
    if skip is not None:
        yield skip
