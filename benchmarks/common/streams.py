"""Timing a stream of batches: examples/s of a fresh iterator after warm-up, CPU use, the rest of the machine."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psutil


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O) since boot."""
    t = psutil.cpu_times()
    return sum(getattr(t, f) for f in ("user", "nice", "system", "irq", "softirq", "steal") if hasattr(t, f))


def tree_cpu_seconds() -> float:
    """CPU seconds of this process and its live children (DataLoader workers): user + system."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def stream_rate(make: Callable[[], Iterator[Any]], *, count: Callable[[Any], int], min_seconds: float,
                warmup_batches: int, cores: int, cpu_seconds: Callable[[], float] = time.process_time,
                min_batches: int = 1) -> dict[str, float]:
    """Examples/s of the endless `make()` after warm-up batches, for >= `min_seconds` and `min_batches`."""
    iterator = make()
    for _ in range(warmup_batches):
        next(iterator)
    examples = batches = 0
    busy_start = busy_cpu_seconds()
    start, cpu_start = time.perf_counter(), cpu_seconds()
    while True:
        examples += count(next(iterator))
        batches += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and batches >= min_batches:
            cpu = max(cpu_seconds() - cpu_start, 1e-9)
            others = max(0.0, busy_cpu_seconds() - busy_start - cpu) / elapsed
            return {"examples_per_s": examples / elapsed, "cpu_examples_per_s": cores * examples / cpu,
                    "cores_used": cpu / elapsed, "other_cores_busy": others, "examples": examples,
                    "batches": batches, "seconds": elapsed}


def run_summary(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Medians of timed runs (`stream_rate` results) and every run's rate, as read rows report them."""
    rates = [r["examples_per_s"] for r in runs]
    return {"examples_per_s_runs": [round(r, 3) for r in rates],
            "examples_per_s": round(float(statistics.median(rates)), 3),
            "cpu_examples_per_s": round(float(statistics.median(r["cpu_examples_per_s"] for r in runs)), 3),
            "cores_used": round(float(statistics.median(r["cores_used"] for r in runs)), 2),
            "other_cores_busy": round(float(statistics.median(r["other_cores_busy"] for r in runs)), 2),
            "examples_timed": sum(r["examples"] for r in runs)}
