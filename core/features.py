"""TFDS feature connectors that store volumes compactly and decode videos fast, to the documented tensors.

`VideoFrames` (TFDS's `Video`, decoded in one graph), `WholeNumberVolume` (float32, stored as int16
where lossless) and `BoxMask` (a box mask stored as its bounds) decode per example (`tfds.load`), per
batch (`vidvol.load`'s batch parser) and with NumPy alone (`decode_example_np`: `tfds.data_source`,
Grain, PyTorch). Why storage decides MRI read speed: the mri_volumes card, "Storage".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

from vidvol.core import tfds_api
from vidvol.core import jpeg

INT16_MIN, INT16_MAX = np.iinfo(np.int16).min, np.iinfo(np.int16).max
# Frames decoded by one unrolled graph (per video, or per batch of videos); more go through tf.map_fn.
MAX_UNROLLED_FRAMES = 2048
# Largest all-ones mask batch a traced graph keeps to hand out for every full batch (`BoxMask.dense_as`).
SHARED_ONES_BYTES = 256 << 20


class _FixedShapeFeature(tfds.features.FeatureConnector):
    """A feature of one fixed shape, saved in features.json as just that shape."""

    def __init__(self, shape: Sequence[int], *, doc: Any = None):
        super().__init__(doc=doc)
        self._shape = tuple(int(d) for d in shape)
        if not self._shape or min(self._shape) < 1:
            raise ValueError(f"shape must be positive integers, got {shape!r}")

    @classmethod
    def from_json_content(cls, value: dict[str, Any], doc: Any = None) -> _FixedShapeFeature:
        return cls(shape=value["shape"], doc=doc)

    def to_json_content(self) -> dict[str, Any]:
        return {"shape": list(self._shape)}


class WholeNumberVolume(_FixedShapeFeature):
    """float32 tensor of a fixed shape, stored as int16 when that is lossless, else as float32.

    float32 to its users, stored as little-endian int16 when every value is a whole number in int16
    range (lossless, half the bytes), else as float32 bytes; chosen per example. Figures:
    benchmarks/RESULTS.md.
    """

    def get_tensor_info(self) -> tfds.features.TensorInfo:
        return tfds.features.TensorInfo(shape=self._shape, dtype=np.float32)

    def get_serialized_info(self) -> dict[str, tfds.features.TensorInfo]:
        return {
            "data": tfds.features.TensorInfo(shape=(), dtype=np.bytes_),  # raw little-endian values
            "int16": tfds.features.TensorInfo(shape=(), dtype=np.int64),  # 1: int16 values, 0: float32
        }

    @staticmethod
    def is_whole_int16(values: np.ndarray) -> bool:
        """Whether every value is a whole number in int16 range (so int16 storage is exact)."""
        if values.size == 0:
            return True
        lo, hi = float(np.min(values)), float(np.max(values))
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo < INT16_MIN or hi > INT16_MAX:
            return False
        return bool(np.array_equal(values, np.rint(values)))

    def encode_example(self, example_data: Any) -> dict[str, Any]:
        values = np.asarray(example_data, dtype=np.float32)
        if values.shape != self._shape:
            raise ValueError(f"volume of shape {values.shape}, expected {self._shape}")
        if self.is_whole_int16(values):
            return {"data": values.astype("<i2").tobytes(), "int16": 1}
        return {"data": values.astype("<f4").tobytes(), "int16": 0}

    def decode_example(self, tfexample_data: dict[str, tf.Tensor]) -> tf.Tensor:
        data, int16 = tfexample_data["data"], tfexample_data["int16"]
        values = tf.cond(
            tf.equal(int16, 1),
            lambda: tf.cast(tf.io.decode_raw(data, tf.int16), tf.float32),
            lambda: tf.io.decode_raw(data, tf.float32),
        )
        return tf.reshape(values, self._shape)

    def decode_example_np(self, example_data: dict[str, Any]) -> np.ndarray:
        """The float32 volume from its stored bytes, with NumPy only (random-access reads, no TF graph)."""
        dtype = np.dtype("<i2") if int(example_data["int16"]) == 1 else np.dtype("<f4")
        values = np.frombuffer(example_data["data"], dtype)
        if values.size != int(np.prod(self._shape)):
            raise ValueError(f"stored volume holds {values.size} values, expected {self._shape}")
        return values.astype(np.float32).reshape(self._shape)  # astype copies: a writable array

    def decode_batch_example(self, tfexample_data: dict[str, tf.Tensor]) -> tf.Tensor:
        """A batch in one `decode_raw` when its examples share a storage dtype (else one by one)."""
        return self.decode_batch_example_as(tfexample_data, tf.float32)

    def decode_example_as(self, tfexample_data: dict[str, tf.Tensor], dtype: tf.DType) -> tf.Tensor:
        """One volume as `dtype`: float32/float16/bfloat16 (a cast of the stored values) or int16 (as stored).

        int16 needs the example stored as int16 (whole numbers); one stored as float32 stops the read
        with an InvalidArgumentError naming the fix (a float output dtype).
        """
        return self.decode_batch_example_as(tf.nest.map_structure(lambda t: t[tf.newaxis], tfexample_data), dtype)[0]

    def decode_batch_example_as(self, tfexample_data: dict[str, tf.Tensor], dtype: tf.DType) -> tf.Tensor:
        """A batch as `dtype` in one `decode_raw` per storage dtype; see `decode_example_as`."""
        dtype = tf.as_dtype(dtype)
        data, int16 = tfexample_data["data"], tfexample_data["int16"]
        shape = tf.concat([tf.shape(data), self._shape], 0)
        if dtype == tf.int16:
            check = tf.debugging.Assert(tf.reduce_all(tf.equal(int16, 1)), [
                "a volume is stored as float32 (its values are not all whole numbers in int16 range: a "
                "normalized or resampled config), so it cannot be returned as int16; use "
                "output_dtype float32 (or bfloat16, float16) for this dataset"])
            with tf.control_dependencies([check]):
                return tf.reshape(tf.io.decode_raw(data, tf.int16), shape)

        def decode(stored: tf.DType) -> tf.Tensor:
            values = tf.io.decode_raw(data, stored)
            return tf.reshape(values if stored == dtype else tf.cast(values, dtype), shape)

        def one_by_one() -> tf.Tensor:
            spec = tf.TensorSpec(self._shape, dtype)
            return tf.map_fn(lambda e: tf.cast(self.decode_example(e), dtype), {"data": data, "int16": int16},
                             fn_output_signature=spec)

        return tf.case(
            [(tf.reduce_all(tf.equal(int16, 1)), lambda: decode(tf.int16)),
             (tf.reduce_all(tf.equal(int16, 0)), lambda: decode(tf.float32))],
            default=one_by_one,
        )


class BoxMask(_FixedShapeFeature):
    """0/1 uint8 mask of a fixed shape that is one axis-aligned box, stored as start/stop per axis.

    Crop/pad masks are such boxes; any other mask is refused at build time with the reason.
    """

    def get_tensor_info(self) -> tfds.features.TensorInfo:
        return tfds.features.TensorInfo(shape=self._shape, dtype=np.uint8)

    def get_serialized_info(self) -> tfds.features.TensorInfo:
        return tfds.features.TensorInfo(shape=(len(self._shape), 2), dtype=np.int64)

    def box_of(self, mask: np.ndarray) -> np.ndarray:
        """(ndim, 2) start/stop per axis of a 0/1 box mask; ValueError when the mask is not one box."""
        mask = np.asarray(mask)
        if mask.shape != self._shape:
            raise ValueError(f"mask of shape {mask.shape}, expected {self._shape}")
        if not np.isin(mask, (0, 1)).all():
            raise ValueError("mask values must be 0 or 1")
        on = mask.astype(bool)
        box = np.zeros((mask.ndim, 2), np.int64)
        if on.any():
            for axis in range(mask.ndim):
                hit = np.flatnonzero(on.any(axis=tuple(a for a in range(mask.ndim) if a != axis)))
                box[axis] = hit[0], hit[-1] + 1
        if int(on.sum()) != int(np.prod(box[:, 1] - box[:, 0])):
            raise ValueError(
                f"mask is not one axis-aligned box ({int(on.sum())} ones inside the bounding box "
                f"{box.tolist()}); BoxMask stores crop/pad masks only"
            )
        return box

    def encode_example(self, example_data: Any) -> np.ndarray:
        return self.box_of(example_data)

    def dense(self, boxes: tf.Tensor) -> tf.Tensor:
        """(B, ndim, 2) boxes -> (B,) + shape uint8 masks (the outer product of one 0/1 range per axis)."""
        return self.dense_as(boxes, tf.uint8)

    def dense_as(self, boxes: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """(B, ndim, 2) boxes -> (B,) + shape masks of `dtype` (the outer AND of one range per axis).

        A batch whose boxes all cover the whole shape (crops: every voxel real) is all ones: inside a
        graph with a static batch size (a `vidvol.load` pipeline), one all-ones tensor made when the
        graph is traced and handed out for every such batch (tensors are immutable, so sharing it is
        invisible; nothing is written per batch), else one fill. Otherwise the AND is formed as bool
        and cast once.
        """
        dtype = tf.as_dtype(dtype)
        batch = boxes.shape[0] if boxes.shape.rank else None
        shared = None
        if batch is not None and tf.inside_function() and (
                batch * int(np.prod(self._shape)) * dtype.size <= SHARED_ONES_BYTES):
            with tf.init_scope(), tf.device("/cpu:0"):  # once, eagerly, on the host; the graph captures it
                shared = tf.ones((batch,) + self._shape, dtype)

        def from_boxes() -> tf.Tensor:
            ndim, out = len(self._shape), None
            for axis, size in enumerate(self._shape):
                r = tf.range(size, dtype=tf.int64)
                inside = (r >= boxes[:, axis, 0:1]) & (r < boxes[:, axis, 1:2])  # (B, size)
                target = [-1] + [1] * ndim
                target[axis + 1] = size
                inside = tf.reshape(inside, target)
                out = inside if out is None else out & inside
            return out if dtype == tf.bool else tf.cast(out, dtype)

        def full() -> tf.Tensor:
            return shared if shared is not None else tf.ones(tf.concat([tf.shape(boxes)[:1], self._shape], 0), dtype)

        out = tf.cond(self.is_full(boxes), full, from_boxes)
        out.set_shape(boxes.shape[:1].concatenate(self._shape))
        return out

    def is_full(self, boxes: tf.Tensor) -> tf.Tensor:
        """Whether every (ndim, 2) box of a batch covers the whole shape (its mask is all ones)."""
        full = tf.constant([[0, n] for n in self._shape], tf.int64)
        return tf.reduce_all(tf.equal(tf.cast(boxes, tf.int64), full))

    def decode_example(self, tfexample_data: tf.Tensor) -> tf.Tensor:
        return self.dense(tfexample_data[tf.newaxis])[0]

    def decode_example_np(self, example_data: Any) -> np.ndarray:
        """The dense uint8 mask from its stored box, with NumPy only (random-access reads, no TF graph)."""
        box = np.asarray(example_data, np.int64).reshape(len(self._shape), 2)
        mask = np.zeros(self._shape, np.uint8)
        mask[tuple(slice(int(lo), int(hi)) for lo, hi in box)] = 1
        return mask

    def decode_batch_example(self, tfexample_data: tf.Tensor) -> tf.Tensor:
        return self.dense(tfexample_data)


class _Frame(tfds.features.Image):
    """One frame of a `VideoFrames`: TFDS's Image, whose sequences decode without `tf.map_fn`."""

    def decode_frame(self, data: tf.Tensor) -> tf.Tensor:
        """One encoded frame -> (H, W, C), the kernel `tf.image.decode_image` runs for this format."""
        channels = self.shape[-1] or 0
        dtype = np.dtype(self.np_dtype)
        if self.encoding_format == "jpeg" and dtype == np.uint8:
            frame = tf.io.decode_jpeg(data, channels=channels)
        elif self.encoding_format == "png" and dtype in (np.uint8, np.uint16):
            frame = tf.io.decode_png(data, channels=channels, dtype=tf.as_dtype(dtype))
        else:  # any other format/dtype TFDS's Image supports: its own decoder
            return super().decode_example(data)
        frame.set_shape(self.shape)
        return frame

    def decode_example(self, tfexample_data: tf.Tensor) -> tf.Tensor:
        return self.decode_frame(tfexample_data)

    def decode_example_np(self, example: bytes) -> np.ndarray:
        """One encoded frame -> (H, W, C) with NumPy only (`tfds.data_source`): the pixels `decode_example` gives.

        RGB uint8 JPEG through `core.jpeg` (libjpeg-turbo with `tf.io.decode_jpeg`'s defaults: bit for
        bit); other frames through TFDS's Image (OpenCV), which PNG decodes exactly too.
        """
        if jpeg.decodes_rgb(self.encoding_format, self.shape[-1], self.np_dtype):
            return jpeg.decode_jpeg(example)
        return super().decode_example_np(example)

    def decode_batch_example(self, tfexample_data: tf.Tensor) -> tf.Tensor:
        """(N,) encoded frames -> (N, H, W, C): one decode op per frame when N is static, else TFDS's map_fn."""
        encoded = tf.convert_to_tensor(tfexample_data)
        count = encoded.shape[0] if encoded.shape.rank == 1 else None
        if count is None or not 0 < count <= MAX_UNROLLED_FRAMES:
            return super().decode_batch_example(encoded)  # variable length: TFDS's tf.map_fn
        return tf.stack([self.decode_frame(data) for data in tf.unstack(encoded, num=count)])


