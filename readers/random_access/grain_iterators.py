"""The Grain datasets behind `readers.random_access.grain.grain_dataset`, apart because this module imports Grain.

`Epochs`: a `MapDataset` over element numbers `i` (epoch `i // per_epoch`): element `i` is the
example `vidvol.load`'s order puts there, its clip drawn from `rng.example_rng(seed, epoch,
index, rng.CLIP)`, its augmentation (`ReadSpec.augment`) from `rng.VIDEO_AUGMENT`'s key (crops) or
`rng.VOLUME_AUGMENT`'s generator (volumes). `Resumable` (made by `Chain`) wraps the batched dataset so
that its iterators' state carries the seed and the data's fingerprint beside Grain's own position.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import grain

from vidvol.readers.random_access.epoch_order import EpochOrder, refusal
from vidvol.readers import rng


class Epochs(grain.MapDataset):
    """Element `i`: the selected (clip decoded, uint8) example at position `i % per_epoch` of epoch `i // per_epoch`."""

    def __init__(self, examples, epochs, num_epochs: int | None, start: tuple[int, int] = (0, 0)):
        super().__init__()
        self.examples, self.epochs, self.start = examples, epochs, start
        layout = epochs.layout
        self.first = int(layout.elements(start[1]))  # elements of the first epoch, from its frontier on
        later = None if num_epochs is None else max(int(num_epochs) - start[0] - 1, 0)
        self.length = sys.maxsize if later is None else (self.first if start[0] < num_epochs else 0) + layout.per_epoch * later

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i):
        if not isinstance(i, int):
            return self._getitems(i)
        i = int(i)
        if i < self.first:
            epoch, position, frontier = self.start[0], i, self.start[1]
        else:
            later, position = divmod(i - self.first, self.epochs.layout.per_epoch)
            epoch, frontier = self.start[0] + 1 + later, 0
        draw = self.epochs.indices(epoch, [position], frontier)[0]
        example = self.examples.source[int(draw)]
        clip_rng = (rng.example_rng(draw.seed, epoch, int(draw), rng.CLIP)
                    if self.examples.training and self.examples.plan.clip is not None else None)
        return self.examples.select(example, clip_rng, self.examples.augment_for(draw)), draw.valid

    def _getitems(self, i):
        raise TypeError(f"{type(self).__name__} takes one integer index, got {i!r}")

    def __str__(self) -> str:
        return f"vidvol.Epochs({self.examples.source!r}, {self.epochs.layout.per_epoch} per epoch)"


@dataclasses.dataclass(frozen=True)
class Chain:
    """How `grain_dataset` makes its batched dataset under a seed (picklable), so a restore can make its own."""

    examples: Any  # data_source.SupervisedExamples
    layout: Any  # order.Layout
    num_epochs: int | None
    batch_size: int
    drop_remainder: bool
    batch_fn: Any  # grain.FinishBatch
    data: str  # the data's fingerprint and the layout's training/evaluation

    def build(self, seed: int, start: tuple[int, int] = (0, 0)) -> Resumable:
        """The batched dataset under `seed`, from `start` = (epoch, global frontier) on (a restore's, or the start)."""
        epochs = EpochOrder(self.layout, int(seed))
        ds = Epochs(self.examples, epochs, self.num_epochs, start)
        return Resumable(ds.batch(self.batch_size, drop_remainder=self.drop_remainder, batch_fn=self.batch_fn),
                         epochs, self, start)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.layout.pipelines


class Resumable(grain.MapDataset):
    """The batched dataset, whose iterators' state is `{"iterator": Grain's, "seed": ..., "data": ...}`."""

    def __init__(self, parent: grain.MapDataset, epochs, chain: Chain, start: tuple[int, int] = (0, 0)):
        super().__init__(parent)
        self.epochs, self.chain, self.data, self.start = epochs, chain, chain.data, start

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, i):
        return self._parent[i]

    def to_iter_dataset(self, read_options=None, *, allow_nones: bool = False):
        return _SeededIterDataset(super().to_iter_dataset(read_options, allow_nones=allow_nones), self,
                                  (read_options, allow_nones))

    def __str__(self) -> str:
        return "vidvol.grain_dataset"


_MALFORMED = "vidvol.grain_dataset: this iterator state is malformed"
_MALFORMED_FIX = ("restore a state that `it.get_state()` returned, unchanged, or start a new pass without one "
                  "(docs/reading.md, section Stopping and resuming)")


