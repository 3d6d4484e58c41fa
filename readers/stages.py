"""The named stages of `vidvol.load`: read -> shuffle -> select clips -> batch/parse -> decode -> finish.

Each stage takes and returns a `tf.data.Dataset` (or returns the per-batch function a stage maps),
and follows the decisions of the pipeline's `plan.LoadPlan`, so `load` reads as the sequence of
them; lean mode replaces the last stage.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import tfds_api
from vidvol.readers import direct_volumes
from vidvol.readers import output
from vidvol.readers import shards
from vidvol.readers.batch_parser import BatchParser
from vidvol.readers.plan import LoadPlan
from vidvol.readers.plan import ReadPlan

AUTOTUNE = tf.data.AUTOTUNE


def read(
    builder: tfds.core.DatasetBuilder, split: str, plan: LoadPlan, read_config: tfds.ReadConfig
) -> tuple[tf.data.Dataset, BatchParser | direct_volumes.DirectParser | None]:
    """Records of the split in TFDS's order, and the parser of their batches (None: parsed per example here).

    Volumes straight from the shard files where the plan asks for it and `direct_volumes` finds the
    shards fit (the other features parsed per batch); TFRecord shards otherwise by
    `shards.read_records` (a damaged file fails naming itself), anything else by TFDS's own reader.
    """
    names, decoders = plan.read.names, plan.read.feature_decoders
    direct = direct_volumes.plan_direct(builder, split, names, read_config) if plan.direct_reads else None
    if direct is not None:
        volume, indexes = direct
        others = [n for n in names if n != volume]
        small = BatchParser.for_features(builder.info.features, others, (), decoders) if others else None
        parser = direct_volumes.DirectParser(builder, volume, indexes, small, plan.spec.output.dtype, plan.static_batch)
        return direct_volumes.read_entries(builder, split, read_config, plan.training, indexes), parser
    parser, shuffle_files = plan.parser, plan.training
    if shards.checked_reader_applies(builder, read_config):
        if parser is not None:
            return shards.read_records(builder, split, read_config, shuffle_files=shuffle_files), parser
        ds = shards.read_examples(builder, split, read_config, shuffle_files=shuffle_files, decoders=plan.read.decoders())
        return ds, None
    if parser is not None:
        return tfds_api.read_files(builder, split, read_config, shuffle_files=shuffle_files), parser
    ds = builder.as_dataset(split=split, shuffle_files=shuffle_files, decoders=plan.read.decoders(), read_config=read_config)
    return ds, None


def attach_seeds(ds: tf.data.Dataset, seed: int | None) -> tf.data.Dataset:
    """Pairs each record with a stateless [2] seed for its clip draw (new draws every epoch)."""
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip((ds, seeds))


def shuffle(ds: tf.data.Dataset, buffer: int, seed: int | None) -> tf.data.Dataset:
    """Example shuffle over still-encoded records, reshuffled each epoch."""
    return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)


def select_clips(
    ds: tf.data.Dataset, plan: ReadPlan, with_seeds: bool, parallelism: int, deterministic: bool
) -> tf.data.Dataset:
    """Per example: the clip's encoded frames and per-frame values (decoded here unless decoded per batch)."""
    if plan.needs_example_map:
        select = (lambda ex, s: plan.select(ex, s)) if with_seeds else plan.select
        return ds.map(tf.autograph.experimental.do_not_convert(select), num_parallel_calls=parallelism, deterministic=deterministic)
    if with_seeds:
        return ds.map(lambda ex, s: ex)
    return ds


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
    full_mask = (lambda m: output.full_mask_check(plan.info, m)) if plan.omit_mask else None

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


def parse_decode_finish(
    ds: tf.data.Dataset, plan: ReadPlan, parser: BatchParser | None, finish: Callable, deterministic: bool
) -> tf.data.Dataset:
    """Per batch, in one parallel map: parse (serialized batches), decode every frame, finish; then prefetch."""
    parse = parser.parse if parser is not None else (lambda batch: batch)
    both = tf.autograph.experimental.do_not_convert(lambda batch: finish(plan.decode_batch(parse(batch))))
    return ds.map(both, num_parallel_calls=AUTOTUNE, deterministic=deterministic).prefetch(AUTOTUNE)


def finish_lean(ds: tf.data.Dataset, finish: Callable) -> tf.data.Dataset:
    """Lean mode: one uint8 batch prefetched, the float conversion in the consumer's own `next()`."""
    return ds.prefetch(1).map(finish)
