"""`benchmarks/<name>.py` loaded as a module in tests: the benchmarks are scripts, their folder is not on sys.path.

Only modules whose top level imports no sibling load this way (a sibling imported inside a function is fine
until that function runs). Each call executes the file afresh, under the name `vidvol_bench_<name>`.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def bench_module(name: str) -> types.ModuleType:
    """benchmarks/<name>.py as a module (`name` may name a subfolder: "studies/stock_writer")."""
    spec = importlib.util.spec_from_file_location(f"vidvol_bench_{name.replace('/', '_')}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
