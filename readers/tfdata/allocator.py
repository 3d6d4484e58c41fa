"""TensorFlow's CPU allocator for big input batches: its reusing pool (BFC) rather than malloc/free.

Without the pool every new float32 batch is written into fresh pages (a page fault per 4 KiB);
TensorFlow reads `TF_CPU_ALLOCATOR_USE_BFC` at its first op, so `import vidvol` sets it unless the
user chose ("false" opts out). Docs: docs/reading.md, "Pipeline"; measured effect: benchmarks/RESULTS.md, "Read pipeline".
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

ENV_VAR = "TF_CPU_ALLOCATOR_USE_BFC"


_tf_started_first = False  # TensorFlow's runtime was up before prefer_pool() could set the variable


def _tf_runtime_started() -> bool:
    """Whether TensorFlow has created its eager context (it does at the first op and reads the allocator then)."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context

        return context.context_safe() is not None and context.context()._context_handle is not None
    except (ImportError, AttributeError):
        return False


def prefer_pool() -> None:
    """Asks for TF's pooled CPU allocator unless the user chose (takes effect before TF's first op)."""
    global _tf_started_first
    _tf_started_first = _tf_started_first or (ENV_VAR not in os.environ and _tf_runtime_started())
    os.environ.setdefault(ENV_VAR, "true")


def pool_active() -> bool:
    """Whether TensorFlow's CPU allocator is the reusing pool: asked for, and asked before TF started.

    (TensorFlow 2.21 reports CPU memory statistics with either allocator, so they cannot tell.)
    """
    if os.environ.get(ENV_VAR, "").lower() not in ("true", "1") or _tf_started_first:
        return False
    import tensorflow as tf

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
        "(large float32 batches read much slower; see docs/reading.md, \"TensorFlow's CPU allocator\"). Set %s=true in the environment, or "
        "import vidvol before running any TensorFlow op.", reason, ENV_VAR,
    )
