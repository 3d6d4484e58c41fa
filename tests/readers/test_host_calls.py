"""`readers.host_calls`: the pooled buffers and the exit guard of the readers that run Python per batch."""

from __future__ import annotations

import pytest
import subprocess
import sys

import numpy as np

from vidvol.readers import host_calls

_REFUSED_SCRIPT = """
import tensorflow as tf
from vidvol.readers import host_calls

class Double(host_calls.HostCall):
    def run(self, x):
        return x * 2

ds = tf.data.Dataset.range(4).map(lambda x: tf.py_function(Double(), [x], tf.int64), num_parallel_calls=2)
print("before", [int(v) for v in ds.as_numpy_iterator()], flush=True)
host_calls.CLOSING.set()  # as the exit hook does
try:
    print("after", list(ds.as_numpy_iterator()), flush=True)
except tf.errors.InvalidArgumentError as e:
    print("error", "Python is exiting" in str(e), flush=True)
"""


@pytest.mark.slow  # a Python subprocess: make test runs it, make test-fast does not
def test_calls_refused_at_exit_fail_the_reader_loudly_without_logging_tracebacks():
    """At exit a refused call must neither pass for the end of the data (a short epoch) nor print a traceback
    (TensorFlow logs a py_function's other errors with one: one per prefetching call on every exit of a script
    still holding an iterator)."""
    done = subprocess.run([sys.executable, "-c", _REFUSED_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "before [0, 2, 4, 6]" in done.stdout and "error True" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


def test_pool_reuses_a_buffer_once_nothing_holds_it_and_keeps_at_most_its_byte_budget():
    pool = host_calls.BufferPool(limit=8, retain_bytes=3 * 4096)
    a = pool.take(4096)
    assert a.ctypes.data % 64 == 0 and a.nbytes == 4096
    address = a.ctypes.data
    b = pool.take(4096)  # `a` still alive: another buffer
    assert b.ctypes.data != address
    del a
    assert pool.take(4096).ctypes.data == address  # free again: reused
    held = [pool.take(4096) for _ in range(5)]
    assert len(pool.buffers[4096]) == 3  # retain_bytes // nbytes buffers kept; the others freed with their views
    assert len({h.ctypes.data for h in held}) == 5 and all(isinstance(h, np.ndarray) for h in held)
