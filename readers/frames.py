"""Video frames at read time: encoded ones kept as strings until their batch decodes, raw ones parsed a batch at a time.

Large RGB JPEG frames decode in one Python call per batch (`JpegBatchDecode`: the pixels of
`tf.io.decode_jpeg`, bit for bit), each frame straight into its slot of the batch; other frames
through TensorFlow's decode ops, raw (uncompressed uint8) ones with one `tf.io.decode_raw`
(`decode_raw_batch`). `host_jpeg_decode` says which way a feature's frames go.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import cv2
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import jpeg
from vidvol.readers import host_calls

JPEG_DECODE_ENV = "VIDVOL_JPEG_DECODE"
# Frames at least this large decode through JpegBatchDecode by default. Smaller ones stay with TensorFlow's ops: a
# small frame decodes so fast that the Python loop's GIL hand-offs between frames cost what the faster decode saves,
# while a large frame's decode time dwarfs them (chosen from paired runs of both ways, VIDVOL_JPEG_DECODE=tf vs host,
# at 64x64 and 540x960; measured rates belong in benchmarks/RESULTS.md, not here).
HOST_DECODE_MIN_PIXELS = 256 * 256

# Frames decoded by one unrolled call (a whole batch when it fits); longer sequences use tf.map_fn.
MAX_UNROLLED_FRAMES = 2048
FRAME_FORMATS = ("jpeg", "png")


def is_encoded_video(feature: tfds.features.FeatureConnector) -> bool:
    """True for a Video feature stored as per-frame JPEG/PNG strings (decoded by the read side)."""
    return isinstance(feature, tfds.features.Video) and getattr(feature.feature, "encoding_format", None) in FRAME_FORMATS


def is_raw_video(feature: tfds.features.FeatureConnector) -> bool:
    """True for uint8 frames stored uncompressed: a Tensor feature of fixed shape (T, H, W, C), C 1 or 3."""
    if type(feature) is not tfds.features.Tensor:  # not Video, ClassLabel...
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


class JpegBatchDecode(host_calls.HostCall):
    """Python body (`tf.numpy_function`, stateless): a vector of JPEG frames decoded into one uint8 (count, H, W, 3) array.

    Each frame is decoded by libjpeg-turbo (simplejpeg; the GIL is let go meanwhile) straight into
    its slot of a pooled batch buffer, which becomes the tensor without a copy: no per-frame ops or
    tensors, no stacking copy. Fast integer IDCT and fancy upsampling, as `tf.io.decode_jpeg`'s
    defaults (TFDS's decode): the same pixels, bit for bit. A frame simplejpeg refuses (or whose
    size is not the feature's) is decoded by `tf.io.decode_jpeg`, which gives its pixels or its error.
    """

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(d) for d in shape)
        self.frame_bytes = int(np.prod(self.shape))
        super().__init__()

    def run(self, encoded: np.ndarray) -> np.ndarray:
        encoded = np.asarray(encoded)  # also a tensor, called directly
        out = host_calls.pool.take(len(encoded) * self.frame_bytes).reshape((len(encoded),) + self.shape)
        for slot, frame in zip(out, encoded):
            decode_jpeg_into(slot, frame)
        return out


decode_jpeg_into = jpeg.decode_jpeg_into


def simplejpeg_decodes(feature: tfds.features.Video) -> bool:
    """Whether `decode_jpeg_into` serves `feature`'s frames: RGB uint8 JPEG, simplejpeg installed."""
    return jpeg.decodes_rgb(feature.feature.encoding_format, feature.shape[-1], feature.np_dtype)


def host_jpeg_decode(feature: tfds.features.Video) -> bool:
    """Whether `feature`'s frames decode through `JpegBatchDecode` (RGB JPEG, simplejpeg installed, not turned off).

    Only frames of at least `HOST_DECODE_MIN_PIXELS` go that way by default; `VIDVOL_JPEG_DECODE=tf`
    (or `host`) in the environment forces one way for every size.

    Args:
      feature: a video feature.

    Returns:
      True: `JpegBatchDecode`; False: TensorFlow's decode ops.
    """
    choice = os.environ.get(JPEG_DECODE_ENV, "").lower()
    if choice == "tf" or not simplejpeg_decodes(feature) or None in feature.shape[1:3]:
        return False
    return choice == "host" or int(feature.shape[1]) * int(feature.shape[2]) >= HOST_DECODE_MIN_PIXELS


def decode_frame_strings(encoded: tf.Tensor, count: int, feature: tfds.features.Video) -> tf.Tensor:
    """Decodes `count` encoded frames (string vector) to (count, H, W, C) with static shape."""
    _, height, width, channels = feature.shape
    fmt = feature.feature.encoding_format
    dtype = tf.as_dtype(feature.np_dtype)
    if host_jpeg_decode(feature):
        frames = tf.numpy_function(JpegBatchDecode((height, width, channels)), [encoded], tf.uint8, stateful=False,
                                   name="vidvol_decode_jpeg_batch")
        frames.set_shape((count, height, width, channels))
        return frames

    def one(data: tf.Tensor) -> tf.Tensor:
        if fmt == "jpeg":
            return tf.io.decode_jpeg(data, channels=channels)
        return tf.io.decode_png(data, channels=channels, dtype=dtype)

    if count <= MAX_UNROLLED_FRAMES:
        frames = tf.stack([one(data) for data in tf.unstack(encoded, num=count)])  # one Unpack, not count slices
    else:
        spec = tf.TensorSpec((height, width, channels), dtype)
        frames = tf.map_fn(one, encoded, fn_output_signature=spec, parallel_iterations=16)
    return tf.ensure_shape(frames, (count, height, width, channels))


@functools.cache
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
    """Encoded frames -> (len(indices), H, W, C) in NumPy, the pixels `vidvol.load` and `tfds.load` give.

    RGB JPEG frames through `decode_jpeg_into` (simplejpeg, TensorFlow's fast IDCT: bit for bit);
    others (PNG, grey; JPEG without simplejpeg: TensorFlow's decode) through the feature's own per-frame
    NumPy decode. `indices` pick the frames (all of them by default);
    slots where `valid` is False stay zero, as `vidvol.load` zeroes clip slots past a video's end.
    Used by the random-access readers.
    """
    picks = np.arange(len(encoded)) if indices is None else np.asarray(indices).reshape(-1)
    keep = np.ones(len(picks), bool) if valid is None else np.asarray(valid, bool).reshape(-1)
    _, height, width, channels = feature.shape
    out = np.zeros((len(picks), height, width, channels), feature.np_dtype)
    image = feature.feature
    rgb_jpeg = simplejpeg_decodes(feature)
    for slot, (index, ok) in enumerate(zip(picks, keep)):
        if ok and rgb_jpeg:
            decode_jpeg_into(out[slot], encoded[int(index)])
        elif ok:
            out[slot] = image.decode_example_np(encoded[int(index)])
    return out
