"""Streaming `tf.data` input pipelines over prepared vidvol (TFDS) datasets, ready for `model.fit`.

`load(name, split, batch_size)` reads a prepared dataset with an explicit `tfds.ReadConfig` and
returns batches of `((video_or_volume, mask), target)`. The stages, in order (the slow ones
parallel, the memory-hungry ones after the shuffle):

1. files: shuffled per epoch in training (`shuffle_seed=seed`), dealt to input pipelines by FILE
   when an `input_context` is given, read by a parallel interleave of `cycle_length` files with
   `block_length=1` (each open file gives one example per turn, mixing shards before the shuffle);
   this is TFDS's own reader either way;
2. parse, two ways with the same values and (under a seed) the same order:
   - per batch (fixed-shape features, nothing per example: every fixed config): the serialized
     records are shuffled and batched, then one `tf.io.parse_example` per batch with TFDS's feature
     specs (`BatchParser`); TFDS parses each example in its own map call, which costs a tenth of
     the JPEG decoding at 64x64;
   - per example otherwise (`builder.as_dataset` with `tfds.decode.PartialDecoding`: only the
     features the output needs), e.g. for clip sampling over variable-length videos;
   encoded video frames stay a string vector either way (TFDS's own Video decoding runs a
   per-example `tf.map_fn`, which costs as much as the JPEG decoding itself at 64x64);
3. shuffle (training): over serialized or parsed, still-encoded records, with a buffer sized in
   BYTES: `shuffle_buffer_bytes // bytes_per_example`, bytes_per_example being the split's stored
   bytes per example (`info.splits[split].num_bytes / num_examples`; frames are held encoded),
   plus, for parsed records, the decoded size of the other tensors (for data without frames, the
   larger of the two), capped by the number of examples this pipeline reads;
4. clip selection (clip sampling only, per example): draw or space the clip, gather its encoded
   frames (slots past the end get an encoded black frame) and the aligned per-frame features;
5. batch (`drop_remainder` in training, so the batch dimension is static too);
6. one call per batch: decode every frame of the batch with an unrolled loop of
   `tf.io.decode_jpeg/png` (frame count and batch size are static), uint8 -> float32 in [0, 1]
   and `(x - mean) / std` in one pass (`tf.quantization.dequantize`), optional bilinear resize,
   masks -> float32; without a static batch size (evaluation) frames are decoded per example
   before batching instead;
7. `prefetch(AUTOTUNE)`.

Very large examples (a few float32 batches over `memory_budget_bytes`, e.g. fire_hrr at 540x960)
switch to a lean mode: per-example decoding with bounded parallelism, one prefetched uint8 batch,
and the float conversion last, in the consumer's `next()`, so only one float batch exists at a time.

The output structure comes from the builder's `supervised_keys` (e.g. `(("video", "mask"), "hrr")`)
with a `mask` feature added to single-input keys, so hmdb51 yields `((video, mask), label)`;
nothing in here knows a dataset's name.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Any, Callable, Mapping, Sequence

import cv2
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_parser as tfds_example_parser
from tensorflow_datasets.core import file_adapters as tfds_file_adapters
from tensorflow_datasets.core import reader as tfds_reader

from vidvol.builders import allocator
from vidvol.builders import clip_sampling

logger = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE
# Example shuffle buffer, in bytes of parsed (still encoded) examples.
DEFAULT_SHUFFLE_BUFFER_BYTES = 256 * 2**20
# Files read at once: enough parallel readers for the decode threads and for mixing shards, few
# enough that each open file's read buffer and in-flight examples stay small (TFDS's default is 16).
MAX_CYCLE_LENGTH = 16
# Frames decoded by one unrolled call (a whole batch when it fits); longer sequences use tf.map_fn.
MAX_UNROLLED_FRAMES = 2048
# Default memory budget of one pipeline's buffers: this fraction of physical memory, at most the cap.
DEFAULT_MEMORY_FRACTION = 0.25
DEFAULT_MEMORY_CAP_BYTES = 16 * 2**30
# Lean memory mode when this many float32 batches would not fit the memory budget.
LEAN_FLOAT_BATCHES = 4
_FRAME_FORMATS = ("jpeg", "png")


class DatasetNotPreparedError(FileNotFoundError):
    """The dataset (config) has not been built into the data directory."""


class ShardingError(ValueError):
    """More input pipelines than shard files: some pipelines would read nothing."""


class _EncodedFrames(tfds.decode.Decoder):
    """Keeps a Video feature's encoded frames as one string vector (TFDS would `tf.map_fn` over it)."""

    @property
    def dtype(self):
        return tf.string

    def decode_example(self, serialized_example):
        return serialized_example

    def decode_batch_example(self, serialized_example):
        return serialized_example


