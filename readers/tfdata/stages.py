"""The named stages of `vidvol.load`: draws -> read -> (parse and select per example) -> batch -> decode -> finish.

`order.index_batches` gives batches of draws (which examples, in which order: the iterator's checkpointed
state); `read` turns a batch of draws into parsed features (one Python read of the batch's records,
one parse per batch, or direct volume reads), or into records for TFDS's per-example parse and the
clip selection (`examples`); `finish_batches` decodes the batch's frames, crops them (`ReadSpec.augment`),
zeroes evaluation pads and finishes (frames to the output dtype, the output structure). Each follows the pipeline's
`plan.LoadPlan`, so `load` reads as the sequence of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import tfds_api
from vidvol.readers import augment_volume
from vidvol.readers.tfdata import direct_volumes
from vidvol.readers import order
from vidvol.readers import output
from vidvol.readers import records
from vidvol.readers.tfdata import example_graph
from vidvol.readers.tfdata import record_reads
from vidvol.readers import rng
from vidvol.readers.tfdata.batch_parser import BatchParser
from vidvol.readers.tfdata.plan import LoadPlan
from vidvol.readers.tfdata.shard_window import ShardWindow

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class BatchRead:
    """How a batch of draws is read: `parse` (draws -> the batch's features) or `fetch` (draws -> serialized records)."""

    parse: Callable[[Mapping[str, tf.Tensor]], dict[str, tf.Tensor]] | None
    fetch: Callable[[Mapping[str, tf.Tensor]], tf.Tensor] | None = None
    direct: bool = False
    augmented: bool = False  # `parse` gives the volume augmented already (direct reads of its patches)


def read(builder: tfds.core.DatasetBuilder, plan: LoadPlan, source: records.SplitRecords,
         window: ShardWindow | None = None) -> BatchRead:
    """The read of one batch of draws: parsed per batch where the plan has a parser, else records to parse per example.

    Volumes straight from the shard files where the plan asks for it and `direct_volumes` finds the
    shards fit (the other features parsed per batch); otherwise the batch's whole records in one
    Python call (`record_reads.RecordReads`; bucket shards whole from `window` when given), parsed per batch by
    `BatchParser` when the plan has one.
    """
    names, decoders = plan.read.names, plan.read.feature_decoders
    # Bucket shards read directly only whole (patches read rows from a local file: whole records there).
    direct = (direct_volumes.plan_direct(builder, source, names, buckets=plan.augment is None)
              if plan.direct_reads else None)
    if direct is not None:
        volume, indexes = direct
        others = [n for n in names if n != volume]
        small = BatchParser.for_features(builder.info.features, others, (), decoders) if others else None
        parser = direct_volumes.DirectParser(builder, source, volume, indexes, small, plan.spec.output.dtype,
                                             plan.static_batch, plan.augment, plan.cache_limit, window)
        return BatchRead(parse=parser.parse, direct=True, augmented=plan.augment is not None)
    reads = record_reads.RecordReads(source, plan.cache_limit, window)
    fetch = lambda draw: record_reads.read_records(reads, draw["index"], draw["epoch"], draw["seed"])
    if plan.parser is not None:
        return BatchRead(parse=lambda draw: plan.parser.parse(fetch(draw)), fetch=fetch)
    return BatchRead(parse=None, fetch=fetch)


def examples(builder: tfds.core.DatasetBuilder, draws: tf.data.Dataset, plan: LoadPlan, batch_read: BatchRead
             ) -> tf.data.Dataset:
    """Per example (no batch parse): records read a batch at a time, each parsed by TFDS's decoders and its clip
    selected (frames decoded here unless per batch), then batched again: `(features, draws)` batches.

    The batches are the draws' own (each batch of draws is read, split into examples and put back
    together), so an iterator checkpoint between batches is between whole batches of draws.
    """
    features, decoders = builder.info.features, plan.read.decoders()
    features, decoders = tfds_api.extract_features(decoders, features), decoders.decoders
    ds = draws.map(lambda draw: (batch_read.fetch(draw), draw), num_parallel_calls=plan.read_parallelism,
                   deterministic=plan.deterministic).unbatch()

    def one(record: tf.Tensor, draw: Mapping[str, tf.Tensor]):
        example = features.deserialize_example(record, decoders=decoders)
        if plan.read.needs_example_map:
            example = example_graph.select(plan.read, example, order.stream_seed(draw, rng.CLIP) if plan.random_clips else None)
        return dict(example), draw

    ds = ds.map(tf.autograph.experimental.do_not_convert(one), num_parallel_calls=plan.decode_parallelism,
                deterministic=plan.deterministic)
    ds = ds.batch(plan.batch_size, drop_remainder=plan.drop_remainder)
    # unbatch/batch lose the count the draws have; a finite read states it again (Keras's evaluate and
    # predict then know their steps, and tf.data raises if the batches ever differed from the draws').
    batches = int(draws.cardinality()) if tf.executing_eagerly() else tf.data.UNKNOWN_CARDINALITY
    if batches >= 0:
        ds = ds.apply(tf.data.experimental.assert_cardinality(batches))
    return ds


def zero_pads(plan: LoadPlan, batch: Mapping[str, tf.Tensor], valid: tf.Tensor) -> dict[str, tf.Tensor]:
    """The batch with each evaluation pad's mask and frames (or volume) zero (`valid` False)."""
    out = dict(batch)
    for name, value in batch.items():
        feature = plan.info.features[name]
        if name == output.MASK or name in plan.read.videos or output.is_volume(feature):
            keep = tf.reshape(valid, tf.concat([tf.shape(valid), tf.ones([value.shape.rank - 1], tf.int32)], 0))
            out[name] = tf.where(keep, value, tf.zeros_like(value))
    return out


def as_float(x: tf.Tensor, scale_max: float | None, mean: Any, std: Any) -> tf.Tensor:
    """float32 copy of x: integer pixels scaled by 1/scale_max, then (x - mean) / std."""
    mean_arr, std_arr = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if x.dtype == tf.uint8 and scale_max == 255.0 and mean_arr.ndim == 0 and std_arr.ndim == 0:
        # One pass instead of cast + multiply (+ subtract + divide): min + x * (max - min) / 255.
        low, high = -mean_arr / std_arr, (1.0 - mean_arr) / std_arr
        return tf.quantization.dequantize(tf.bitcast(x, tf.quint8), float(low), float(high), mode="MIN_COMBINED")
    y = tf.cast(x, tf.float32)
    if scale_max:
        y = y * (1.0 / scale_max)
    if not (np.all(mean_arr == 0) and np.all(std_arr == 1)):
        y = (y - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
    return y


def resize_frames(x: tf.Tensor, size: tuple[int, int]) -> tf.Tensor:
    """Bilinear resize of the last three (H, W, C) dims of a float tensor of any rank >= 3."""
    channels = x.shape[-1]
    flat = tf.reshape(x, tf.concat([[-1], tf.shape(x)[-3:]], 0))
    resized = tf.image.resize(flat, size, method="bilinear")
    out = tf.reshape(resized, tf.concat([tf.shape(x)[:-3], [size[0], size[1], channels]], 0))
    out.set_shape(x.shape[:-3].concatenate([size[0], size[1], channels]))
    return out


def finisher(plan: LoadPlan) -> Callable[[Mapping[str, tf.Tensor]], Any]:
    """The per-batch finish: frames to `Output.dtype`, other inputs to `Output.mask_dtype`, output structure.

    Frames: float32 normalized (float16/bfloat16: that, cast), or the stored integers untouched.
    Volumes come out of their decoder in the output dtype already. `Output(mask_dtype=None)` leaves
    the `mask` input out after an assertion that it is all ones has run.
    """
    read, inputs, target, mask_dtype = plan.read, plan.inputs, plan.target, plan.mask_dtype
    mean, std, resize = plan.spec.normalize.mean, plan.spec.normalize.std, plan.spec.normalize.resize
    output_dtype = plan.spec.output.dtype
    patch = plan.augment.patch if plan.augment is not None else None
    full_mask = (lambda m: output.full_mask_check(plan.info, m, patch)) if plan.omit_mask else None

    def frames(name: str, x: tf.Tensor) -> tf.Tensor:
        if output_dtype not in ("float32", "bfloat16", "float16"):
            return x  # the stored integers; dequantized on the device
        scale = float(np.iinfo(read.features[name].np_dtype).max)
        y = as_float(x, scale, mean, std)
        y = resize_frames(y, resize) if resize else y
        return y if output_dtype == "float32" else tf.cast(y, output_dtype)

    def other(name: str, x: tf.Tensor) -> tf.Tensor:
        if name in read.feature_decoders and name != output.MASK:
            return x  # a volume, already in output_dtype
        if x.dtype == tf.string or mask_dtype is None:
            return x
        return tf.cast(x, mask_dtype)

    def finish(batch: Mapping[str, tf.Tensor]):
        out = {n: (frames(n, batch[n]) if n in read.videos else batch[n]) for n in read.names}
        if inputs is None:
            return out
        kept = [n for n in inputs if not (mask_dtype is None and n == output.MASK)]
        xs = [out[n] if n in read.videos else other(n, out[n]) for n in kept]
        if len(kept) < len(inputs) and full_mask is not None:
            with tf.control_dependencies([full_mask(out[output.MASK])]):
                xs[0] = tf.identity(xs[0])
        xs = tuple(xs)
        return (xs if len(xs) > 1 else xs[0]), out[target]

    return tf.autograph.experimental.do_not_convert(finish)


def finish_batches(ds: tf.data.Dataset, plan: LoadPlan, batch_read: BatchRead, finish: Callable) -> tf.data.Dataset:
    """Per batch: read and parse (draws in), decode every frame, augment (uint8), zero pads, finish; then prefetch.

    `ds` holds batches of draws (when `batch_read.parse` reads them) or `(features, draws)` batches
    from `examples`. Everything runs in one parallel map (lean mode: the finish last, in the
    consumer's `next()`, after one prefetched uint8 batch).
    """
    def uint8_batch(*element):
        batch, draw = (batch_read.parse(element[0]), element[0]) if len(element) == 1 else element
        batch = example_graph.decode_batch(plan.read, batch)
        # Here a batch is uint8 frames (or stored volumes) with its draws: frame crops keyed by
        # order.stream_seed(draw, rng.VIDEO_AUGMENT), volume transforms by rng.VOLUME_AUGMENT, before pads are zeroed.
        if plan.read.augments:
            batch = example_graph.augment(plan.read, batch, order.stream_seed(draw, rng.VIDEO_AUGMENT) if plan.training else None)
        if plan.augment is not None and not batch_read.augmented:
            batch = augment_volume.augment_decoded(plan.augment, batch, draw, plan.spec.output.dtype)
        return zero_pads(plan, batch, draw["valid"]) if plan.pads else batch

    uint8_batch = tf.autograph.experimental.do_not_convert(uint8_batch)
    if plan.lean:
        return ds.map(uint8_batch, num_parallel_calls=plan.read_parallelism, deterministic=plan.deterministic
                      ).prefetch(1).map(finish)
    both = tf.autograph.experimental.do_not_convert(lambda *element: finish(uint8_batch(*element)))
    return ds.map(both, num_parallel_calls=plan.read_parallelism, deterministic=plan.deterministic).prefetch(AUTOTUNE)
