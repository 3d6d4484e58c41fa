"""Python calls inside a read pipeline (`tf.numpy_function`): pooled output buffers and a clean interpreter exit.

Six steps of `vidvol.load` run Python per batch, each a `HostCall`: the record reads
(`tfdata.record_reads.RecordReads`), the direct volume reads (`tfdata.direct_volumes.VolumeReads`,
`PatchReads`), the JPEG batch decode (`frames.JpegBatchDecode`) and read-time augmentation
(`augment_video.AugmentFrames`, `augment_volume.ArrayPatches`). Each is a pure function of its inputs
(the same indices read the same bytes of immutable shards), so it runs as a
`tf.numpy_function(..., stateful=False)`: the pipeline holds no stateful op (`order.check_resumable`).
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

_ALIGN = 64  # TensorFlow takes a NumPy array without copying when its data is this aligned


class BufferPool:
    """Aligned NumPy buffers reused once TensorFlow has let go of them (no fresh pages per batch).

    A buffer handed to TensorFlow (a `tf.numpy_function`'s aligned result becomes the tensor without
    a copy) stays referenced by the tensor; when the tensor is freed the reference goes, and the
    buffer is free again (its reference count tells).
    """

    def __init__(self, limit: int = 32, retain_bytes: int = 1 << 30):
        # Kept for reuse: at most `limit` buffers of one size, and no more of them than fit `retain_bytes`
        # (a 250 MiB batch of fire_hrr frames: 4); a buffer past that is freed with its tensor.
        self.limit, self.retain_bytes, self.lock, self.buffers = limit, retain_bytes, threading.Lock(), {}

    def take(self, nbytes: int) -> np.ndarray:
        """An aligned `nbytes` uint8 view of a pooled buffer that nothing else references."""
        with self.lock:
            free = self.buffers.setdefault(nbytes, [])
            owner = None
            for i in range(len(free)):
                # Views of a NumPy array keep its memory owner alive (their `base`), so the owner's count
                # is that of the list, this call's argument and every live view or tensor made from it.
                if sys.getrefcount(free[i]) == 2:
                    owner = free[i]
                    break
            if owner is None:
                owner = np.empty(nbytes + _ALIGN, np.uint8)
                if len(free) < min(self.limit, max(2, self.retain_bytes // max(1, nbytes))):
                    free.append(owner)
            shift = (-owner.ctypes.data) % _ALIGN
            return owner[shift: shift + nbytes]


pool = BufferPool()


# Interpreter exit. A Python call (`tf.numpy_function`, `tf.py_function`) in flight when Python finalizes waits for
# the GIL forever while the finalizing thread, destroying the iterator, waits for that call: a script or notebook kernel that still holds an
# iterator of these reads never exits (TensorFlow's general py_function-at-exit hang). So at exit, before
# finalization (`threading._register_atexit`: run in `threading._shutdown`, ahead of `atexit`), new calls stop
# at once and the GIL is let go long enough for those in flight to finish; the pipeline then waits with its
# buffers full and nothing left to call back into Python. A call refused at exit raises StopIteration: TensorFlow
# logs other errors of a py_function with a traceback (one per prefetching call, on every exit of a script still
# holding an iterator), not this one; a consumer still reading then gets tf.data's "Function invocation produced
# OutOfRangeError" error carrying the message below, never a shortened or silent epoch.
CLOSING = threading.Event()
_DRAIN_S = 0.3
_in_flight = [0]
_in_flight_lock = threading.Lock()
_exit_hook_registered = False


def _close_at_exit() -> None:
    CLOSING.set()
    deadline = time.monotonic() + 5.0
    time.sleep(_DRAIN_S)
    while _in_flight[0] and time.monotonic() < deadline:
        time.sleep(0.05)


def _register_exit_hook() -> None:
    """Registers `_close_at_exit` once, on the first host call (processes that never make one pay nothing)."""
    global _exit_hook_registered
    if _exit_hook_registered:
        return
    try:
        threading._register_atexit(_close_at_exit)  # as concurrent.futures does
    except RuntimeError:  # already shutting down
        return
    _exit_hook_registered = True


class HostCall:
    """Base of a `tf.numpy_function` body: `__call__` runs `run(*args)` unless Python is exiting, counted in flight.

    The batch outputs go into a pooled, aligned NumPy buffer (`pool`) that TensorFlow takes as the
    tensor without a copy (no fresh pages per batch); guarding every call here keeps a script or
    notebook kernel that holds a live iterator from hanging at exit (the exit hook above).
    """

    def __init__(self):
        _register_exit_hook()

    def __call__(self, *args):
        if CLOSING.is_set():
            raise StopIteration("vidvol: Python is exiting; reads stopped")
        with _in_flight_lock:
            _in_flight[0] += 1
        try:
            return self.run(*args)
        finally:
            with _in_flight_lock:
                _in_flight[0] -= 1

    def run(self, *args):
        raise NotImplementedError
