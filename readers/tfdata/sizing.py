"""Sizing rules of a `vidvol.load` pipeline: memory budget, lean mode, files and decodes in flight."""

from __future__ import annotations

import tensorflow as tf

from vidvol.core import system

AUTOTUNE = tf.data.AUTOTUNE
# Files read at once: enough parallel readers for the decode threads and for mixing shards, few
# enough that each open file's read buffer and in-flight examples stay small (TFDS's default is 16).
MAX_CYCLE_LENGTH = 16
# Default memory budget of one pipeline's buffers: this fraction of physical memory, at most the cap.
DEFAULT_MEMORY_FRACTION = 0.25
DEFAULT_MEMORY_CAP_BYTES = 16 * 2**30
# Lean memory mode when this many float32 batches would not fit the memory budget.
LEAN_FLOAT_BATCHES = 4


def default_cycle_length(num_files: int, num_cpus: int | None = None) -> int:
    """Files interleaved at once: two per core, at least 2, at most MAX_CYCLE_LENGTH and the file count."""
    cpus = num_cpus or system.num_cpus()
    return max(1, min(int(num_files), MAX_CYCLE_LENGTH, max(2, 2 * cpus)))


def default_memory_budget() -> int:
    """Bytes one pipeline's buffers may use by default: a quarter of physical memory, at most 16 GiB."""
    try:
        import psutil

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


BUCKET_READS_AHEAD = 16  # at most this many batches read at once from a bucket by ranged GETs
BUCKET_BYTES_AHEAD = 64 << 20  # and at most about this many stored bytes of them in flight


def bucket_read_parallelism(float_batch_bytes: int, budget: int, stored_batch_bytes: int = 0) -> int:
    """Batches read at once from a bucket by ranged GETs: each waits on the network, not a core (tf.data's AUTOTUNE
    stops at one per core), so up to `BUCKET_READS_AHEAD`, with 8 float32 batches' room each in the budget and
    about `BUCKET_BYTES_AHEAD` of records in flight (at least 2 batches). Small records need many GETs in flight
    to hide their latency; large ones fill the link with few, and more in flight only hold more memory (MRI 128^3
    from the bucket: benchmarks/RESULTS.md, "Datasets in a bucket")."""
    by_bytes = BUCKET_BYTES_AHEAD // max(1, stored_batch_bytes) if stored_batch_bytes else BUCKET_READS_AHEAD
    return int(max(2, min(BUCKET_READS_AHEAD, by_bytes, budget // max(1, 8 * float_batch_bytes))))


def bucket_threadpool_size() -> int:
    """Threads of a pipeline that reads a bucket by ranged GETs: a read waits on the network in its tf.data thread
    (the Python call blocks it), and tf.data's shared pool has one thread per core, so waiting reads would leave
    cores idle. Two per core and two more keep every core decoding (hmdb51 from the bucket: benchmarks/RESULTS.md,
    "Datasets in a bucket")."""
    return 2 * system.num_cpus() + 2


# Batches of volumes read at once from a `ShardWindow` (MRI in the shard-streaming order from a bucket). The window's
# own threads fetch ahead, and a volume read from it is a copy, so one batch in flight keeps pace; more (tf.data's
# autotuner, seeing reads wait for a shard) each hold a batch buffer and bring no speed.
WINDOW_VOLUME_READS = 1
