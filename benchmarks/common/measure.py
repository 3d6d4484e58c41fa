"""Peak memory of a process and of a process tree: the one meter every benchmark and test reads.

VmHWM from /proc, not `ru_maxrss`: Linux carries a launcher's high-water mark across vfork + exec into
the child it starts. Standard library and psutil only (tests and the peers' venv load it too).
"""

from __future__ import annotations

import os
import resource
import threading
from typing import Any

import psutil

MIB = 2**20
SHELLS = ("sh", "dash", "bash")
WORKER_MARKER = "sdk_worker_main"  # Beam's SDK worker processes run `-m apache_beam.runners.worker.sdk_worker_main`


def _status(pid: int | str = "self") -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in bytes, or None when it is gone, a zombie or not readable."""
    found = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return (found["VmRSS"], found["VmHWM"]) if len(found) == 2 else None


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak RSS so far, in MiB: its VmHWM (this process's by default)."""
    status = _status(pid)
    if status is not None:
        return status[1] / MIB
    if pid != "self":
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident memory now (VmRSS), in MiB; 0.0 when it is gone."""
    status = _status(pid)
    if status is None:
        return psutil.Process().memory_info().rss / MIB if pid == "self" else 0.0
    return status[0] / MIB


def _cmdline(pid: int | str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


def _execed(pid: int) -> bool:
    """Whether a child runs a program of its own: its command line differs from its parent's."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    mine = _cmdline(pid)
    return bool(mine) and mine != _cmdline(ppid)  # empty while the kernel swaps in the new program: not yet


class TreeSampler(threading.Thread):
    """Samples VmRSS and VmHWM of a process and of every descendant every `interval` seconds, in a thread."""

    def __init__(self, pid: int | None = None, interval: float = 0.1):
        super().__init__(daemon=True)
        self.pid = os.getpid() if pid is None else pid
        self.interval = interval
        self.peaks: dict[int, dict[str, Any]] = {}
        self.total_peak = 0
        self.samples = 0
        self._root = psutil.Process(self.pid)
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> TreeSampler:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def run(self) -> None:
        while not self._halt.is_set() and self.sweep():
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Ends the sampling thread (after its current sample)."""
        self._halt.set()
        self.join()

    def sweep(self) -> bool:
        """Reads every process of the tree once now."""
        try:
            procs = [self._root] + self._root.children(recursive=True)
        except psutil.NoSuchProcess:
            return False
        total = 0
        with self._lock:
            for p in procs:
                if p.pid != self.pid and p.pid not in self.peaks and not _execed(p.pid):
                    continue  # forked, not yet exec'd: the parent's memory, not its own
                status = _status(p.pid)
                if status is None:
                    continue
                rss, hwm = status
                record = self.peaks.get(p.pid) or self._first_sight(p)
                if record is None:
                    continue
                record["peak_rss"] = max(record["peak_rss"], rss)
                record["hwm"] = max(record["hwm"], hwm)
                total += rss
            self.total_peak = max(self.total_peak, total)
            self.samples += 1
        return True

    def _first_sight(self, p: psutil.Process) -> dict[str, Any] | None:
        """A new process's record (kind and command line), or None if it ended meanwhile."""
        try:
            cmd = " ".join(p.cmdline())
            worker = WORKER_MARKER in cmd and p.name() not in SHELLS  # Beam starts its workers via `sh -c`
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        kind = "driver" if p.pid == self.pid else ("worker" if worker else "other")
        record = self.peaks[p.pid] = {"kind": kind, "peak_rss": 0, "hwm": 0, "cmd": cmd[:160]}
        return record

    def peaks_of(self, kind: str) -> list[int]:
        """Sampled peak RSS (bytes) of every process of one kind ("driver", "worker", "other")."""
        return [p["peak_rss"] for p in self.peaks.values() if p["kind"] == kind]

    def descendant_peak_mib(self) -> float:
        """The largest VmHWM of any descendant seen, in MiB (0.0 if none was seen)."""
        return max((p["hwm"] for pid, p in self.peaks.items() if pid != self.pid), default=0) / MIB


def memory_verdict(results: dict[int, dict[str, Any]], *, max_worker_gib: float,
                   flat_tolerance: float) -> tuple[bool, str]:
    """Whether worker peaks stay flat from the smallest to the largest build and under a ceiling."""
    counts = sorted(results)
    lo, hi = results[counts[0]], results[counts[-1]]
    growth_w = hi["worker_peak_mib"] / max(lo["worker_peak_mib"], 1e-9) - 1
    growth_d = hi["driver_peak_mib"] / max(lo["driver_peak_mib"], 1e-9) - 1
    worst = max(r["worker_peak_mib"] for r in results.values()) / 1024
    ok = growth_w <= flat_tolerance and worst <= max_worker_gib
    text = (
        f"worker peak {lo['worker_peak_mib']:.0f} -> {hi['worker_peak_mib']:.0f} MiB ({growth_w:+.1%}) from "
        f"{counts[0]} to {counts[-1]} experiments, driver {lo['driver_peak_mib']:.0f} -> {hi['driver_peak_mib']:.0f} MiB "
        f"({growth_d:+.1%}); worst worker {worst:.2f} GiB; target: flat within {flat_tolerance:.0%} and under "
        f"{max_worker_gib:g} GiB per worker: {'PASS' if ok else 'FAIL'}"
    )
    return ok, text