class VideoFrames(tfds.features.Video):
    """`tfds.features.Video` whose fixed number of frames decodes fast, with the same stored bytes and tensors.

    TFDS's `Video` decodes an example's frames in a `tf.map_fn` (a while loop with tensor arrays),
    about half of what `tfds.load` spends on a 20-frame 64x64 clip. Here each frame gets its own
    `tf.io.decode_jpeg`/`decode_png` op in one graph (the frame count is static), the kernel TFDS's
    Image runs, so the frames out are identical and plain `tfds.load` streams at close to the JPEG
    decode limit. In NumPy (`tfds.data_source`) JPEG frames decode with `tf.io.decode_jpeg`'s pixels
    too (`core.jpeg`), so `tfds.data_source` gives `tfds.load`'s frames. Stored exactly as `Video`
    stores them (one encoded image per frame), so shards written with either class read with either;
    features.json names this class, and `tfds.builder_from_directory` imports it from
    `vidvol.core.features`.

    `decode_batch_example` decodes a batch of videos (B, T) of encoded frames in one call, e.g. after
    `tfds.load(..., decoders={"video": tfds.decode.SkipDecoding()})` and `.batch(B)`. Variable-length
    videos (shape (None, H, W, C)) decode as TFDS's Video does.
    """

    def __init__(self, shape=None, encoding_format: str = "png", ffmpeg_extra_args: Sequence[str] = (),
                 use_colormap: bool = False, dtype: Any = np.uint8, doc: Any = None):
        shape = tuple(shape) if shape else None
        if shape is not None and len(shape) != 4:
            raise ValueError(f"Video shape should be of rank 4 (frames, height, width, channels), got {shape}")
        # TFDS's Image with the fast sequence decode, made as TFDS's Video makes its Image (without TF's dtype)
        frame = _Frame(shape=shape[1:] if shape else None, dtype=dtype, encoding_format=encoding_format,
                       use_colormap=use_colormap)
        tfds_api.init_video(self, frame, length=shape[0] if shape else None, encoding_format=encoding_format,
                            ffmpeg_extra_args=ffmpeg_extra_args, doc=doc)

    @classmethod
    def from_video(cls, video: tfds.features.Video) -> VideoFrames:
        """The `VideoFrames` reading what a TFDS `Video` feature wrote (same shape, format, dtype)."""
        image = video.feature
        return cls(video.shape, encoding_format=image.encoding_format, dtype=image.np_dtype,
                   use_colormap=image.use_colormap, ffmpeg_extra_args=tfds_api.ffmpeg_args(video),
                   doc=video.doc)

    def decode_batch_example(self, tfexample_data: tf.Tensor) -> tf.Tensor:
        """(B, T) encoded frames -> (B, T, H, W, C); one unrolled decode of all B x T frames when both are static."""
        encoded = tf.convert_to_tensor(tfexample_data)
        frame = self.feature
        if encoded.shape.rank == 2 and encoded.shape.is_fully_defined() and 0 < encoded.shape.num_elements() <= MAX_UNROLLED_FRAMES:
            frames = frame.decode_batch_example(tf.reshape(encoded, [-1]))
            dims = [int(d) for d in encoded.shape]
            if frame.shape and None not in frame.shape:
                return tf.reshape(frames, dims + list(frame.shape))
            return tf.reshape(frames, tf.concat([dims, tf.shape(frames)[1:]], 0))
        spec = tf.TensorSpec(self.shape, tf.as_dtype(self.np_dtype))
        return tf.map_fn(self.decode_example, encoded, fn_output_signature=spec)  # per video, each unrolled


def with_fast_videos(features: tfds.features.FeaturesDict) -> tfds.features.FeaturesDict:
    """`features` with each top-level TFDS `Video` replaced by the `VideoFrames` that reads the same bytes.

    For datasets prepared before `VideoFrames` (their features.json names TFDS's `Video`).
    """
    if not any(type(f) is tfds.features.Video for f in features.values()):
        return features
    return tfds.features.FeaturesDict(
        {k: VideoFrames.from_video(f) if type(f) is tfds.features.Video else f for k, f in features.items()},
        doc=features.doc,
    )