# ----------------------------------------------------------------------------------------------
# Builder and features


def get_builder(name: str | tfds.core.DatasetBuilder, data_dir: str | os.PathLike | None = None) -> tfds.core.DatasetBuilder:
    """The prepared builder for `name` ("hmdb51" or "hmdb51/split1_20x64x64"), or `name` itself."""
    if isinstance(name, tfds.core.DatasetBuilder):
        builder = name
    else:
        builder = tfds.builder(name, data_dir=None if data_dir is None else os.fspath(data_dir))
    if not builder.is_prepared():
        raise DatasetNotPreparedError(
            f"{builder.data_dir}: dataset {builder.info.full_name} is not prepared there; build it first, e.g. "
            f"`tfds build {builder.name}/{builder.builder_config.name if builder.builder_config else ''} "
            "--imports vidvol --manual_dir DIR --data_dir DATA_DIR`"
        )
    return builder


def is_encoded_video(feature: tfds.features.FeatureConnector) -> bool:
    """True for a Video feature stored as per-frame JPEG/PNG strings (decoded by this loader)."""
    return isinstance(feature, tfds.features.Video) and getattr(feature.feature, "encoding_format", None) in _FRAME_FORMATS


def supervised_keys(info: tfds.core.DatasetInfo, inputs: str | Sequence[str] | None = None, target: str | None = None) -> tuple[tuple[str, ...], str]:
    """Input feature names and target name: the builder's supervised_keys, plus `mask` for a single input."""
    features = info.features
    keys = info.supervised_keys
    if inputs is None or target is None:
        if not keys or len(keys) != 2:
            raise ValueError(f"{info.full_name}: no (inputs, target) supervised_keys; pass inputs= and target=")
    if inputs is None:
        first = keys[0]
        inputs = tuple(first) if isinstance(first, (tuple, list)) else (first,)
        if len(inputs) == 1 and "mask" in features and inputs[0] != "mask":
            inputs = inputs + ("mask",)
    elif isinstance(inputs, str):
        inputs = (inputs,)
    target = keys[1] if target is None else target
    if not isinstance(target, str):
        raise ValueError(f"{info.full_name}: target must be one feature name, got {target!r}")
    names = tuple(inputs) + (target,)
    unknown = [n for n in names if n not in features]
    if unknown:
        raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(features)}")
    return tuple(inputs), target


def per_frame_features(features: tfds.features.FeaturesDict, video: str, names: Sequence[str]) -> tuple[str, ...]:
    """Features among `names` with one entry per frame of `video` (same leading dimension), e.g. mask, hrr."""
    length = features[video].shape[0]
    out = []
    for name in names:
        feature = features[name]
        if name == video or is_encoded_video(feature) or not isinstance(feature, tfds.features.Tensor):
            continue
        if len(feature.shape) >= 1 and feature.shape[0] == length:
            out.append(name)
    return tuple(out)


