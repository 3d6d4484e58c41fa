"""Deprecated: the old home of the builder base; import `vidvol.builders.dataset_builder` (and `vidvol.builders.example_io`).

User builders written against `vidvol.builders.beam_writer` keep working: this module hands on
what they use (the builder base, the sources contract, skips and the skip report) and warns once
on import. Nothing inside vidvol imports it (`tests/test_layers.py` checks that).
"""

from __future__ import annotations

import warnings

from vidvol.builders.dataset_builder import ExamplesFromSources, StreamingBeamBuilder
from vidvol.builders.example_io import INPUT_ERRORS, ExampleFn, KeyExample, Skip, Source, WorkerSetup
from vidvol.builders.writer.runner import set_runner_resolver
from vidvol.builders.writer.skip_report import SKIP_REPORT_NAME, read_skip_report

__all__ = [
    "INPUT_ERRORS",
    "SKIP_REPORT_NAME",
    "ExampleFn",
    "ExamplesFromSources",
    "KeyExample",
    "Skip",
    "Source",
    "StreamingBeamBuilder",
    "WorkerSetup",
    "read_skip_report",
    "set_runner_resolver",
]

warnings.warn(
    "vidvol.builders.beam_writer is deprecated: import StreamingBeamBuilder and ExamplesFromSources from "
    "vidvol.builders.dataset_builder, Skip from vidvol.builders.example_io",
    DeprecationWarning,
    stacklevel=2,
)
