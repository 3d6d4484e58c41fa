"""`benchmarks/<folder>/<name>.py` imported in tests: the benchmarks are scripts, their folder is not installed.

`benchmarks/` is the suite's import root (`common`, `sections`, `peers`, `studies`); it goes at the END of
sys.path here, so it never shadows an installed module. A module loads once, under its dotted name.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import types

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def bench_module(name: str) -> types.ModuleType:
    """benchmarks/<name>.py as a module (`name` names its folder: "common/measure", "studies/stock_writer")."""
    if not (BENCHMARKS / f"{name}.py").is_file():
        raise FileNotFoundError(f"no benchmarks/{name}.py; see benchmarks/README.md's layout")
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return importlib.import_module(name.replace("/", "."))
