"""`torch_dataset`: the model-ready examples as a map-style dataset for `torch.utils.data.DataLoader` (no torch needed)."""

from __future__ import annotations

import os

import tensorflow_datasets as tfds

from vidvol.readers import keywords
from vidvol.readers.random_access.data_source import SupervisedExamples
from vidvol.readers.spec import ReadSpec
@keywords.checked(*keywords.SUPERVISED)
def torch_dataset(
    name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None,
    training: bool | None = None, seed: int | None = None, spec: ReadSpec | None = None,
    num_threads: int | None = None,
) -> SupervisedExamples:
    """A map-style dataset of `((x, mask), y)` NumPy examples for `torch.utils.data.DataLoader`.

    `len(ds)`, `ds[i]` and `ds.__getitems__(indices)` (the DataLoader's batched fetch) need no
    torch; the DataLoader shuffles (`shuffle=True`), batches and turns the arrays into tensors.
    `ds.sampler()` gives a resumable sampler (`epoch_order.EpochSampler`).

    Args:
      name: registered dataset name with optional config, or a builder (as in `vidvol.load`).
      split: TFDS split, slices allowed.
      data_dir: TFDS data directory holding the prepared dataset.
      training: random clips (and augmentation); None: the split's name starts with "train".
      seed: training clips are random per call, or, with a seed, fixed by (seed, epoch, index): call
        `ds.set_epoch(e)` before each epoch.
      spec: as `SupervisedExamples.make` takes it: clips, `Normalize(mean, std)`, `Output(mask_dtype,
        inputs, target)` and `augment`; None: `ReadSpec()`.
      num_threads: threads decoding one `__getitems__` batch; None: two per core, at most 8.

    Returns:
      A `SupervisedExamples` (`len`, `ds[i]`, `ds.__getitems__`, `set_epoch`, `sampler`).

    Raises:
      DatasetNotPreparedError: the dataset is not built in `data_dir`.
      RandomAccessError: the dataset is stored as TFRecord.
      ValueError: a `spec` part these NumPy readers cannot honour (resize, a dtype other than float32,
        dicts, a left-out mask).
    """
    return SupervisedExamples.make(name, split, data_dir=data_dir, training=training, seed=seed, spec=spec,
                                   num_threads=num_threads)
