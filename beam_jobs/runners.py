"""Beam runner defaults and option sets: the one place that knows about runners.

Builds never need the internet: apache-beam 2.77's `DirectRunner` first tries to download a
Prism binary, so "direct" here always means Beam's `FnApiRunner` (the engine behind the direct
runner), multi-process with one SDK worker per core.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

from apache_beam.options import pipeline_options as po

logger = logging.getLogger(__name__)

# Runner names that mean "run it here"; all of them map to the FnApiRunner.
LOCAL_RUNNER_NAMES = ("", "direct", "directrunner", "fnapirunner", "bundlebasedrunner")


def default_num_workers() -> int:
    """Number of local SDK workers: all cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def direct_options(
    num_workers: int | None = None, running_mode: str = "multi_processing", extra: Sequence[str] = ()
) -> po.PipelineOptions:
    """Options for a local multi-process build (no Prism download, no network)."""
    return po.PipelineOptions(
        [
            f"--direct_num_workers={num_workers or default_num_workers()}",
            f"--direct_running_mode={running_mode}",
            *extra,
        ]
    )


def is_local(options: po.PipelineOptions | None) -> bool:
    """True when the options ask for no particular runner or for the direct runner."""
    if options is None:
        return True
    runner = options.view_as(po.StandardOptions).runner
    if runner is None:
        return True
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.lower() in LOCAL_RUNNER_NAMES


def resolve(runner: Any = None, options: po.PipelineOptions | None = None) -> tuple[Any, po.PipelineOptions]:
    """Returns the (runner, options) a build runs with, replacing the direct runner by the FnApiRunner."""
    if runner is not None and not isinstance(runner, str):
        return runner, options or po.PipelineOptions([])
    if runner is not None:
        options = po.PipelineOptions([f"--runner={runner}"] + _flags(options))
    if not is_local(options):
        return None, options
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # pylint: disable=g-import-not-at-top

    flags = _flags(options)
    direct = options.view_as(po.DirectOptions) if options is not None else None
    if direct is None or direct.direct_num_workers in (None, 0):
        flags.append(f"--direct_num_workers={default_num_workers()}")
    if not any(f.startswith("--direct_running_mode") for f in flags):
        flags.append("--direct_running_mode=multi_processing")
    if not any(f.startswith("--default_sdk_harness_log_level") for f in flags):
        flags.append("--default_sdk_harness_log_level=WARNING")
    flags = [f for f in flags if not f.startswith("--runner")]
    return FnApiRunner(), po.PipelineOptions(flags)


def _flags(options: po.PipelineOptions | None) -> list[str]:
    """Flag list of an options object (drops unset values)."""
    if options is None:
        return []
    out = []
    for key, value in options.get_all_options(drop_default=True, retain_unknown_options=True).items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(f"--{key}")
        elif isinstance(value, list):
            out.extend(f"--{key}={v}" for v in value)
        else:
            out.append(f"--{key}={value}")
    return out
