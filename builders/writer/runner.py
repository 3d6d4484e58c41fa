"""Which Beam runner a build runs on: not decided here, but by a resolver installed from above.

Callers above the builders (`vidvol.beam_jobs`, installed by `import vidvol`) call
`set_runner_resolver`; a build asks `resolve_runner` for the (runner, options) of its
`beam_runner`/`beam_options`, with the facts it knows about itself.
"""

from __future__ import annotations

import inspect
from typing import Any
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

# (beam_runner, beam_options, number of work items, **facts) -> (runner, options); the facts about the
# build (`num_sources`: inputs planned; `manual_dir`: where the workers read them) let a runner split
# the work (e.g. one Dask partition per shard task), size itself (one in-process worker for a small
# build) or check its workers before anything runs (they import vidvol and can read manual_dir). Each
# fact is passed by keyword, and only to a resolver that accepts it.
RunnerResolver = Callable[..., "tuple[Any, PipelineOptions]"]


def _as_given(runner: Any, options: PipelineOptions | None, num_tasks: int | None = None, **facts: Any) -> tuple[Any, PipelineOptions]:
    """The default resolver: Beam's own choice for the runner and options given."""
    from apache_beam.options.pipeline_options import PipelineOptions

    del num_tasks, facts
    return runner, options or PipelineOptions([])


_runner_resolver: RunnerResolver = _as_given


def set_runner_resolver(resolver: RunnerResolver) -> None:
    """Installs the function that turns a build's (beam_runner, beam_options) into what the pipeline runs on."""
    global _runner_resolver
    _runner_resolver = resolver


def resolve_runner(
    runner: Any, options: PipelineOptions | None, num_tasks: int | None = None, **facts: Any
) -> tuple[Any, PipelineOptions]:
    """The (runner, options) a build's `beam_runner`/`beam_options` run with, by the installed resolver."""
    accepted = _accepted_keywords(_runner_resolver)
    given = {k: v for k, v in facts.items() if v is not None and (accepted is None or k in accepted)}
    return _runner_resolver(runner, options, num_tasks, **given)


def _accepted_keywords(resolver: RunnerResolver) -> set[str] | None:
    """The keyword names `resolver` takes (None: any, it has **kwargs)."""
    try:
        params = inspect.signature(resolver).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)
