"""`vidvol.load` and friends: model-ready `tf.data` pipelines over prepared vidvol (TFDS) datasets."""

from __future__ import annotations

import dataclasses
import logging
import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.readers import bucket
from vidvol.readers import keywords
from vidvol.readers.tfdata import allocator
from vidvol.readers.tfdata import sizing
from vidvol.readers import order
from vidvol.readers import output
from vidvol.readers import records
from vidvol.readers import shards
from vidvol.readers.tfdata import stages
from vidvol.readers.tfdata.plan import SplitFacts
from vidvol.readers.tfdata.plan import LoadPlan
from vidvol.readers.tfdata.plan import plan_load
from vidvol.readers.tfdata import shard_window
from vidvol.readers.dataset import DatasetNotPreparedError, get_builder, supervised_keys  # noqa: F401  (get_builder: also the readers' entry)
from vidvol.readers.spec import ReadSpec
from vidvol.readers.spec import Tuning

logger = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE


def check_tf_data(builder: tfds.core.DatasetBuilder) -> None:
    """ValueError naming the random-access readers when the prepared dataset is not stored as TFRecord shards."""
    fmt = builder.info.file_format
    if fmt is not None and fmt != tfds.core.FileFormat.TFRECORD:
        raise ValueError(
            f"{builder.info.full_name} in {builder.data_dir} is stored as {fmt.value}; vidvol.load reads TFRecord shards "
            "(by record offset); "
            "read it by index with vidvol.data_source / vidvol.grain_dataset / vidvol.torch_dataset (or "
            "tfds.data_source), or build it with the default file_format (tfrecord) for vidvol.load / tfds.load"
        )
def _stream_window(builder: tfds.core.DatasetBuilder, plan: LoadPlan, source: records.SplitRecords,
                   tuning: Tuning | None, repeat: bool) -> shard_window.ShardWindow | None:
    """The memory window of whole bucket shards under `ShardOrder` (None: local shards, a cache, or the per-record
    order); a `Tuning.stream_window` that cannot hold a block is refused here, wherever the shards lie."""
    window = tuning.stream_window if tuning else None
    where = f"{builder.info.full_name} split {plan.split.name!r}"
    if plan.spec.order is None:
        if window is not None:
            raise ValueError(f"{where}: Tuning.stream_window holds whole shards of the shard-streaming order; this "
                             "read takes the per-example order (ReadSpec.order None). Pass "
                             "ReadSpec(order=vidvol.ShardOrder(...)), or leave stream_window None")
        if source.files and bucket.shard_of_url(source.files[0].path) is not None and plan.training:
            logger.info("%s: read from a bucket one ranged GET per example; ReadSpec(order=vidvol.ShardOrder()) reads "
                        "each shard whole (docs/reading.md, section Order)", where)
        return None
    blocks = plan.layout.blocks if plan.training else None
    in_bucket = bool(source.files) and all(bucket.shard_of_url(f.path) is not None for f in source.files)
    if not in_bucket or plan.cache_limit is not None:
        if window is not None:  # checked all the same: the same arguments fail alike on local disk and in a bucket
            shard_window.check_window(int(window), source.files, plan.spec.order.block if plan.training else 1, where)
        return None
    return shard_window.window_for(source.files, blocks, plan.training, window, where, repeat)


