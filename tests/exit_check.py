"""A script that reads batches through `vidvol.load` and exits still holding the iterator: it must exit, quietly.

The readers that run Python per batch (`tf.py_function`: direct volume reads, host JPEG decode) would
hang at interpreter exit without the exit hook of `vidvol/readers/host_calls.py` (a call in flight
waits for the GIL that finalization holds while the finalizing thread, destroying the iterator,
waits for the call).
"""

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = """
import sys
import tensorflow_datasets as tfds
import vidvol
builder = tfds.builder_from_directory(sys.argv[1])
it = iter(vidvol.load(builder, "train", 2, repeat=True))
for _ in range(int(sys.argv[2])):
    next(it)
print("read", flush=True)
# exits with the iterator alive and its pipeline busy refilling buffers
"""


def assert_exits_quietly(data_path: str, *, runs: int, batches: int, env: dict | None = None) -> None:
    """Runs the script `runs` times on the prepared dataset at `data_path`: each must exit 0 within 120 s (a hang waits forever; a loaded 2-core CI machine took over 60), print
    no traceback and no refused-call message."""
    for _ in range(runs):
        try:
            done = subprocess.run([sys.executable, "-c", _SCRIPT, data_path, str(batches)], capture_output=True,
                                  text=True, timeout=120, env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"the script did not exit: {e.stdout!r}") from e
        assert done.returncode == 0 and "read" in done.stdout, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and "Python is exiting" not in done.stderr, done.stderr[-2000:]
