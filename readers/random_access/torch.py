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
    Training clips are random per call, or, with `seed`, fixed by (seed, epoch, index): call
    `ds.set_epoch(e)` before each epoch. Arguments as in `vidvol.load`; `spec` as
    `SupervisedExamples.make` takes it; `num_threads` decode one `__getitems__` batch.
    """
    return SupervisedExamples.make(name, split, data_dir=data_dir, training=training, seed=seed, spec=spec,
                                   num_threads=num_threads)