@keywords.checked(*keywords.LOAD, tuning=True)
def load(
    name: str | tfds.core.DatasetBuilder,
    split: str,
    batch_size: int,
    *,
    data_dir: str | os.PathLike | None = None,
    training: bool | None = None,
    seed: int | None = None,
    spec: ReadSpec | None = None,
    input_context: tf.distribute.InputContext | None = None,
    repeat: bool = False,
    drop_remainder: bool | None = None,
    tuning: Tuning | None = None,
    epoch: int | None = None,
) -> tf.data.Dataset:
    """Streams a prepared vidvol dataset from its TFRecord shards as model-ready `tf.data` batches.

    The parameters are tfds.load's where they mean the same (`name`, `split`, `batch_size`,
    `data_dir`); what to read and hand out is one `spec` shared with the random-access readers
    (DMVR and pytorchvideo likewise keep sampling and transforms out of the reader's own
    arguments), and speed is `tuning` (DMVR's `tune()`), which never changes the examples.

    Stopping and resuming: `tf.train.Checkpoint(iterator=iter(ds))` saves a few KiB of state (the
    epoch and global position in its order, the iteration's key, the global batch, the data's
    fingerprint: `readers.order`), whatever the dataset; restored into a pipeline made with the same
    arguments, in any process, the next batches are those the uninterrupted run would have read
    (also for an unseeded run: the saved seed wins). A checkpoint of any of N input pipelines
    restores into each of M pipelines with the same global batch (`batch_size * M`): over the M
    pipelines the rest of the epoch is the examples the N had not read. Other data or another
    global batch is an error naming both at the first `next()`. A stateful op you map after `load`
    (`tf.random.uniform`, a `tf.py_function` with state, a random Keras preprocessing layer) is not
    in that state: TensorFlow saves such a pipeline without complaint under symbolic checkpoints,
    and its draws differ after a restore; `vidvol.check_resumable(ds)` names it. Recipe:
    docs/reading.md, "Stopping and resuming".

    Args:
      name: registered dataset name with optional config ("hmdb51/split1_20x64x64"), or a builder.
      split: TFDS split, slices allowed ("train", "test", "train[:80%]").
      batch_size: examples per batch (per input pipeline when `input_context` is given).
      data_dir: TFDS data directory holding the prepared dataset.
      training: a new permutation of the whole split every epoch, random clips, drop the last partial
        batch. None: True for splits whose name starts with "train" (tfds.load's `shuffle_files` is
        the caller's choice; here a training split is read as one trains on it).
      seed: makes the example order and random clips reproducible; each epoch still differs from the
        last. None: a seed is drawn and kept in the iterator's checkpoint (over input pipelines a
        fixed shared one, `order.SHARED_SEED`: every host must compute the same order).
      spec: `vidvol.ReadSpec(clips=Clips(...), normalize=Normalize(...), output=Output(...))`: the
        clips, the frame normalization (and resize), the output dtype, mask dtype and structure.
        None: `ReadSpec()` (every stored frame, float32 in [0, 1], the supervised tuple).
      input_context: `tf.distribute.InputContext`; each of the N input pipelines reads an equal share
        of the split's examples (not of its shard files), so every pipeline yields the same number
        of batches an epoch: pipeline p reads positions p, p + N, p + 2N... of the epoch's one global
        order. Training: `examples // N` each; the `examples % N` left over (at most N - 1) are left
        out of that epoch, other ones each epoch. Evaluation: `ceil(examples / N)` each, the short
        ones padded with one example whose mask, frames and volume are zero (weight each example by
        `mask.max() > 0`); none lost.
        At most `examples` pipelines. The dataset cards give the figures for their splits.
      repeat: repeat forever (each epoch a new permutation; batches run on across epoch boundaries;
        the epochs are the iterator's own count).
      drop_remainder: drop the last partial batch; None: `training`.
      tuning: performance knobs (`vidvol.Tuning`); None: `Tuning()`.
      epoch: the epoch each new iterator starts at (under `repeat=False`: the epoch its pass reads;
        rebuild the dataset with the next one each epoch). None: 0; then one pipeline without
        `input_context` still reads a new permutation per `iter(ds)`, while over input pipelines
        every iterator of every host reads epoch 0, so that which examples pipeline p of P reads is
        a function of (seed, epoch, p, P, split) alone, never of how many iterators a host opened.

    Returns:
      A `tf.data.Dataset` of `((x, mask), target)` batches from the builder's supervised keys (dicts of
      the features under `Output(features=...)`).

    Raises:
      DatasetNotPreparedError: the dataset is not built in `data_dir` (the error gives the `tfds build` command).
      ValueError: the dataset is stored as ArrayRecord (read it with `vidvol.data_source` / `grain_dataset` /
        `torch_dataset`), or an argument does not fit it (unknown features, more pipelines than examples:
        `ShardingError`).
      TypeError: a keyword retired in 0.2.0 (`clip_length=`, `mean=`, `output_dtype=`, `cycle_length=`...),
        giving its new spelling (`readers.keywords`, CHANGELOG.md), or an unknown keyword.
    """
    builder = get_builder(name, data_dir)
    check_tf_data(builder)
    allocator.warn_if_not_pooled()
    plan = plan_load(builder.info, SplitFacts.of(builder, split), batch_size, spec=spec or ReadSpec(),
                     tuning=tuning or Tuning(), training=training, seed=seed, drop_remainder=drop_remainder,
                     input_context=input_context)
    source = records.open_split(builder, split)
    window = _stream_window(builder, plan, source, tuning, repeat)
    # Ranged GETs per record (or per volume, for direct reads): latency to hide with more batches in flight and a
    # private pool. Records (and volumes) a window serves are in memory already: they are read as from local disk.
    if plan.cache_limit is None and not (tuning and tuning.cycle_length) and source.files and all(
            bucket.shard_of_url(f.path) is not None for f in source.files) and window is None:
        stored = sum(int(np.sum(f.lengths)) for f in source.files) / max(1, len(source))  # bytes per record
        plan = dataclasses.replace(plan, read_parallelism=sizing.bucket_read_parallelism(
            plan.float_batch_bytes, plan.memory_budget, int(stored * batch_size)),
            threadpool_size=sizing.bucket_threadpool_size())
    if seed is None:  # over input pipelines every host must compute the same order: a shared seed
        seed = order.SHARED_SEED if plan.layout.pipelines > 1 else order.fresh_seed()
    draws = order.index_batches(plan.layout, batch_size, drop_remainder=plan.drop_remainder, repeat=repeat,
                                seed=seed, fingerprint=source.fingerprint, epoch=epoch)
    batch_read = stages.read(builder, plan, source, window)
    if window is not None and batch_read.direct and not (tuning and tuning.cycle_length):
        plan = dataclasses.replace(plan, read_parallelism=sizing.WINDOW_VOLUME_READS)
    ds = draws if batch_read.parse is not None else stages.examples(builder, draws, plan, batch_read)
    ds = stages.finish_batches(ds, plan, batch_read, stages.finisher(plan))
    logger.info("%s", plan.describe(direct=batch_read.direct))
    ds = ds.with_options(plan.options())
    if window is not None:  # TensorFlow keeps a numpy_function's Python callable (and so the window) past the pipeline
        weakref.finalize(ds, window.release)
    return ds


