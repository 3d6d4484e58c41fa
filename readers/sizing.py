"""Sizing rules of a read pipeline: memory budget, lean mode, batch size (and the shuffle buffer rule of the release
before, `shuffle_buffer_size`, kept for its callers: `vidvol.load` holds no shuffle buffer now, `readers.order`)."""

from __future__ import annotations

import tensorflow as tf

from vidvol.core import system

AUTOTUNE = tf.data.AUTOTUNE
# Example shuffle buffer, in bytes of parsed (still encoded) examples.
DEFAULT_SHUFFLE_BUFFER_BYTES = 256 * 2**20
# Files read at once: enough parallel readers for the decode threads and for mixing shards, few
# enough that each open file's read buffer and in-flight examples stay small (TFDS's default is 16).
MAX_CYCLE_LENGTH = 16
# Default memory budget of one pipeline's buffers: this fraction of physical memory, at most the cap.
DEFAULT_MEMORY_FRACTION = 0.25
DEFAULT_MEMORY_CAP_BYTES = 16 * 2**30
# Lean memory mode when this many float32 batches would not fit the memory budget.
LEAN_FLOAT_BATCHES = 4


class ShardingError(ValueError):
    """More input pipelines than examples: some pipelines would read nothing."""


def check_batch_size(batch_size: int) -> None:
    """ValueError unless `batch_size` is an integer >= 1 (every reader's batch rule)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")


def shuffle_buffer_size(bytes_per_example: float, num_examples: int, buffer_bytes: int = DEFAULT_SHUFFLE_BUFFER_BYTES) -> int:
    """Examples the shuffle buffer holds: `buffer_bytes // bytes_per_example`, within [1, num_examples]."""
    if buffer_bytes <= 0:
        raise ValueError(f"shuffle_buffer_bytes must be > 0, got {buffer_bytes}")
    count = int(buffer_bytes // max(1.0, float(bytes_per_example)))
    return max(1, min(count, max(1, int(num_examples))))


def default_cycle_length(num_files: int, num_cpus: int | None = None) -> int:
    """Files interleaved at once: two per core, at least 2, at most MAX_CYCLE_LENGTH and the file count."""
    cpus = num_cpus or system.num_cpus()
    return max(1, min(int(num_files), MAX_CYCLE_LENGTH, max(2, 2 * cpus)))


def default_memory_budget() -> int:
    """Bytes one pipeline's buffers may use by default: a quarter of physical memory, at most 16 GiB."""
    try:
        import psutil  # pylint: disable=g-import-not-at-top

        total = psutil.virtual_memory().total
    except (ImportError, OSError):
        total = 8 * 2**30
    return int(min(DEFAULT_MEMORY_CAP_BYTES, total * DEFAULT_MEMORY_FRACTION))


def is_lean(float_batch_bytes: int, budget: int) -> bool:
    """Whether a few float32 batches would not fit the budget (then decode lean: one float batch at a time)."""
    return LEAN_FLOAT_BATCHES * float_batch_bytes > budget


def lean_decode_parallelism(element_bytes: int, budget: int) -> int:
    """Examples decoded at once in lean mode: as many as cores, while twice their bytes fit a quarter of the budget."""
    if element_bytes <= 0:
        return AUTOTUNE
    return max(1, min(system.num_cpus(), int((budget // 4) // (2 * element_bytes))))
