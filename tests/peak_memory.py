"""`benchmarks/common/measure.py` for the tests: peak RSS as VmHWM, and a process tree sampled in a thread.

The tests read memory with the benchmarks' one meter (see its docstring: VmHWM, not `ru_maxrss`,
which a child inherits from its launcher through vfork + exec), loaded by path (`bench_modules`).
"""

from __future__ import annotations

from bench_modules import bench_module

measure = bench_module("common/measure")
peak_rss_mib = measure.peak_rss_mib
TreeSampler = measure.TreeSampler