def dequantize_params(
    name: str | tfds.core.DatasetBuilder,
    output_dtype: tf.DType | str | None = None,
    *,
    feature: str | None = None,
    mean: float | Sequence[float] = 0.0,
    std: float | Sequence[float] = 1.0,
    data_dir: str | os.PathLike | None = None,
) -> output.Dequantization:
    """Scale and offset that turn `load`'s frames or volume under `Output(dtype=output_dtype)` into its float32 output.

    `x * scale + offset` (per channel for per-channel `mean`/`std`) equals what `load` returns with
    `Output(dtype="float32")` and `Normalize(mean=mean, std=std)`, within float rounding; `.layer()` is
    the Keras layer that applies it on the accelerator (`vidvol.layers.Dequantize`).

    Args:
      name: registered dataset name with optional config, or a builder.
      output_dtype: the `Output.dtype` the batches come in; None: the stored integers ("uint8" frames:
        scale 1/(255 std), offset -mean/std; "int16" MRI volumes: the stored integers are the values,
        scale 1, offset 0). A float dtype comes out finished: scale 1, offset 0.
      feature: the video or volume feature; None: the first video or volume among the builder's
        supervised inputs.
      mean: the `Normalize.mean` to fold in (a number or one per channel); frames only.
      std: the `Normalize.std` to fold in (a number or one per channel, non-zero); frames only.
      data_dir: TFDS data directory holding the prepared dataset.

    Returns:
      A `Dequantization` (`feature`, `output_dtype`, `stored_dtype`, `scale`, `offset`, `.layer()`).

    Raises:
      DatasetNotPreparedError: the dataset is not built in `data_dir`.
      ValueError: no video or volume feature, `feature` unknown or neither a video nor a volume, an
        integer `output_dtype` other than the stored one, a zero `std`, or `mean`/`std` for a volume.
    """
    builder = get_builder(name, data_dir)
    info = builder.info
    if feature is None:
        try:
            candidates = supervised_keys(info)[0]
        except ValueError:
            candidates = tuple(info.features)
        data = output.data_features(info, candidates) or output.data_features(info, tuple(info.features))
        if not data:
            raise ValueError(f"{info.full_name} has no video or volume feature: nothing to dequantize")
        feature = data[0]
    return output.dequantization(info, feature, output_dtype, mean=mean, std=std)
