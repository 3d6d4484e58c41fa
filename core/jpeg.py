"""JPEG frames decoded in NumPy with exactly the pixels `tf.io.decode_jpeg` gives (what `tfds.load` returns).

libjpeg-turbo through `simplejpeg`, with TensorFlow's defaults: the fast integer IDCT and fancy
upsampling. OpenCV (TFDS's own NumPy decoder, used by `tfds.data_source`) takes the accurate IDCT,
a few levels away on most pixels. Shared by `core.features.VideoFrames` (so `tfds.data_source`
gives `tfds.load`'s frames) and the read side (`readers.frames`: the batch decode of large frames,
the random-access readers).
"""

from __future__ import annotations

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

try:
    import simplejpeg
except ImportError:  # an install without it decodes through TensorFlow's op (same pixels, slower)
    simplejpeg = None


def decodes_rgb(encoding_format: str, channels: int | None, dtype) -> bool:
    """Whether `decode_jpeg_into` serves frames of this kind: RGB uint8 JPEG, simplejpeg installed."""
    return simplejpeg is not None and encoding_format == "jpeg" and channels == 3 and np.dtype(dtype) == np.uint8


def decode_jpeg_into(slot: np.ndarray, frame: bytes) -> None:
    """One RGB JPEG frame into `slot` (H, W, 3 uint8) with the pixels `tf.io.decode_jpeg(frame, channels=3)` gives.

    simplejpeg (fast integer IDCT, fancy upsampling: TensorFlow's defaults) decodes straight into `slot`;
    a frame it refuses, or whose size is not the slot's, goes to `tf.io.decode_jpeg` itself (its pixels,
    or its error; a size that still differs is an error naming the fix).
    """
    try:
        # Given a buffer large enough, simplejpeg decodes into it and returns a view of it.
        if simplejpeg is not None and simplejpeg.decode_jpeg(frame, "RGB", True, False, 0, 0, 1, slot).shape == slot.shape:
            return
    except ValueError:
        pass
    decoded = tf.io.decode_jpeg(frame, channels=3).numpy()
    if decoded.shape != slot.shape:
        raise ValueError(f"a stored frame decodes to {decoded.shape[:2]} pixels, the dataset's feature says "
                         f"{slot.shape[:2]}: the shards do not match this builder's config; rebuild them")
    slot[...] = decoded


def decode_jpeg(frame: bytes) -> np.ndarray:
    """One RGB JPEG frame of any size -> (H, W, 3) uint8, `tf.io.decode_jpeg(frame, channels=3)`'s pixels."""
    if simplejpeg is not None:
        try:
            return simplejpeg.decode_jpeg(frame, "RGB", True, False)
        except ValueError:
            pass
    return tf.io.decode_jpeg(frame, channels=3).numpy()
