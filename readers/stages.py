"""The named stages of `vidvol.load`: read -> shuffle -> select clips -> batch/parse -> decode -> finish.

Each stage takes and returns a `tf.data.Dataset` (or returns the per-batch function a stage maps),
so `load` reads as the sequence of them; lean mode replaces the last stage.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import tfds_api
from vidvol.readers import shards
from vidvol.readers.batch_parser import BatchParser
from vidvol.readers.plan import ReadPlan

AUTOTUNE = tf.data.AUTOTUNE


def read(
    builder: tfds.core.DatasetBuilder, split: str, plan: ReadPlan, read_config: tfds.ReadConfig,
    shuffle_files: bool, parser: BatchParser | None,
) -> tf.data.Dataset:
    """Records of the split, serialized (parsed later, per batch) or parsed per example, in TFDS's order.

    TFRecord shards are read by `shards.read_records` (a damaged file fails naming itself), anything
    else by TFDS's own reader.
    """
    if shards.checked_reader_applies(builder, read_config):
        if parser is not None:
            return shards.read_records(builder, split, read_config, shuffle_files=shuffle_files)
        return shards.read_examples(builder, split, read_config, shuffle_files=shuffle_files, decoders=plan.decoders())
    if parser is not None:
        return tfds_api.read_files(builder, split, read_config, shuffle_files=shuffle_files)
    return builder.as_dataset(split=split, shuffle_files=shuffle_files, decoders=plan.decoders(), read_config=read_config)


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


def finisher(
    plan: ReadPlan,
    inputs: Sequence[str] | None,
    target: str | None,
    mean: Any,
    std: Any,
    resize: tuple[int, int] | None,
    mask_dtype: tf.DType,
) -> Callable[[Mapping[str, tf.Tensor]], Any]:
    """The per-batch finish: frames to normalized float32, other inputs to `mask_dtype`, output structure."""

    def frames(name: str, x: tf.Tensor) -> tf.Tensor:
        scale = float(np.iinfo(plan.features[name].np_dtype).max)
        y = as_float(x, scale, mean, std)
        return resize_frames(y, resize) if resize else y

    def finish(batch: Mapping[str, tf.Tensor]):
        out = {n: (frames(n, batch[n]) if n in plan.videos else batch[n]) for n in plan.names}
        if inputs is None:
            return out
        xs = tuple(
            out[n] if (n in plan.videos or out[n].dtype == tf.string) else tf.cast(out[n], mask_dtype)
            for n in inputs
        )
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


def lean_options(options: tf.data.Options) -> None:
    """Turns off tf.data rewrites that would keep extra float batches alive (map fusion, injected prefetch)."""
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