def _check_state(state: Any) -> None:
    """ValueError saying what is wrong with a state that `get_state` cannot have returned (found by the fuzz lane)."""
    def whole(value: Any, least: int = 0) -> bool:
        return type(value) is int and value >= least

    if not isinstance(state, dict):
        raise ValueError(f"{_MALFORMED}: it is a {type(state).__name__}, expected a dict; {_MALFORMED_FIX}")
    problems = [f"no `{key}`" for key in ("iterator", "seed", "data") if key not in state]
    if "data" in state and not isinstance(state["data"], str):
        problems.append(f"`data` is {state['data']!r}, expected a string")
    if "iterator" in state and not isinstance(state["iterator"], dict):
        problems.append(f"`iterator` is {type(state['iterator']).__name__}, expected a dict")
    elif "next_index" in state.get("iterator", {}) and not whole(state["iterator"]["next_index"]):
        # Grain takes any number here and fails only at the next batch (a float, NaN): refused at the restore.
        problems.append(f"`iterator.next_index` is {state['iterator']['next_index']!r}, expected a whole number >= 0")
    if "seed" in state and not (type(state["seed"]) is int and -(2**63) <= state["seed"] < 2**63):
        problems.append(f"`seed` is {state['seed']!r}, expected a whole number of 64 bits")
    for key, least in (("shards", 1), ("global_batch", 1), ("epoch", 0), ("frontier", 0)):
        if key in state and not whole(state[key], least):
            problems.append(f"`{key}` is {state[key]!r}, expected a whole number >= {least}")
    start = state.get("start", [0, 0])
    if not (isinstance(start, (list, tuple)) and len(start) == 2 and all(whole(v) for v in start)):
        problems.append(f"`start` is {start!r}, expected [epoch, frontier]")
    if ("epoch" in state) != ("frontier" in state):
        problems.append("`epoch` and `frontier` come together")
    if problems:
        raise ValueError(f"{_MALFORMED}: {'; '.join(problems)}; {_MALFORMED_FIX}")


class _SeededIterDataset(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset, owner: Resumable, how: tuple):
        super().__init__(parent)
        self.owner, self.how = owner, how + (None,)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Grain's in-place slicing (each `mp_prefetch` worker reads a slice): kept, for a restore's own dataset."""
        self._parent.set_slice(sl, sequential_slice)
        self.how = self.how[:2] + ((sl, sequential_slice),)

    def __iter__(self):
        return _SeededIterator(self._parent.__iter__(), self.owner, self.how)

    def __str__(self) -> str:
        return "vidvol.grain_dataset iterator"


class _SeededIterator(grain.DatasetIterator):
    """Grain's iterator, with the seed and the data's fingerprint in its state.

    `set_state` touches only this iterator: a state of another seed makes its own dataset under that
    seed (`Chain.build`), restores Grain's state into a new iterator of it, and only then takes both
    up; the dataset and its other iterators keep their order, and a failed restore changes nothing.
    """

    def __init__(self, parent: grain.DatasetIterator, owner: Resumable, how: tuple):
        super().__init__(parent)
        self.owner, self.how = owner, how

    def __next__(self):
        return next(self._parent)

    def get_state(self) -> dict[str, Any]:
        inner = self._parent.get_state()
        chain, owner = self.owner.chain, self.owner
        state = {"iterator": inner, "seed": owner.epochs.seed, "data": owner.data, "shards": chain.layout.pipelines,
                 "global_batch": chain.global_batch, "start": list(owner.start)}
        if self.how[2] is None and isinstance(inner.get("next_index"), int):  # unsliced: where the shards are
            read = min(inner["next_index"] * chain.batch_size, len(owner._parent._parent))
            state["epoch"], state["frontier"] = chain.layout.advance(*owner.start, read) if read else owner.start
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        chain = self.owner.chain
        _check_state(state)
        if state["data"] != self.owner.data:
            raise refusal(state["data"], self.owner.data)
        if state.get("global_batch", chain.global_batch) != chain.global_batch:
            raise ValueError(
                f"vidvol.grain_dataset: this state was saved with a global batch of {state['global_batch']} "
                f"({state['global_batch'] // state['shards']} per shard x {state['shards']} shards); this dataset "
                f"reads {chain.global_batch} ({chain.batch_size} x {chain.layout.pipelines}). A state restores "
                "into any number of shards whose global batch is the saved one: pass batch_size="
                f"{state['global_batch']} // {chain.layout.pipelines}, or start a new pass without the state "
                "(docs/reading.md, section Stopping and resuming)")
        seed = int(state["seed"])
        saved_layout = (state.get("shards", 1), tuple(state.get("start", (0, 0))))
        read_options, allow_nones, sliced = self.how
        moved = saved_layout != (chain.layout.pipelines, tuple(self.owner.start))
        if moved and "frontier" not in state:
            raise ValueError("vidvol.grain_dataset: this state was saved by a sliced iterator (mp_prefetch's "
                             "workers) over another number of shards or from another start: it restores only into "
                             f"{saved_layout[0]} shards; restore it there, or start a new pass without the state")
        if moved:  # another shard count: a dataset of this layout from the saved epoch's frontier on
            owner = chain.build(seed, (int(state["epoch"]), int(state["frontier"])))
        else:
            owner = self.owner if seed == self.owner.epochs.seed else chain.build(seed, self.owner.start)
        source = grain.MapDataset.to_iter_dataset(owner, read_options, allow_nones=allow_nones)
        if sliced is not None:
            source.set_slice(*sliced)
        parent = source.__iter__()
        if not moved:
            try:
                parent.set_state(state["iterator"])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise ValueError(f"{_MALFORMED}: Grain refused its `iterator` part ({type(e).__name__}: {e}); "
                                 f"{_MALFORMED_FIX}") from None
        self._parents, self.owner = (parent,), owner  # what Grain's constructor does, for the new parent tree
        to_visit = [parent]
        while to_visit:
            current = to_visit.pop()
            current._ctx = self._ctx
            to_visit.extend(current._parents)
