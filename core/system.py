"""Facts about the machine this process runs on."""

from __future__ import annotations

import os


def num_cpus() -> int:
    """Cores this process may use (its CPU affinity where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
