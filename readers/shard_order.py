"""The shard-streaming order: each epoch reads the shards in a seeded order, examples mixed within blocks of shards.

`ShardOrder` is the option (`ReadSpec(order=ShardOrder(block=...))`); `ShardBlocks` is the rule, a pure
function of (key, epoch, position) in NumPy that every reader evaluates alike (`order.Layout` calls it;
`vidvol.load` through one stateless `tf.numpy_function`), so the same seed gives the same batches on local
disk and in a bucket, and a checkpoint is still a position (docs/reading.md, "Order").
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import threading
from typing import Any

import numpy as np

from vidvol.readers import permutation
from vidvol.readers import rng

# Shards per block unless set: the smallest block whose same-class batch rate is within a few per cent of a
# uniform shuffle's on the built datasets (benchmarks/shuffle.py; figures in benchmarks/RESULTS.md).
DEFAULT_BLOCK = 4
# `rng.seed_np` index of the epoch's shard permutation (blocks use their own number, from 0).
_SHARDS = -2
_PLANS_LOCK = threading.Lock()  # the per-rule cache of epoch plans, shared by tf.data's threads


class OrderError(ValueError):
    """An order option that does not fit the split (a block of no shards or more shards than the split has)."""


@dataclasses.dataclass(frozen=True)
class ShardOrder:
    """Read each epoch shard by shard: shards in a seeded order, in blocks of `block` shards, examples mixed per block.

    The epoch is still a seeded permutation of the split (a new one each epoch), but it touches each
    shard once, within one block: a reader holds the block's shards and reads them whole, so from a
    bucket a shard comes as one sequential download instead of one GET per example (Mosaic
    Streaming's py1b idea, with vidvol's promises: exact resume, N -> M hosts, equal and disjoint
    shares). Batches mix `block` shards' examples, where the default order mixes the whole split.

    Args:
      block: shards per block (>= 1, at most the split's shards). Larger mixes more; from a bucket, the
        memory window must hold a block's shards (`Tuning.stream_window`).

    Raises:
      ValueError: `block` is not an integer >= 1.
    """

    block: int = DEFAULT_BLOCK

    def __post_init__(self):
        if not isinstance(self.block, numbers.Integral) or isinstance(self.block, bool) or self.block < 1:
            raise OrderError(f"ShardOrder.block must be an integer >= 1 (shards per block; the smallest that works "
                             f"is 1), got {self.block!r}")
        object.__setattr__(self, "block", int(self.block))

    def over(self, sizes, where: str) -> ShardBlocks:
        """The rule over a split whose shard files hold `sizes` examples each (storage order); `where` names the split.

        Raises:
          OrderError: the block holds more shards than the split has (naming the largest that works).
        """
        sizes = tuple(int(s) for s in sizes)
        if self.block > len(sizes):
            raise OrderError(f"{where}: ShardOrder(block={self.block}) groups more shards than the split's "
                             f"{len(sizes)} shard files; use block={len(sizes)} at most (the whole split in one block)")
        return ShardBlocks(sizes, self.block)


@dataclasses.dataclass(frozen=True)
class _Epoch:
    """One epoch's plan: shard files in reading order, where each begins in the epoch, and its blocks."""

    shards: np.ndarray  # shard file at each place of the epoch
    starts: np.ndarray  # epoch position of each place's first example (len shards + 1)
    block_starts: np.ndarray  # epoch position of each block's first example (len blocks + 1)


@dataclasses.dataclass(frozen=True)
class ShardBlocks:
    """The streaming rule over one split: `sizes[f]` examples in shard file f (storage order), `block` shards a block.

    Epoch e under key k: the shard files are permuted (`permutation.permute_np` keyed by
    `rng.seed_np(k, e, -2, rng.ORDER)`) and cut into blocks of `block` consecutive files; the
    positions of block b (its files' examples, in that order) are then permuted within the block
    (keyed by `rng.seed_np(k, e, b, rng.ORDER)`). Position t of the epoch reads the example so
    placed (storage index: the file's first example + its row).
    """

    sizes: tuple[int, ...]
    block: int

    def __post_init__(self):
        if not self.sizes or self.block < 1 or self.block > len(self.sizes):
            raise OrderError(f"blocks of {self.block} shards over {len(self.sizes)} shard files")

    @property
    def examples(self) -> int:
        return int(sum(self.sizes))

    @functools.cached_property
    def _first(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)])

    def describe(self) -> str:
        """What a checkpoint records of this order (a state saved in another order is refused)."""
        return f", shard-streaming order in blocks of {self.block} shard files"

    def epoch(self, key: int, epoch: int) -> _Epoch:
        """The plan of epoch `epoch` under the iteration key `key` (the last few kept: a pure function of both)."""
        with _PLANS_LOCK:
            plans = self.__dict__.setdefault("_plans", {})
            found = plans.get((key, epoch))
        if found is None:
            found = self._plan(key, epoch)
            with _PLANS_LOCK:
                plans[(key, epoch)] = found
                while len(plans) > 8:
                    plans.pop(next(iter(plans)))
        return found

    def _plan(self, key: int, epoch: int) -> _Epoch:
        n = len(self.sizes)
        shards = permutation.permute_np(np.arange(n), n, rng.seed_np(key, epoch, _SHARDS, rng.ORDER))
        sizes = np.asarray(self.sizes, np.int64)[shards]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return _Epoch(shards, starts, starts[np.r_[np.arange(0, n, self.block), n]])

    def shard_sequence(self, key: int, epoch: int) -> np.ndarray:
        """The shard files of epoch `epoch` in the order it reads them."""
        return self.epoch(int(key), int(epoch)).shards

    def index_np(self, t, epoch, key) -> np.ndarray:
        """The storage index at epoch positions `t` (int64, any shape) of epochs `epoch` under keys `key` (broadcast)."""
        t = np.asarray(t, np.int64)
        epoch, key = np.broadcast_to(np.asarray(epoch, np.int64), t.shape), np.broadcast_to(np.asarray(key, np.int64), t.shape)
        out = np.empty(t.shape, np.int64)
        flat_t, flat_e, flat_k, flat_out = t.reshape(-1), epoch.reshape(-1), key.reshape(-1), out.reshape(-1)
        pairs = np.stack([flat_e, flat_k], axis=1)
        for e, k in np.unique(pairs, axis=0):
            sel = (flat_e == e) & (flat_k == k)
            flat_out[sel] = self._index_one_epoch(flat_t[sel], int(k), int(e))
        return out

    def _index_one_epoch(self, t: np.ndarray, key: int, epoch: int) -> np.ndarray:
        plan = self.epoch(key, epoch)
        if np.any((t < 0) | (t >= self.examples)):
            raise ValueError(f"positions must lie in [0, {self.examples})")
        blocks = np.searchsorted(plan.block_starts, t, side="right") - 1
        placed = np.empty_like(t)
        for b in np.unique(blocks):
            sel = blocks == b
            first, size = plan.block_starts[b], plan.block_starts[b + 1] - plan.block_starts[b]
            placed[sel] = first + permutation.permute_np(t[sel] - first, int(size),
                                                         rng.seed_np(key, epoch, int(b), rng.ORDER))
        places = np.searchsorted(plan.starts, placed, side="right") - 1
        return self._first[plan.shards[places]] + (placed - plan.starts[places])


def refuse_window(window: int, need: int, where: str, block: int, reserve: int = 0) -> None:
    """ValueError when a stream window of `window` bytes cannot hold one block's shards and the store's `reserve`
    (`need` bytes in all: the least)."""
    if window < need:
        raise OrderError(f"{where}: Tuning.stream_window={window} bytes cannot hold one block of {block} shard "
                         f"file{'s' if block != 1 else ''} ({need - reserve} bytes for the largest) beside the "
                         f"{reserve} bytes the store client keeps; the smallest window that works is {need} bytes "
                         "(or a smaller ShardOrder.block)")


def blocks_of(order: Any, sizes, where: str) -> ShardBlocks | None:
    """`order.over(sizes, where)` for a `ShardOrder`, None for the default per-example order (`order` None)."""
    return None if order is None else order.over(sizes, where)
