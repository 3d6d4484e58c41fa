"""Video frames at read time: encoded ones kept as strings through the shuffle and decoded a batch at a
time; raw (uncompressed uint8) ones parsed a batch at a time with one `tf.io.decode_raw`."""

from __future__ import annotations

import functools
from typing import Sequence

import cv2
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

# Frames decoded by one unrolled call (a whole batch when it fits); longer sequences use tf.map_fn.
MAX_UNROLLED_FRAMES = 2048
FRAME_FORMATS = ("jpeg", "png")


def is_encoded_video(feature: tfds.features.FeatureConnector) -> bool:
    """True for a Video feature stored as per-frame JPEG/PNG strings (decoded by the read side)."""
    return isinstance(feature, tfds.features.Video) and getattr(feature.feature, "encoding_format", None) in FRAME_FORMATS


def is_raw_video(feature: tfds.features.FeatureConnector) -> bool:
    """True for uint8 frames stored uncompressed: a Tensor feature of fixed shape (T, H, W, C), C 1 or 3."""
    if type(feature) is not tfds.features.Tensor:  # pylint: disable=unidiomatic-typecheck  (not Video, ClassLabel...)
        return False
    shape = tuple(feature.shape)
    return np.dtype(feature.np_dtype) == np.uint8 and len(shape) == 4 and shape[-1] in (1, 3) and None not in shape


def stored_as_bytes(feature: tfds.features.Tensor) -> bool:
    """Whether a Tensor feature stores its values as one bytes string per example (`encoding='bytes'`)."""
    info = feature.get_serialized_info()
    return isinstance(info, tfds.features.TensorInfo) and info.shape == () and np.dtype(info.np_dtype) == np.object_


def decode_raw_batch(serialized: tf.Tensor, feature: tfds.features.Tensor) -> tf.Tensor:
    """A batch of raw frame stacks: (B,) bytes -> (B, T, H, W, C) uint8 in one `tf.io.decode_raw` (no per-example map)."""
    shape = tuple(int(d) for d in feature.shape)
    values = tf.io.decode_raw(serialized, tf.uint8)  # (B, T*H*W*C): every stored value has the same length
    out = tf.reshape(values, (-1,) + shape)
    out.set_shape(serialized.shape[:1].concatenate(feature.shape))
    return out


class KeepEncoded(tfds.decode.Decoder):
    """Keeps a Video feature's encoded frames as one string vector (TFDS would `tf.map_fn` over it).

    Also under NumPy decoding (`tfds.data_source`): the frames stay an array of encoded strings, so a
    random-access reader decodes only the frames of the clip it samples (`decode_frames_np`).
    """

    @property
    def dtype(self):
        return tf.string

    def decode_example(self, serialized_example):
        return serialized_example

    def decode_batch_example(self, serialized_example):
        return serialized_example

    def decode_example_np(self, serialized_example):
        return serialized_example

    def decode_batch_example_np(self, serialized_example):
        return serialized_example


def decode_frame_strings(encoded: tf.Tensor, count: int, feature: tfds.features.Video) -> tf.Tensor:
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


def decode_frames_np(
    encoded: Sequence[bytes], feature: tfds.features.Video, indices: Sequence[int] | np.ndarray | None = None,
    valid: np.ndarray | None = None,
) -> np.ndarray:
    """Encoded frames -> (len(indices), H, W, C) with NumPy (TFDS's own per-frame NumPy decode, OpenCV).

    `indices` pick the frames (all of them by default); slots where `valid` is False stay zero, as
    `vidvol.load` zeroes clip slots past a video's end. Used by the random-access readers.
    """
    picks = np.arange(len(encoded)) if indices is None else np.asarray(indices).reshape(-1)
    keep = np.ones(len(picks), bool) if valid is None else np.asarray(valid, bool).reshape(-1)
    _, height, width, channels = feature.shape
    out = np.zeros((len(picks), height, width, channels), feature.np_dtype)
    image = feature.feature
    for slot, (index, ok) in enumerate(zip(picks, keep)):
        if ok:
            out[slot] = image.decode_example_np(encoded[int(index)])
    return out
