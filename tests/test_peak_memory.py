"""benchmarks/common/measure.py (through tests/peak_memory.py): a child's peak is its own, not its launcher's; a tree is sampled."""

from __future__ import annotations

import os
import subprocess
import sys

import peak_memory

MIB = 2**20
REPORT = "import resource, sys; sys.path.insert(0, {tests!r}); import peak_memory; {work}" \
         "print(peak_memory.peak_rss_mib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"


def _child(work: str = "") -> tuple[float, float]:
    tests = os.path.dirname(peak_memory.__file__)
    out = subprocess.run([sys.executable, "-c", REPORT.format(tests=tests, work=work)],
                         capture_output=True, text=True, check=True).stdout
    hwm, maxrss = map(float, out.split())
    return hwm, maxrss


def test_a_child_started_from_a_big_process_reports_its_own_peak():
    held = bytearray(600 * MIB)
    held[::4096] = b"\1" * len(held[::4096])  # touched: resident
    hwm, maxrss = _child()
    assert hwm < 300, hwm  # a bare Python with psutil: tens of MiB
    assert maxrss >= 600, maxrss  # what ru_maxrss says instead: this process's peak, carried through vfork + exec
    grown, _ = _child("b = bytearray(400 * 2**20); b[::4096] = b'\\1' * len(b[::4096]); ")
    assert grown >= hwm + 350, (hwm, grown)  # and it does count what the child itself holds
    del held


def test_tree_sampler_sees_a_child_that_grew():
    code = "import sys, time; b = bytearray(300 * 2**20); b[::4096] = b'\\1' * len(b[::4096]); print(1, flush=True); time.sleep(30)"
    with peak_memory.TreeSampler(interval=0.02) as tree:
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        try:
            assert child.stdout.readline().strip() == b"1"
            tree.sweep()
        finally:
            child.kill()
            child.wait()
    assert 300 <= tree.descendant_peak_mib() < 600, tree.descendant_peak_mib()
    (record,) = [p for pid, p in tree.peaks.items() if pid == child.pid]
    assert record["kind"] == "other" and "bytearray" in record["cmd"] and record["peak_rss"] >= 300 * MIB
    assert tree.peaks_of("driver") == [tree.peaks[os.getpid()]["peak_rss"]] and tree.samples >= 1
    assert tree.total_peak > record["peak_rss"]  # the sum of one sample: the child and this process


def test_memory_verdict_flat_and_under_the_ceiling():
    verdict = peak_memory.measure.memory_verdict
    flat = {4: {"worker_peak_mib": 800.0, "driver_peak_mib": 700.0}, 16: {"worker_peak_mib": 840.0, "driver_peak_mib": 1400.0}}
    ok, text = verdict(flat, max_worker_gib=2.0, flat_tolerance=0.10)
    assert ok and "+5.0%" in text and "driver 700 -> 1400 MiB (+100.0%)" in text and text.endswith("PASS")
    assert not verdict(flat, max_worker_gib=0.5, flat_tolerance=0.10)[0]  # under the ceiling too
    grown = {**flat, 16: {"worker_peak_mib": 900.0, "driver_peak_mib": 700.0}}
    assert not verdict(grown, max_worker_gib=2.0, flat_tolerance=0.10)[0]