def _static_bytes(shape: Sequence[int | None], dtype: Any) -> int:
    """Bytes of a tensor of static `shape` (0 when a dimension is unknown)."""
    if any(d is None for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


# ----------------------------------------------------------------------------------------------
# Sizing rules


def shuffle_buffer_size(bytes_per_example: float, num_examples: int, buffer_bytes: int = DEFAULT_SHUFFLE_BUFFER_BYTES) -> int:
    """Examples the shuffle buffer holds: `buffer_bytes // bytes_per_example`, within [1, num_examples]."""
    if buffer_bytes <= 0:
        raise ValueError(f"shuffle_buffer_bytes must be > 0, got {buffer_bytes}")
    count = int(buffer_bytes // max(1.0, float(bytes_per_example)))
    return max(1, min(count, max(1, int(num_examples))))


def default_cycle_length(num_files: int, num_cpus: int | None = None) -> int:
    """Files interleaved at once: two per core, at least 2, at most MAX_CYCLE_LENGTH and the file count."""
    cpus = num_cpus or _num_cpus()
    return max(1, min(int(num_files), MAX_CYCLE_LENGTH, max(2, 2 * cpus)))


def _num_cpus() -> int:
    """Cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_memory_budget() -> int:
    """Bytes one pipeline's buffers may use by default: a quarter of physical memory, at most 16 GiB."""
    try:
        import psutil  # pylint: disable=g-import-not-at-top

        total = psutil.virtual_memory().total
    except (ImportError, OSError):
        total = 8 * 2**30
    return int(min(DEFAULT_MEMORY_CAP_BYTES, total * DEFAULT_MEMORY_FRACTION))


def worker_file_count(num_files: int, input_context: tf.distribute.InputContext | None) -> int:
    """Shard files one input pipeline reads when files are dealt round-robin (TFDS's `shard`)."""
    if input_context is None:
        return num_files
    n, i = int(input_context.num_input_pipelines), int(input_context.input_pipeline_id)
    return len(range(i, num_files, n))


def check_shards(full_name: str, split: str, num_files: int, input_context: tf.distribute.InputContext | None) -> None:
    """Raises ShardingError when there are fewer shard files than input pipelines, with the fix."""
    if input_context is None:
        return
    pipelines = int(input_context.num_input_pipelines)
    if pipelines > 1 and num_files < pipelines:
        dataset, _, config = full_name.partition("/")
        config = config.rsplit("/", 1)[0]
        raise ShardingError(
            f"{full_name} split {split!r} is stored in {num_files} shard file(s) but {pipelines} input pipelines "
            f"read it by file, so {pipelines - num_files} would read nothing. Rebuild with at least {pipelines} "
            f"shards: `tfds build {dataset}/{config} --imports vidvol --num_shards {pipelines} --manual_dir DIR "
            "--data_dir DATA_DIR --overwrite` (the vidvol writer honours --num_shards), or use fewer pipelines."
        )


# ----------------------------------------------------------------------------------------------
# Frame decoding


def decode_frames(encoded: tf.Tensor, count: int, feature: tfds.features.Video) -> tf.Tensor:
    """Decodes `count` encoded frames (string vector) to (count, H, W, C) with static shape."""
    _, height, width, channels = feature.shape
    fmt = feature.feature.encoding_format
    dtype = tf.as_dtype(feature.np_dtype)

    def one(data: tf.Tensor) -> tf.Tensor:
        if fmt == "jpeg":
            return tf.io.decode_jpeg(data, channels=channels)
        return tf.io.decode_png(data, channels=channels, dtype=dtype)

    if count <= MAX_UNROLLED_FRAMES:
        frames = tf.stack([one(encoded[i]) for i in range(count)])
    else:
        spec = tf.TensorSpec((height, width, channels), dtype)
        frames = tf.map_fn(one, encoded, fn_output_signature=spec, parallel_iterations=16)
    return tf.ensure_shape(frames, (count, height, width, channels))


def _zero_invalid(values: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """`values` with the slots where `valid` is False set to zero (valid has values' leading dims)."""
    extra = values.shape.rank - valid.shape.rank
    mask = tf.reshape(valid, tf.concat([tf.shape(valid), tf.ones([extra], tf.int32)], 0))
    return tf.where(mask, values, tf.zeros_like(values))


def _gather_padded(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`tf.gather(values, indices)` that also works on an empty `values` (reads a zero row)."""
    pad = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.gather(tf.concat([values, pad], 0), indices)


# ----------------------------------------------------------------------------------------------
# Parsing a batch of serialized examples at once


class BatchParser:
    """Parses a batch of serialized examples with one `tf.io.parse_example` call, as TFDS would one by one.

    TFDS's reader parses each example in its own `parse_single_example` map call (its own TODO says a
    batched `parse_example` would be faster); measured on hmdb51's 20x64x64 clips that is ~60 us of
    CPU per clip, a tenth of the JPEG decoding. For features whose stored shape is fully known, one
    call per batch gives the same tensors for a fifth of that. The feature specs are TFDS's own
    (`ExampleParser(...).flat_feature_specs` of the features' serialized info), the values go
    through the features' own `decode_batch_example`, except Video frames (kept encoded, decoded by
    this loader).
    """

    def __init__(self, features: tfds.features.FeaturesDict, names: Sequence[str], videos: Sequence[str]):
        self.features, self.names, self.videos = features, tuple(names), tuple(videos)
        self.infos = {n: features[n].get_serialized_info() for n in self.names}
        for name, info in self.infos.items():
            parts = info.values() if isinstance(info, dict) else [info]
            if not all(isinstance(p, tfds.features.TensorInfo) and None not in p.shape for p in parts):
                raise ValueError(f"feature {name!r}: serialized as {info}; only fixed-shape tensors parse per batch")
        self.specs = tfds_example_parser.ExampleParser(self.infos).flat_feature_specs

    @classmethod
    def for_features(cls, features: tfds.features.FeaturesDict, names: Sequence[str], videos: Sequence[str]) -> "BatchParser | None":
        """A parser when every feature read has a fixed stored shape, else None (parse per example)."""
        try:
            return cls(features, names, videos)
        except ValueError:
            return None

    def parse(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        """Serialized examples (B,) -> dict of batched features (encoded frames stay strings)."""
        parsed = tf.io.parse_example(serialized, self.specs)

        def restore(key: str, info: tfds.features.TensorInfo) -> tf.Tensor:
            value = parsed[key]
            return value if value.dtype == info.tf_dtype else tf.cast(value, info.tf_dtype)

        out = {}
        for name in self.names:
            info = self.infos[name]
            if isinstance(info, dict):  # a feature stored as several tensors ("name/part" in the Example)
                value = {part: restore(f"{name}/{part}", i) for part, i in info.items()}
            else:
                value = restore(name, info)
            out[name] = value if name in self.videos else self.features[name].decode_batch_example(value)
        return out

def read_serialized(builder: tfds.core.DatasetBuilder, split: str, read_config: tfds.ReadConfig, shuffle_files: bool) -> tf.data.Dataset:
    """Serialized examples of a split, read exactly as `builder.as_dataset` reads them before parsing.

    Same TFDS function (file shuffling with `shuffle_seed`, `input_context` sharding by file,
    interleave, cardinality, options), so the serialized stream matches the parsed stream of
    `builder.as_dataset(split, shuffle_files=..., read_config=read_config)` element for element.
    """
    info = builder.info
    file_format = read_config.file_format or info.file_format or tfds_file_adapters.DEFAULT_FILE_FORMAT
    return tfds_reader._read_files(  # pylint: disable=protected-access  (TFDS's reader before its parse map)
        file_instructions=info.splits[split].file_instructions,
        read_config=read_config,
        shuffle_files=shuffle_files,
        disable_shuffling=info.disable_shuffling,
        file_format=tfds_file_adapters.FileFormat.from_value(file_format),
    )


# ----------------------------------------------------------------------------------------------
# The pipeline


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What one pipeline reads and how it turns examples into model inputs."""

    features: tfds.features.FeaturesDict
    names: tuple[str, ...]  # features read, in output order for dict outputs
    videos: tuple[str, ...]  # encoded Video features this loader decodes
    per_frame: tuple[str, ...]  # features aligned with the first video's frames
    clip: clip_sampling.ClipSpec | None
    training: bool
    decode_in_batch: bool  # decode a whole (static-size) batch of frames in one call, else per example

    @property
    def clip_shape(self) -> tuple[int, ...]:
        """Leading dims of a decoded video: (T,), (N, T) for several eval clips, () without clips."""
        if self.clip is None:
            return ()
        if not self.training and self.clip.eval_clips > 1:
            return (self.clip.eval_clips, self.clip.clip_length)
        return (self.clip.clip_length,)

    def frame_dims(self, video: str) -> tuple[int, ...]:
        """Leading (time) dims of one decoded example of `video`."""
        return self.clip_shape or (self.features[video].shape[0],)

    def decoded_bytes(self) -> int:
        """Bytes of one decoded example (frames uint8, other tensors as stored)."""
        total = 0
        for name in self.names:
            feature = self.features[name]
            if name in self.videos:
                total += _static_bytes(self.frame_dims(name) + tuple(feature.shape[1:]), feature.np_dtype)
            elif isinstance(feature, tfds.features.Tensor):
                total += _static_bytes(feature.shape, feature.np_dtype)
        return total

    def float_bytes(self, resize: Sequence[int] | None = None) -> int:
        """Bytes of one example in the output batch (frames float32, optionally resized)."""
        total = 0
        for name in self.names:
            feature = self.features[name]
            if name in self.videos:
                h, w = resize if resize else feature.shape[1:3]
                total += _static_bytes(self.frame_dims(name) + (h, w, feature.shape[3]), np.float32)
            elif isinstance(feature, tfds.features.Tensor):
                total += _static_bytes(feature.shape, np.float32)
        return total

    def buffer_example_bytes(self, stored_bytes: float) -> float:
        """Bytes one parsed example holds in the shuffle buffer: encoded frames plus decoded tensors.

        Frames stay encoded (about the stored size); other tensors are already decoded there and
        may be larger than stored (a zlib mask). Without frames, the larger of the two sizes.
        """
        decoded = sum(
            _static_bytes(self.features[n].shape, self.features[n].np_dtype)
            for n in self.names
            if n not in self.videos and isinstance(self.features[n], tfds.features.Tensor)
        )
        return stored_bytes + decoded if self.videos else max(stored_bytes, decoded)

    def decoders(self) -> tfds.decode.PartialDecoding:
        """Parse only the features read; keep video frames encoded."""
        return tfds.decode.PartialDecoding(
            {name: True for name in self.names}, decoders={v: _EncodedFrames() for v in self.videos}
        )

    @property
    def needs_example_map(self) -> bool:
        """Whether a per-example step runs before batching (clip selection or per-example decoding)."""
        return bool(self.videos) and (self.clip is not None or not self.decode_in_batch)

    def select(self, example: Mapping[str, tf.Tensor], seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Per example: picks the clip's encoded frames and per-frame values; decodes them unless batched."""
        out = dict(example)
        if self.clip is not None:
            num_frames = tf.shape(example[self.videos[0]])[0]
            if self.training:
                indices, valid = clip_sampling.random_clip(num_frames, self.clip, seed)
            else:
                indices, valid = clip_sampling.even_clips(num_frames, self.clip)
                if self.clip.eval_clips == 1:
                    indices, valid = indices[0], valid[0]
            flat_valid = tf.reshape(valid, [-1])
            for v in self.videos:
                # Slots past the end get an encoded all-zero frame: cheap to decode, exactly 0 after it.
                picked = _gather_padded(example[v], tf.reshape(indices, [-1]))
                out[v] = tf.where(flat_valid, picked, tf.constant(blank_frame(self.features[v])))
            for name in self.per_frame:
                out[name] = _zero_invalid(_gather_padded(example[name], indices), valid)
        if not self.decode_in_batch:
            for v in self.videos:
                out[v] = self._decode(v, out[v], ())
        return out

    def _decode(self, video: str, encoded: tf.Tensor, batch_dims: tuple[int, ...]) -> tf.Tensor:
        """Encoded frames (batch_dims + (count,)) -> uint8 (batch_dims + frame_dims + (H, W, C))."""
        feature = self.features[video]
        dims = tuple(batch_dims) + self.frame_dims(video)
        count = int(np.prod(dims))
        frames = decode_frames(tf.reshape(encoded, [count]), count, feature)
        return tf.reshape(frames, dims + tuple(feature.shape[1:]))

    def decode_batch(self, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Per batch (static batch size): decodes every video's frames in one call."""
        out = dict(batch)
        if self.decode_in_batch:
            for v in self.videos:
                out[v] = self._decode(v, batch[v], (int(batch[v].shape[0]),))
        return out


@functools.lru_cache(maxsize=None)
def _blank(fmt: str, shape: tuple[int, int, int], dtype: str) -> bytes:
    """Encoded all-zero frame of one format, size and dtype."""
    ok, data = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", np.zeros(shape, dtype))
    if not ok:
        raise ValueError(f"cannot encode a blank {fmt} frame of shape {shape} and dtype {dtype}")
    return data.tobytes()


def blank_frame(feature: tfds.features.Video) -> bytes:
    """An encoded all-zero frame in a Video feature's format and size (decodes to exactly 0)."""
    return _blank(feature.feature.encoding_format, tuple(feature.shape[1:]), np.dtype(feature.np_dtype).name)


def _plan(
    info: tfds.core.DatasetInfo,
    names: Sequence[str],
    clip: clip_sampling.ClipSpec | None,
    training: bool,
    static_batch: int | None,
) -> _Plan:
    """Checks the requested features against the builder and decides what is decoded where."""
    features = info.features
    videos = tuple(n for n in names if is_encoded_video(features[n]))
    per_frame = per_frame_features(features, videos[0], names) if videos else ()
    if clip is not None and not videos:
        raise ValueError(f"{info.full_name}: clip_length is set but none of {list(names)} is a video feature")
    for v in videos:
        if features[v].shape[0] is None and clip is None:
            raise ValueError(
                f"{info.full_name}: feature {v!r} stores a variable number of frames per example "
                f"(shape {features[v].shape}); pass clip_length=T (e.g. 16) to sample fixed-length clips"
            )
    plan = _Plan(features, tuple(names), videos, per_frame, clip, training, decode_in_batch=False)
    if static_batch and videos:
        frames = static_batch * sum(int(np.prod(plan.frame_dims(v))) for v in videos)
        plan = dataclasses.replace(plan, decode_in_batch=frames <= MAX_UNROLLED_FRAMES)
    return plan


def _as_float(x: tf.Tensor, scale_max: float | None, mean: Any, std: Any) -> tf.Tensor:
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


def _resize_frames(x: tf.Tensor, size: tuple[int, int]) -> tf.Tensor:
    """Bilinear resize of the last three (H, W, C) dims of a float tensor of any rank >= 3."""
    channels = x.shape[-1]
    flat = tf.reshape(x, tf.concat([[-1], tf.shape(x)[-3:]], 0))
    resized = tf.image.resize(flat, size, method="bilinear")
    out = tf.reshape(resized, tf.concat([tf.shape(x)[:-3], [size[0], size[1], channels]], 0))
    out.set_shape(x.shape[:-3].concatenate([size[0], size[1], channels]))
    return out


def _finisher(
    plan: _Plan,
    inputs: tuple[str, ...] | None,
    target: str | None,
    mean: Any,
    std: Any,
    resize: tuple[int, int] | None,
    mask_dtype: tf.DType,
) -> Callable[[Mapping[str, tf.Tensor]], Any]:
    """The per-batch conversion: frames to normalized float32, inputs to float32, output structure."""

    def frames(name: str, x: tf.Tensor) -> tf.Tensor:
        scale = float(np.iinfo(plan.features[name].np_dtype).max)
        y = _as_float(x, scale, mean, std)
        return _resize_frames(y, resize) if resize else y

    def finish(batch: Mapping[str, tf.Tensor]):
        out = {n: (frames(n, batch[n]) if n in plan.videos else batch[n]) for n in plan.names}
        if inputs is None:
            return out
        xs = tuple(
            out[n] if (n in plan.videos or out[n].dtype == tf.string) else tf.cast(out[n], mask_dtype)
            for n in inputs
        )
        return (xs if len(xs) > 1 else xs[0]), out[target]

    return finish


def load(
    name: str | tfds.core.DatasetBuilder,
    split: str,
    batch_size: int,
    *,
    data_dir: str | os.PathLike | None = None,
    training: bool | None = None,
    seed: int | None = None,
    clip_length: int | None = None,
    clip_stride: int = 1,
    eval_clips: int = 1,
    resize: tuple[int, int] | None = None,
    mean: float | Sequence[float] = 0.0,
    std: float | Sequence[float] = 1.0,
    inputs: str | Sequence[str] | None = None,
    target: str | None = None,
    features: Sequence[str] | None = None,
    input_context: tf.distribute.InputContext | None = None,
    shuffle_buffer_bytes: int = DEFAULT_SHUFFLE_BUFFER_BYTES,
    cycle_length: int | None = None,
    drop_remainder: bool | None = None,
    repeat: bool = False,
    deterministic: bool | None = None,
    memory_budget_bytes: int | None = None,
    mask_dtype: tf.DType = tf.float32,
    parse_per_batch: bool = True,
) -> tf.data.Dataset:
    """Batched `((video_or_volume, mask), target)` dataset of a prepared vidvol dataset, streamed from its shards.

    Args:
      name: registered dataset name with optional config ("hmdb51/split1_20x64x64"), or a builder.
      split: TFDS split, slices allowed ("train", "test", "train[:80%]").
      batch_size: examples per batch (per input pipeline when `input_context` is given).
      data_dir: TFDS data directory holding the prepared dataset.
      training: shuffle files and examples, draw random clips, drop the last partial batch.
        Default: True for splits whose name starts with "train".
      seed: makes file order, example order and random clips reproducible (and the pipeline
        deterministic); each epoch still differs from the last.
      clip_length: sample clips of this many frames at read time (required for variable-length
        videos such as hmdb51's `all_*` configs); None decodes every stored frame.
      clip_stride: step between a clip's frames in the stored video.
      eval_clips: evaluation clips per video (evenly spaced, stacked on a new axis after the batch
        axis when > 1; the middle clip when 1).
      resize: (height, width) to resize frames to, bilinear, after normalization.
      mean, std: per-channel (or scalar) normalization applied to frames scaled to [0, 1].
      inputs, target: override the builder's supervised keys (e.g. inputs=("video", "mask")).
      features: return dicts with just these features instead of the supervised tuple.
      input_context: `tf.distribute.InputContext`; each pipeline reads a disjoint set of shard files.
      shuffle_buffer_bytes: memory for the example shuffle buffer (training), in bytes.
      cycle_length: shard files read in parallel; default `default_cycle_length`.
      drop_remainder: default `training`.
      repeat: repeat forever (each pass reshuffled).
      deterministic: keep element order in parallel stages; default True with a seed or at evaluation.
      memory_budget_bytes: cap for tf.data's autotuned buffers and for the decode parallelism of
        very large examples; default a quarter of physical memory (at most 16 GiB).
      mask_dtype: dtype of the non-frame inputs (masks) in the supervised output.
      parse_per_batch: when every feature read has a fixed stored shape and nothing runs per
        example, shuffle the serialized records and parse each batch with one call (`BatchParser`;
        same values and, under a seed, the same order as TFDS's per-example parse). False always
        reads through `builder.as_dataset`.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    builder = get_builder(name, data_dir)
    allocator.warn_if_not_pooled()
    info = builder.info
    training = split.split("[")[0].strip().startswith("train") if training is None else bool(training)
    drop_remainder = training if drop_remainder is None else drop_remainder
    deterministic = (seed is not None or not training) if deterministic is None else deterministic
    clip = clip_sampling.ClipSpec(clip_length, clip_stride, eval_clips) if clip_length is not None else None
    if features is not None:
        names, in_names, tgt = tuple(features), None, None
        unknown = [n for n in names if n not in info.features]
        if unknown:
            raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(info.features)}")
    else:
        in_names, tgt = supervised_keys(info, inputs, target)
        names = tuple(dict.fromkeys(in_names + (tgt,)))
    plan = _plan(info, names, clip, training, batch_size if drop_remainder else None)

    split_info = info.splits[split]
    instructions = split_info.file_instructions
    check_shards(info.full_name, split, len(instructions), input_context)
    my_files = worker_file_count(len(instructions), input_context)
    mine = instructions[int(input_context.input_pipeline_id) :: int(input_context.num_input_pipelines)] if input_context else instructions
    my_examples = sum(f.take for f in mine)
    cycle = cycle_length or default_cycle_length(my_files)
    budget = memory_budget_bytes or default_memory_budget()

    # Memory: decoded examples are uint8; the float32 batch is 4x that. When a few float batches
    # would not fit the budget, go lean: decode per example with bounded parallelism, prefetch one
    # uint8 batch, and convert to float32 last, in the consumer's own `next()` call.
    element_bytes = plan.decoded_bytes()
    float_batch_bytes = plan.float_bytes(resize) * batch_size
    lean = LEAN_FLOAT_BATCHES * float_batch_bytes > budget
    if lean:
        plan = dataclasses.replace(plan, decode_in_batch=False)
    parser = BatchParser.for_features(info.features, plan.names, plan.videos) if parse_per_batch and not plan.needs_example_map else None

    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.ram_budget = int(budget)
    if lean:
        # tf.data's default graph rewrites (map+batch fusion, map parallelization, injected
        # prefetches) would keep extra float batches alive: measured +1.4 to +2 GiB at 161x540x960.
        options.experimental_optimization.apply_default_optimizations = False
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = False
    read_config = tfds.ReadConfig(
        options=options,
        try_autocache=False,
        shuffle_seed=seed,
        interleave_cycle_length=cycle,
        interleave_block_length=1,
        input_context=input_context,
        skip_prefetch=True,
        num_parallel_calls_for_decode=AUTOTUNE,
        num_parallel_calls_for_interleave_files=AUTOTUNE,
        assert_cardinality=not repeat,
    )
    if parser is not None:  # serialized records, parsed per batch below
        ds = read_serialized(builder, split, read_config, shuffle_files=training)
    else:
        ds = builder.as_dataset(split=split, shuffle_files=training, decoders=plan.decoders(), read_config=read_config)

    random_clips = training and clip is not None
    if random_clips:
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
        ds = tf.data.Dataset.zip((ds, seeds))
    if training:
        stored = split_info.num_bytes / max(1, split_info.num_examples)
        held = stored if parser is not None else plan.buffer_example_bytes(stored)
        buffer = shuffle_buffer_size(held, my_examples, shuffle_buffer_bytes)
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    else:
        buffer = 0
    if repeat:
        ds = ds.repeat()

    decode_calls = _decode_parallelism(element_bytes, budget) if lean else AUTOTUNE
    if plan.needs_example_map:
        select = (lambda ex, s: plan.select(ex, s)) if random_clips else plan.select
        select = tf.autograph.experimental.do_not_convert(select)
        ds = ds.map(select, num_parallel_calls=decode_calls, deterministic=deterministic)
    elif random_clips:
        ds = ds.map(lambda ex, s: ex)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    finish = _finisher(plan, in_names, tgt, mean, std, tuple(resize) if resize else None, mask_dtype)
    finish = tf.autograph.experimental.do_not_convert(finish)
    if lean:
        # Examples decoded ahead with bounded parallelism, one uint8 batch prefetched, the float
        # conversion in the consumer's own next(): a single float batch exists at a time.
        ds = ds.prefetch(1).map(finish)
    else:
        parse = parser.parse if parser is not None else (lambda batch: batch)
        both = tf.autograph.experimental.do_not_convert(lambda batch: finish(plan.decode_batch(parse(batch))))
        ds = ds.map(both, num_parallel_calls=AUTOTUNE, deterministic=deterministic).prefetch(AUTOTUNE)
    ds = ds.with_options(options)
    logger.info(
        "%s %s: %d examples in %d files (this pipeline), cycle_length %d, shuffle buffer %d examples, "
        "parse per %s, decode %s, batch %d (%.0f MiB as float32)%s%s",
        info.full_name, split, my_examples, my_files, cycle, buffer, "batch" if parser is not None else "example",
        "per batch" if plan.decode_in_batch else f"per example, parallelism {decode_calls}", batch_size,
        float_batch_bytes / 2**20, ", lean memory mode" if lean else "", ", training" if training else "",
    )
    return ds


def _decode_parallelism(element_bytes: int, budget: int) -> int:
    """Examples decoded at once in lean mode: as many as cores, while twice their bytes fit a quarter of the budget."""
    if element_bytes <= 0:
        return AUTOTUNE
    return max(1, min(_num_cpus(), int((budget // 4) // (2 * element_bytes))))


def distribute(
    strategy: tf.distribute.Strategy, name: str | tfds.core.DatasetBuilder, split: str, global_batch_size: int, **kwargs: Any
) -> tf.distribute.DistributedDataset:
    """`load` per input pipeline of `strategy`, each reading its own shard files (per-replica batches)."""

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
    """Every target of a split as one array, parsing nothing else (no frame is decoded or copied).

    The order is that of `load(..., training=False)`, so predictions line up with it.
    """
    builder = get_builder(name, data_dir)
    info = builder.info
    if target is None:
        _, target = supervised_keys(info)
    if target not in info.features:
        raise ValueError(f"{info.full_name}: unknown feature {target!r}; expected one of {sorted(info.features)}")
    num_files = len(info.splits[split].file_instructions)
    read_config = tfds.ReadConfig(
        try_autocache=False, interleave_cycle_length=default_cycle_length(num_files), interleave_block_length=1,
        skip_prefetch=True,
    )
    ds = builder.as_dataset(
        split=split, shuffle_files=False, read_config=read_config,
        decoders=tfds.decode.PartialDecoding({target: True}),
    )
    ds = ds.map(lambda ex: ex[target]).batch(4096).prefetch(AUTOTUNE)
    parts = [np.asarray(b) for b in tfds.as_numpy(ds)]
    if not parts:
        shape = tuple(d or 0 for d in info.features[target].shape)
        return np.zeros((0,) + shape, info.features[target].np_dtype)
    return np.concatenate(parts)


def example_bytes(name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None) -> float:
    """Stored bytes per example of a split (`num_bytes / num_examples`), the unit of the shuffle buffer rule."""
    info = get_builder(name, data_dir).info.splits[split]
    return info.num_bytes / max(1, info.num_examples)


__all__ = [
    "DEFAULT_SHUFFLE_BUFFER_BYTES",
    "DatasetNotPreparedError",
    "MAX_CYCLE_LENGTH",
    "ShardingError",
    "decode_frames",
    "default_cycle_length",
    "default_memory_budget",
    "distribute",
    "example_bytes",
    "get_builder",
    "load",
    "load_labels",
    "shuffle_buffer_size",
    "supervised_keys",
]

