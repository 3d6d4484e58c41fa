"""The resumable order of the random-access readers, apart from the readers themselves.

`EpochOrder`: which example each position of an epoch reads (`order.Layout` in NumPy) under a seed;
`SeededIndex`: an example index that carries its epoch and seed (so a dataset's clip and augmentation draws
follow the sampler into any worker process); `EpochSampler`: torchdata's `StatefulDataLoader`
protocol over them (`torch_dataset(...).sampler()`); `refusal`: the error for a state saved on other
data. `grain` and `grain_iterators` (Grain) and `data_source` (PyTorch's sampler) import this module,
and it imports none of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from vidvol.readers import order

class SeededIndex(int):
    """An example index with the epoch and seed of its random draws, and whether it is a real example (not a pad)."""

    def __new__(cls, index: int, epoch: int, seed: int, valid: bool = True):
        draw = super().__new__(cls, int(index))
        draw.epoch, draw.seed, draw.valid = int(epoch), int(seed), bool(valid)
        return draw

    def __reduce__(self):
        return SeededIndex, (int(self), self.epoch, self.seed, self.valid)

    def __repr__(self) -> str:
        return f"SeededIndex({int(self)}, epoch={self.epoch}, seed={self.seed}{', pad' if not self.valid else ''})"


def refusal(saved: str, current: str) -> ValueError:
    return ValueError(f"vidvol: this state was saved reading {saved}; this reader reads {current}. The data (or the "
                      "layout) changed since, so its position would point at other examples: start a new pass without "
                      "the state (docs/reading.md, section Stopping and resuming)")


@dataclasses.dataclass
class EpochOrder:
    """Which example each position of an epoch reads (`order.Layout` in NumPy), under a seed that a restore may replace.

    `vidvol.load`'s order rule: training epoch `e` is a permutation of the split
    (`readers.permutation`) keyed by `(seed, e)`; evaluation the storage order; over several
    replicas each reads an equal share (training drops `n mod replicas` an epoch, evaluation pads
    with an example whose inputs are zero). Every clip is then drawn by `rng.example_rng(seed, epoch,
    index, rng.CLIP)`, so the state of a reader is a position, the epoch and the seed, plus the
    fingerprint of the data (`records.fingerprint`) it was reading.
    """

    layout: order.Layout
    seed: int

    def indices(self, epoch: int, positions, frontier: int = 0) -> list[SeededIndex]:
        """The examples at `positions` of `epoch`.

        Args:
          epoch: the epoch (training: its permutation).
          positions: this replica's positions k in the epoch from `frontier` on, each in
            [0, `layout.elements(frontier)`).
          frontier: the global position of the epoch its replicas read from (0: the start; a restore's).

        Returns:
          One `SeededIndex` per position: storage index, `epoch`, this order's seed, and whether it is
          a real example (False: an evaluation pad).
        """
        index, valid = self.layout.examples_np(np.asarray(positions, np.int64), epoch, self.seed, frontier)
        return [SeededIndex(i, epoch, self.seed, v) for i, v in zip(index.tolist(), valid.tolist())]


class EpochSampler:
    """A resumable sampler: `vidvol.load`'s order over `examples` (a `data_source.SupervisedExamples`: its length,
    `training`, `seed` and `source.fingerprint`), for `torch.utils.data.DataLoader`.

    `shuffle` (default: the dataset's `training`): a new permutation of the split per epoch (call
    `set_epoch(e)` before each epoch, as with `DistributedSampler`); else storage order.
    `num_replicas`/`rank`: this process's equal share, positions rank, rank + num_replicas... of the
    epoch's one order (training drops `n mod num_replicas` examples an epoch; evaluation pads, inputs
    zero). `seed` None: the dataset's, else a fresh one (kept in the state; over replicas give one).
    `state_dict()` / `load_state_dict()` follow torchdata's `StatefulDataLoader`: `{"epoch", "yielded",
    "frontier", "seed", "data"}`, where `frontier` is the epoch's global position the replicas reached
    (`yielded * num_replicas` from the epoch's start); after `load_state_dict`, the next `iter()` of
    that epoch continues from the frontier, so a state saved on any of N replicas restores into each
    of M (another world size, or `num_workers`): over the M the rest of the epoch is the examples not
    read yet. It yields `SeededIndex`es, example indices that carry their epoch and seed, so the
    dataset's clip draws follow the sampler in any worker process. Needs no torch.
    """

    def __init__(self, examples: Any, *, shuffle: bool | None = None, seed: int | None = None,
                 num_replicas: int = 1, rank: int = 0):
        shuffle = examples.training if shuffle is None else bool(shuffle)
        seed = examples.seed if seed is None else seed
        layout = (examples.layout(num_replicas, rank, shuffle) if hasattr(examples, "layout")
                  else order.Layout(len(examples), int(num_replicas), int(rank), shuffle))
        self.order = EpochOrder(layout, order.fresh_seed() if seed is None else int(seed))
        self.data = examples.source.fingerprint + self.order.layout.describe()
        self.epoch, self.yielded, self._start, self._resume_at = 0, 0, 0, None

    @property
    def seed(self) -> int:
        return self.order.seed

    def __len__(self) -> int:
        return self.order.layout.per_epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next `iter()` reads (a pending restored position applies to its own epoch only)."""
        if int(epoch) != self.epoch:
            self._resume_at = None
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[SeededIndex]:
        self._start, self._resume_at = self._resume_at or 0, None
        self.yielded = 0
        layout = self.order.layout
        for draw in self.order.indices(self.epoch, np.arange(layout.elements(self._start)), self._start):
            self.yielded += 1
            yield draw

    def state_dict(self) -> dict[str, Any]:
        replicas = self.order.layout.pipelines
        frontier = self._start + self.yielded * replicas if self._resume_at is None else self._resume_at
        return {"epoch": self.epoch, "yielded": frontier // replicas, "frontier": frontier, "seed": self.seed,
                "data": self.data}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state["data"] != self.data:
            raise refusal(state["data"], self.data)
        frontier = state.get("frontier")
        if frontier is None:  # a state without one: saved over this number of replicas
            frontier = int(state["yielded"]) * self.order.layout.pipelines
        self.order.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self._resume_at = int(frontier)
        self.yielded = 0
