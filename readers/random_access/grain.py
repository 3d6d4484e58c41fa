"""`grain_dataset`: the random-access readers' `((x, mask), y)` batches as a Grain `MapDataset` whose iterators resume.

Grain is imported only when a dataset is made: its classes live in `grain_iterators`. The order,
clips and augmentation follow `vidvol.load`'s rules under the seed (`epoch_order.EpochOrder`), so an
iterator's state is a position, the epoch, the seed and the data's fingerprint.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from vidvol.readers import keywords
from vidvol.readers import order
from vidvol.readers.random_access.data_source import SupervisedExamples
from vidvol.readers.random_access.data_source import stack_batch
from vidvol.readers.spec import ReadSpec, check_batch_size
@keywords.checked(*keywords.SUPERVISED)
def grain_dataset(
    name: str | tfds.core.DatasetBuilder, split: str, batch_size: int, *, data_dir: str | os.PathLike | None = None,
    training: bool | None = None, seed: int | None = None, spec: ReadSpec | None = None,
    drop_remainder: bool | None = None, num_epochs: int | None = 1, shard_options: Any = None,
):
    """A Grain `MapDataset` of `((x, mask), y)` NumPy batches over a split built with ArrayRecord shards.

    Iterate it directly, or for parallel reads `ds.to_iter_dataset(grain.ReadOptions(num_threads=8))`,
    then `.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))` for worker processes. The
    iterators of `iter(ds)` and `ds.to_iter_dataset(...)` resume: `it.get_state()` ->
    `{"iterator": Grain's own state, "seed": ..., "data": ...}`; `it.set_state(state)` in a fresh
    process continues exactly, also for an unseeded dataset (the saved seed is taken up) and across
    epochs (`num_epochs`); data other than the saved one is a `ValueError` naming both. A
    transformation you add after this dataset gives Grain's own state, without the seed (pass a
    seed then). Training shuffles per epoch (`epoch_order.EpochOrder.indices`, `vidvol.load`'s
    rule), each random clip drawn by `rng.example_rng(seed, epoch, index, rng.CLIP)`.

    Args:
      name: registered dataset name with optional config, or a builder (as in `vidvol.load`).
      split: TFDS split, slices allowed.
      batch_size: examples per batch.
      data_dir: TFDS data directory holding the prepared dataset.
      training: a new permutation of the split every epoch, random clips, last partial batch dropped.
        None: the split's name starts with "train".
      seed: makes the order and the clips reproducible; None: a fresh seed, kept in the iterators' state.
      spec: as `SupervisedExamples.make` takes it: clips, `Normalize(mean, std)`, `Output(mask_dtype,
        inputs, target)` and `augment`; None: `ReadSpec()`.
      drop_remainder: drop the last partial batch; None: `training`.
      num_epochs: epochs to read (default 1); None repeats forever (batches then run across epochs,
        as `vidvol.load(repeat=True)`).
      shard_options: this process's shard (`grain.sharding.ShardOptions(shard_index, shard_count)`,
        `ShardByJaxProcess()`: anything with `shard_index` and `shard_count`): shard i of N reads
        positions i, i + N... of each epoch's one order (`vidvol.load`'s `input_context` rule; the
        seed must be the same on every process). An unsliced iterator's state restores into
        each shard of another shard count with the same global batch (`batch_size` x shards).

    Returns:
      The Grain `MapDataset` of batches, whose iterators resume.

    Raises:
      ImportError: Grain is not installed (`pip install 'vidvol[grain]'`).
      DatasetNotPreparedError: the dataset is not built in `data_dir`.
      RandomAccessError: the dataset is stored as TFRecord.
      ValueError: a bad `batch_size`, or a `spec` part these NumPy readers cannot honour (resize, a
        dtype other than float32, dicts, a left-out mask).
    """
    try:
        from vidvol.readers.random_access import grain_iterators  # imports grain
    except ImportError as e:  # pragma: no cover  (grain is in the `grain` and `test` extras)
        raise ImportError("vidvol.grain_dataset needs Grain: pip install 'vidvol[grain]'") from e
    check_batch_size(batch_size)
    examples = SupervisedExamples.make(name, split, data_dir=data_dir, training=training, seed=seed, spec=spec)
    training = examples.training
    drop_remainder = training if drop_remainder is None else drop_remainder
    shards, shard = (1, 0) if shard_options is None else (int(shard_options.shard_count),
                                                          int(shard_options.shard_index))
    layout = examples.layout(shards, shard, training)  # ReadSpec.order's blocks, when set
    # uint8 clips are stacked, then a whole batch becomes float32 at once (one pass, not one per example).
    chain = grain_iterators.Chain(examples, layout, num_epochs, batch_size, drop_remainder, FinishBatch(examples),
                                  examples.source.fingerprint + layout.describe())
    if seed is None:  # over shards every process must compute the same order: a shared seed
        seed = order.SHARED_SEED if shards > 1 else order.fresh_seed()
    return chain.build(int(seed))


@dataclasses.dataclass(frozen=True)
class FinishBatch:
    """Picklable Grain batch_fn: stack the selected examples, then `finish` the batch (pads' inputs zero)."""

    examples: SupervisedExamples

    def __call__(self, selected: Sequence[tuple[Mapping[str, Any], bool]]):
        batch = self.examples.finish(stack_batch([s for s, _ in selected]))
        valid = np.asarray([v for _, v in selected])
        if valid.all():
            return batch
        xs, y = batch
        keep = lambda x: np.where(valid.reshape((-1,) + (1,) * (x.ndim - 1)), x, 0).astype(x.dtype)
        return (tuple(keep(x) for x in xs) if isinstance(xs, tuple) else keep(xs)), y
