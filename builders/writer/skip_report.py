"""The skip report (`skip_report.json`): every input that did not become (all or part of) an example, and why, per split.

Written next to the shards by every build, even when nothing was skipped; the read side and the
CLIs point users at it.
"""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Sequence

from vidvol.builders.writer import json_files
from vidvol.builders.writer.results import SplitResult
from vidvol.core import artifacts

SKIP_REPORT_NAME = artifacts.SKIP_REPORT_NAME


def write_skip_report(path: str, dataset: str, results: Sequence[SplitResult]) -> dict[str, Any]:
    """Writes the machine-readable skip report (always, even when nothing was skipped).

    `empty_splits` maps each split left without an example (and so not registered) to why.
    """
    report = {
        "dataset": dataset,
        "skipped": [s for r in results for s in r.skips],
        "splits": {
            r.name: {
                "examples": r.num_examples,
                "shards": len(r.shard_paths),
                "num_bytes": r.num_bytes,
                "skipped_inputs": sum(1 for s in r.skips if not s.get("example")),
                "masked_parts": sum(1 for s in r.skips if s.get("example")),
            }
            for r in results
        },
        "empty_splits": {r.name: r.why_empty() for r in results if not r.num_examples},
    }
    json_files.write_json(report, path)
    return report


def read_skip_report(data_dir: str) -> dict[str, Any]:
    """Reads the skip report of a prepared dataset directory."""
    return json_files.read_json(os.path.join(os.fspath(data_dir), SKIP_REPORT_NAME))
