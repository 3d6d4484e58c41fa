"""tests/peak_memory.py: a child's peak is its own (not its launcher's), and a decoding child's growth is seen."""

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


def test_descendant_peaks_sees_a_child_that_grew():
    code = "import sys, time; b = bytearray(300 * 2**20); b[::4096] = b'\\1' * len(b[::4096]); print(1, flush=True); time.sleep(30)"
    with peak_memory.DescendantPeaks() as children:
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        try:
            assert child.stdout.readline().strip() == b"1"
            children.sweep()
        finally:
            child.kill()
            child.wait()
    assert 300 <= children.peak() < 600, children.peak()
