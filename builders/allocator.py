"""TensorFlow's CPU allocator for big input batches: a reusing pool (BFC) rather than malloc/free.

A float32 batch of video frames or volumes is tens of MiB to GiBs. TensorFlow's default CPU
allocator hands such buffers back to the OS when they are freed, so every new batch is written
into fresh pages and pays a page fault per 4 KiB (on a VM whose host reclaims freed memory, a
host-side fault too). Measured here (`make bench` read jobs, 2 cores): fire_hrr full-resolution
reads 1.5 -> 3.9-4.7 windows/s with the pool, mri_volumes 128^3 +6 %, hmdb51 unchanged; peak RSS
fire_hrr +10 %, the others lower. The pool is TensorFlow's own BFC allocator, switched on by the
`TF_CPU_ALLOCATOR_USE_BFC` environment variable, which TensorFlow reads when it runs its first
op, so `import vidvol` sets it (unless the variable is already set, e.g. to "false" to opt out).
The pool keeps its peak size until the process exits.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

ENV_VAR = "TF_CPU_ALLOCATOR_USE_BFC"


def prefer_pool() -> None:
    """Asks for TF's pooled CPU allocator unless the user chose (takes effect before TF's first op)."""
    os.environ.setdefault(ENV_VAR, "true")


def pool_active() -> bool:
    """Whether TensorFlow's CPU allocator is the reusing pool (it keeps statistics; malloc does not)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:
        return False
    return True


_warned = False


def warn_if_not_pooled() -> None:
    """Logs once, with the fix, when big batches will be written into fresh pages."""
    global _warned
    if _warned or pool_active():
        return
    _warned = True
    reason = (
        f"{ENV_VAR}={os.environ[ENV_VAR]!r} is set" if os.environ.get(ENV_VAR, "true").lower() not in ("true", "1")
        else "TensorFlow ran an op before `import vidvol`"
    )
    logger.warning(
        "TensorFlow's CPU allocator is not pooled (%s): every large batch is written into fresh pages "
        "(fire_hrr full-resolution reads measured 2.6x slower). Set %s=true in the environment, or "
        "import vidvol before running any TensorFlow op.", reason, ENV_VAR,
    )
