"""Peak RSS of this process and of its descendants, each counted in its own address space (VmHWM).

Not `resource.getrusage(...).ru_maxrss`: Linux carries a process's high-water mark across exec into the
program it starts, and `subprocess` starts children with vfork + exec, so a build started from a pytest
worker that once held 2.5 GiB reports 2.5 GiB in ru_maxrss whatever the build itself held (and its
decoding children report their build's). A memory bound checked on ru_maxrss fails or passes by what ran
before it. The reading itself is `benchmarks/cluster_driver.peak_rss_mib`.
"""

from __future__ import annotations

import threading

import psutil

from bench_modules import bench_module

peak_rss_mib = bench_module("cluster_driver").peak_rss_mib


class DescendantPeaks:
    """Samples the VmHWM of every descendant every `interval` seconds; `peak()` after a last sweep.

    VmHWM only grows, so a process read at least once before it ends is missed only for what it
    grew in its last interval; `sweep()` before ending the children reads them exactly.
    """

    def __init__(self, interval: float = 0.02):
        self._interval, self._peaks = interval, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "DescendantPeaks":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sweep()

    def sweep(self) -> None:
        """Reads every live descendant now."""
        for child in psutil.Process().children(recursive=True):
            self._peaks[child.pid] = max(self._peaks.get(child.pid, 0.0), peak_rss_mib(child.pid))

    def peak(self) -> float:
        """The largest descendant peak seen, in MiB (0 if none was)."""
        return max(self._peaks.values(), default=0.0)
