"""`import vidvol` asks for TensorFlow's pooled CPU allocator; users can opt out; late imports are flagged.

Each case runs in a fresh interpreter: TensorFlow picks its CPU allocator once, at its first op.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(levelname)s %(message)s")
if sys.argv[1] == "op_first":
    import tensorflow as tf
    tf.constant(1.0) + 1.0
import vidvol
import tensorflow as tf
from vidvol.readers.tfdata import allocator
tf.zeros((64, 64)) + 1.0
print("POOL", allocator.pool_active())
allocator.warn_if_not_pooled()
allocator.warn_if_not_pooled()  # logged once
"""


pytestmark = pytest.mark.slow  # fresh interpreters: `make test` runs them, `make test-fast` does not

def _run(mode: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    full_env.update(TF_CPP_MIN_LOG_LEVEL="2", **env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=full_env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_vidvol_turns_on_the_pool():
    out = _run("import_first")
    assert "POOL True" in out and "not pooled" not in out


@pytest.mark.parametrize("mode,env,reason", [
    ("import_first", {"TF_CPU_ALLOCATOR_USE_BFC": "false"}, "TF_CPU_ALLOCATOR_USE_BFC='false' is set"),
    ("op_first", {}, "TensorFlow ran an op before `import vidvol`"),
])
def test_opt_out_and_late_import_are_reported_once(mode, env, reason):
    out = _run(mode, **env)
    assert "POOL False" in out
    assert out.count("not pooled") == 1 and reason in out