@keywords.checked(*keywords.LOAD, tuning=True)
def distribute(
    strategy: tf.distribute.Strategy, name: str | tfds.core.DatasetBuilder, split: str, global_batch_size: int, **kwargs: Any
) -> tf.distribute.DistributedDataset:
    """Runs `load` once per input pipeline of `strategy`, each over an equal share of the examples.

    Every pipeline yields the same number of batches an epoch (`load`'s `input_context`): training
    leaves `examples % pipelines` out of each epoch (a different run of them each epoch),
    evaluation pads the short pipelines with one zero-mask example each (weight by the mask).

    Args:
      strategy: the `tf.distribute.Strategy` whose `distribute_datasets_from_function` builds the pipelines.
      name: registered dataset name with optional config, or a builder (as in `load`).
      split: TFDS split, slices allowed (as in `load`).
      global_batch_size: examples per step over all replicas; each pipeline reads per-replica batches.
      **kwargs: `load`'s keywords (`seed=`, `spec=`, `tuning=`...).

    Returns:
      The `tf.distribute.DistributedDataset` of per-replica batches.
    """

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return load(name, split, context.get_per_replica_batch_size(global_batch_size), input_context=context, **kwargs)

    return strategy.distribute_datasets_from_function(dataset_fn)


def load_labels(
    name: str | tfds.core.DatasetBuilder,
    split: str,
    *,
    data_dir: str | os.PathLike | None = None,
    target: str | None = None,
) -> np.ndarray:
    """Reads every target of a split as one array, parsing nothing else (no frame is decoded or copied).

    The order is that of `load(..., training=False)` (the split's storage order: shard files in turn,
    each file's records in order), so predictions line up with it.

    Args:
      name: registered dataset name with optional config, or a builder.
      split: TFDS split, slices allowed.
      data_dir: TFDS data directory holding the prepared dataset.
      target: the feature to read; None: the builder's supervised target.

    Returns:
      A NumPy array of the split's targets, one row per example (empty, with the feature's shape, for
      an empty split).

    Raises:
      DatasetNotPreparedError: the dataset is not built in `data_dir`.
      ValueError: `target` is not a feature, or the dataset is not stored as TFRecord shards.
    """
    builder = get_builder(name, data_dir)
    check_tf_data(builder)
    info = builder.info
    if target is None:
        _, target = supervised_keys(info)
    if target not in info.features:
        raise ValueError(f"{info.full_name}: unknown feature {target!r}; expected one of {sorted(info.features)}")
    read_config = tfds.ReadConfig(try_autocache=False, interleave_cycle_length=1, interleave_block_length=1,
                                  skip_prefetch=True)  # one file after the other: storage order
    decoders = tfds.decode.PartialDecoding({target: True})
    if shards.checked_reader_applies(builder, read_config):
        ds = shards.read_examples(builder, split, read_config, shuffle_files=False, decoders=decoders)
    else:
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config, decoders=decoders)
    ds = ds.map(lambda ex: ex[target]).batch(4096).prefetch(AUTOTUNE)
    parts = [np.asarray(b) for b in tfds.as_numpy(ds)]
    if not parts:
        shape = tuple(d or 0 for d in info.features[target].shape)
        return np.zeros((0,) + shape, info.features[target].np_dtype)
    return np.concatenate(parts)


def example_bytes(name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None) -> float:
    """Stored bytes per example of a split (`num_bytes / num_examples`), the unit of the shuffle buffer rule."""
    return SplitFacts.of(get_builder(name, data_dir), split).example_bytes
