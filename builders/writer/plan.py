"""Shard planning, before anything is decoded: sources in a stable order, cut into shard tasks, and the plan file.

Sources are ordered by a stable hash (classes mixed across shards, the same order in every
run) and cut into `num_shards_for` contiguous chunks, one `ShardTask` per shard file. The
driver writes every task's sources to one plan file (`write_plan`); the pipeline carries only
`ShardRef`s, and each worker reads its shard's byte range of the plan.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import math
import pickle
from collections.abc import Callable, Sequence

import cloudpickle
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.builders.example_io import Source
from vidvol.builders.writer import outputs
from vidvol.core import names, store

DEFAULT_MAX_SHARD_SIZE = 256 * 2**20
DEFAULT_MIN_SHARDS = 4


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to write: which split, where, and the sources that go in it, in order."""

    split: str
    index: int
    path: str
    sources: tuple[Source, ...]


PLAN_NAME = "shard_plan.pickles"  # in the build's incomplete folder while the pipeline runs


@dataclasses.dataclass(frozen=True)
class ShardRef:
    """A ShardTask as the pipeline carries it: where its sources lie in the build's plan file, not the sources.

    The driver writes every task's sources to one plan file (`write_plan`) and the pipeline's
    elements are these small records, so the pipeline (Beam's runner-API proto, a Dask graph) stays
    small however many sources a build has: a Kinetics-size build (~650k videos, ~1,800 shards)
    does not ship every source record through Beam's and Dask's graph machinery. A worker reads its
    shard's byte range of the plan file (local or gs://, like the shards themselves) and nothing else.
    """

    split: str
    index: int
    path: str
    plan: str
    offset: int
    length: int
    num_sources: int

    def load(self) -> ShardTask:
        data = outputs.read_range(self.plan, self.offset, self.length)
        if len(data) != self.length:
            raise OSError(f"{self.plan}: the shard plan is shorter than expected (shard {self.index} of {self.split}); "
                          "was the build's incomplete folder removed while it ran?")
        return ShardTask(self.split, self.index, self.path, tuple(cloudpickle.loads(data)))


def write_plan(tasks: Sequence[ShardTask], path: str) -> list[ShardRef]:
    """Writes every task's sources to the plan file `path` (one pickle per task, back to back); their refs."""
    refs = []
    offset = 0
    with contextlib.ExitStack() as stack:
        # A bucket's plan is written locally, then uploaded in one go (multipart past a few MiB).
        local = stack.enter_context(outputs.scratch_file(path)) if outputs.is_bucket(path) else path
        with tf.io.gfile.GFile(local, "wb") as f:
            for t in tasks:
                data = cloudpickle.dumps(t.sources, protocol=pickle.HIGHEST_PROTOCOL)
                f.write(data)
                refs.append(ShardRef(t.split, t.index, t.path, path, offset, len(data), len(t.sources)))
                offset += len(data)
        if local != path:
            store.upload(local, path)
    return refs


def stable_order(sources: Sequence[Source], salt: str) -> list[Source]:
    """Sources in a pseudo-random but reproducible order (mixes classes across shards)."""

    def key(source: Source) -> bytes:
        return hashlib.sha256(names.name_bytes(f"{salt}/{source[0]}")).digest()  # any name: its bytes

    ids = [s[0] for s in sources]
    dupes = [k for k, n in collections.Counter(ids).items() if n > 1]
    if dupes:
        raise ValueError(f"Duplicate source ids in split {salt!r}: {dupes[:5]}")
    return sorted(sources, key=key)


def num_shards_for(
    num_sources: int,
    example_bytes: int,
    *,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    min_shards: int = DEFAULT_MIN_SHARDS,
    num_shards: int | None = None,
) -> int:
    """Shard count: enough to keep shards under max_shard_size, at least min_shards, at most one per source.

    The count is rounded up to a multiple of `min_shards` so that 2 or 4 workers get the same number
    of shards each (a worker writes whole shards; 5 shards on 2 workers leave one idle for a fifth
    of the build). It depends only on the input, never on the machine, so builds are reproducible.
    """
    if num_sources == 0:
        return 0
    if num_shards:
        return max(1, min(num_shards, num_sources))
    by_size = math.ceil(num_sources * max(1, example_bytes) / max(1, max_shard_size))
    wanted = max(by_size, min_shards)
    if min_shards > 1:
        wanted = math.ceil(wanted / min_shards) * min_shards
    return max(1, min(num_sources, wanted))


def plan_shards(split: str, sources: Sequence[Source], num_shards: int, path_fn: Callable[[int, int], str]) -> list[ShardTask]:
    """Cuts a split's sources (in stable order) into contiguous shard tasks."""
    ordered = stable_order(sources, salt=split)
    tasks = []
    for index in range(num_shards):
        lo = index * len(ordered) // num_shards
        hi = (index + 1) * len(ordered) // num_shards
        tasks.append(ShardTask(split, index, path_fn(index, num_shards), tuple(ordered[lo:hi])))
    return tasks
