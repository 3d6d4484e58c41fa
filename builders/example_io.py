"""What an example function takes and yields: the one vocabulary of the stages and the writer.

A builder hands the writer small picklable *sources* (`(stable id, record)`) and an *example
function* that turns one record into `(key, example)` pairs or `Skip` records. The stages in
`vidvol.builders.transforms` yield these; the writer (`vidvol.builders.writer`) runs them
through `run_example_fn`, which turns an input error into a skip and names the source of any
other error. Both sides import this module and nothing of each other.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Iterator, Mapping

# Errors an example function may raise for a bad input; they become skips, anything else fails.
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, EOFError)

@dataclasses.dataclass(frozen=True)
class Skip:
    """An input that did not become (all or part of) an example, and why."""

    source: str
    reason: str
    split: str = ""
    example: str = ""  # set when the example was still written (e.g. a frame masked out)

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form for the skip report."""
        return dataclasses.asdict(self)


KeyExample = tuple[str, Mapping[str, Any]]
ExampleFn = Callable[[Any], Iterable["KeyExample | Skip"]]
Source = tuple[str, Any]  # (stable source id, picklable record handed to the example function)
WorkerSetup = Callable[[], None]  # run once per Beam worker before its first example (e.g. thread limits)


class SourceError(RuntimeError):
    """A non-input error while turning one source into examples (its message names the source)."""


def _where(source: Source, split: str) -> str:
    """`[source 'ID' (PATH), split 'train']`: which input an error came from."""
    source_id, record = source
    path = getattr(record, "path", None) or getattr(record, "video", None)  # the file a record reads, if one
    path_part = f" ({path})" if isinstance(path, str) and path and path != source_id else ""
    return f"[source {source_id!r}{path_part}, split {split!r}]"


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
    except Exception:  # pylint: disable=broad-except  (exception types with other constructors)
        pass
    return SourceError(f"{type(error).__name__}: {error} {where}")


def run_example_fn(example_fn: ExampleFn, source: Source, split: str) -> Iterator[KeyExample | Skip]:
    """Runs one source through the example function, turning input errors into skips."""
    source_id, record = source
    try:
        for item in example_fn(record):
            if isinstance(item, Skip):
                yield dataclasses.replace(item, split=split)
            else:
                yield item
    except INPUT_ERRORS as e:
        yield Skip(source=source_id, reason=f"{type(e).__name__}: {e}", split=split)
