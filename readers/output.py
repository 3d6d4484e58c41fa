"""What `vidvol.load` hands the model: the dtype of frames and volumes, the mask, and how to dequantize on the device.

`Output.dtype` takes float32 (default), bfloat16 / float16, or the stored integers (uint8 frames,
int16 volumes: `output_dtype_name`), which `Dequantization` turns into the float32 output on the
accelerator; `Output.mask_dtype` chooses the mask's dtype, or leaves it out (`mask_dtype_name`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import features as vidvol_features
from vidvol.readers import frames

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
INTEGER_DTYPES = ("uint8", "int16")
OUTPUT_DTYPES = FLOAT_DTYPES + INTEGER_DTYPES
MASK_DTYPES = ("float32", "bfloat16", "float16", "uint8", "bool")
MASK = "mask"  # the feature `Output(mask_dtype=None)` leaves out


def _dtype_name(value: Any) -> str | None:
    """'float32' for "float32", tf.float32, np.float32 or np.dtype('float32'); None when it names no dtype."""
    if isinstance(value, str):
        return value.strip().lower()
    try:
        return tf.as_dtype(value).name
    except TypeError:
        return None


def output_dtype_name(value: Any, field: str = "output_dtype") -> str:
    """The canonical name of an output dtype; ValueError naming `field` and listing the choices for anything else.

    `Output.dtype` (`vidvol.Output`, in `spec=vidvol.ReadSpec(output=...)`) applies to frames and
    volumes; other features keep their own dtype:

    - "float32" (default): model-ready floats on the host (frames scaled to [0, 1], then mean/std).
    - "bfloat16" / "float16": the same numbers cast on the host (half the bytes to the device;
      float16 is exact for whole numbers up to 2048, bfloat16 up to 256).
    - the stored integers: "uint8" for video frames, "int16" for MRI volumes stored as int16 (every
      scanner-valued config). Nothing is converted on the host; `dequantize_params` gives the
      `scale` and `offset` with which `x * scale + offset` equals the float32 output, and
      `vidvol.layers.Dequantize` applies them on the accelerator.

    Args:
      value: a dtype name, or a tf/np dtype.
      field: the field named in the error.

    Returns:
      The dtype's name, one of `OUTPUT_DTYPES`.
    """
    name = _dtype_name(value)
    if name not in OUTPUT_DTYPES:
        raise ValueError(f"{field} must be one of {list(OUTPUT_DTYPES)} (or the matching tf/np dtype), got {value!r}")
    return name


def mask_dtype_name(value: Any, field: str = "mask_dtype") -> str | None:
    """The canonical name of a mask dtype (None: leave the mask out); ValueError listing the choices for anything else.

    `Output.mask_dtype`: float32 (default), bfloat16, float16, uint8 or bool; None leaves the `mask`
    input out. Omitting it is for data whose every voxel (frame) is real; the loader checks that per
    batch (`full_mask_check`) and stops with an error naming the fix when a mask has a 0 (padding),
    so nothing is silently lost.

    Args:
      value: a dtype name, a tf/np dtype, or None.
      field: the field named in the error.

    Returns:
      The dtype's name, one of `MASK_DTYPES`, or None.
    """
    if value is None:
        return None
    name = _dtype_name(value)
    if name not in MASK_DTYPES:
        raise ValueError(f"{field} must be one of {list(MASK_DTYPES)} or None (leave the mask out), got {value!r}")
    return name


def is_volume(feature: tfds.features.FeatureConnector) -> bool:
    """Whether a feature is an MRI-style volume whose output dtype `Output.dtype` chooses."""
    return isinstance(feature, vidvol_features.WholeNumberVolume)


def stored_dtype(feature: tfds.features.FeatureConnector) -> str:
    """The integer dtype a data feature is stored as: the frames' dtype (uint8) or int16 for volumes."""
    if is_volume(feature):
        return "int16"
    return np.dtype(feature.np_dtype).name


def data_features(info: tfds.core.DatasetInfo, names: Sequence[str]) -> tuple[str, ...]:
    """The features among `names` that `Output.dtype` applies to: encoded videos and volumes."""
    return tuple(n for n in names if frames.is_encoded_video(info.features[n]) or is_volume(info.features[n]))


def check_output_dtype(info: tfds.core.DatasetInfo, names: Sequence[str], dtype: str) -> None:
    """ValueError, with the choices this dataset has, when an integer Output.dtype does not fit what is read.

    (That an integer dtype takes no resize, mean or std is the spec's own rule: `ReadSpec`.)
    """
    if dtype in FLOAT_DTYPES:
        return
    data = data_features(info, names)
    if not data:
        raise ValueError(f"{info.full_name}: Output.dtype={dtype!r} applies to video frames and volumes, and none of "
                         f"{list(names)} is one; use Output(dtype='float32')")
    for name in data:
        stored = stored_dtype(info.features[name])
        if stored != dtype:
            raise ValueError(
                f"{info.full_name}: feature {name!r} is stored as {stored}, so Output.dtype must be one of "
                f"{list(FLOAT_DTYPES) + [stored]}, got {dtype!r}")


class StoredAs(tfds.decode.Decoder):
    """Decodes a `WholeNumberVolume` straight to one dtype (int16 as stored, or a float cast of it)."""

    def __init__(self, dtype: str):
        super().__init__()
        self.out = tf.as_dtype(dtype)

    @property
    def dtype(self) -> tf.DType:
        return self.out

    def decode_example(self, serialized_example):
        return self.feature.decode_example_as(serialized_example, self.out)

    def decode_batch_example(self, serialized_example):
        return self.feature.decode_batch_example_as(serialized_example, self.out)


class MaskAs(tfds.decode.Decoder):
    """Decodes a `BoxMask` straight to the mask dtype (one full-size pass), or keeps its boxes (mask left out)."""

    def __init__(self, dtype: tf.DType | None):
        super().__init__()
        self.out = dtype

    @property
    def dtype(self) -> tf.DType:
        return tf.int64 if self.out is None else self.out

    def decode_example(self, serialized_example):
        return self.decode_batch_example(serialized_example[tf.newaxis])[0]

    def decode_batch_example(self, serialized_example):
        if self.out is None:
            return serialized_example
        return self.feature.dense_as(serialized_example, self.out)


def feature_decoders(info: tfds.core.DatasetInfo, names: Sequence[str], dtype: str, mask_dtype: tf.DType | None, *,
                     decode_mask: bool, mask_boxes: bool = False) -> dict[str, tfds.decode.Decoder]:
    """Decoders for the volumes (to `dtype`) among `names`, and for a box `mask` input (to `mask_dtype`).

    `mask_boxes`: a box `mask` stays its boxes whatever it becomes later (volume augmentation moves
    the box with the patch and makes it dense at the patch shape: `augment_volume`).
    """
    out: dict[str, tfds.decode.Decoder] = {}
    for name in names:
        feature = info.features[name]
        if is_volume(feature):
            out[name] = StoredAs(dtype)
        elif (decode_mask or mask_boxes) and name == MASK and isinstance(feature, vidvol_features.BoxMask):
            out[name] = MaskAs(None if mask_boxes else mask_dtype)
    return out


def full_mask_check(info: tfds.core.DatasetInfo, mask: tf.Tensor, shape: Sequence[int] | None = None) -> tf.Operation:
    """An assertion that every mask of a batch is all ones (`mask` dense, or a `BoxMask`'s boxes over `shape`, default
    the feature's: a patch's boxes are checked against the patch)."""
    feature = info.features[MASK]
    if isinstance(feature, vidvol_features.BoxMask) and mask.dtype == tf.int64:  # the stored boxes (MaskAs(None))
        full = (feature if shape is None else vidvol_features.BoxMask(shape)).is_full(mask)
    else:
        full = tf.reduce_all(tf.equal(mask, tf.ones([], mask.dtype)))
    return tf.debugging.Assert(full, [
        f"vidvol.load with Output(mask_dtype=None) on {info.full_name}: an example has padding (its mask is not all "
        "ones), so the mask cannot be left out; pass Output(mask_dtype=tf.uint8) (or tf.bool, tf.float32) and use the mask"])


@dataclasses.dataclass(frozen=True)
class Dequantization:
    """How to turn one feature of `vidvol.load` under an `Output.dtype` into the float32 output, on the device.

    `x * scale + offset` (per channel when `scale`/`offset` are tuples) equals the float32 output
    within float rounding. `layer()` is the Keras layer that does it (`vidvol.layers.Dequantize`).
    """

    feature: str
    output_dtype: str
    stored_dtype: str
    scale: float | tuple[float, ...]
    offset: float | tuple[float, ...]

    def layer(self, dtype: str = "float32", name: str | None = None):
        """A `vidvol.layers.Dequantize` applying this scale and offset, computing in `dtype`."""
        from vidvol import layers  # Keras only when asked for

        return layers.Dequantize(self.scale, self.offset, dtype=dtype, name=name)

    def apply_np(self, x: np.ndarray) -> np.ndarray:
        """The float32 values of `x` with NumPy (tests, checks)."""
        return (np.asarray(x, np.float32) * np.asarray(self.scale, np.float32)
                + np.asarray(self.offset, np.float32)).astype(np.float32)


def per_channel(values: Any) -> float | tuple[float, ...]:
    """A float, or a tuple of floats for per-channel values."""
    arr = np.asarray(values, np.float64)
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr.reshape(-1))


def dequantization(info: tfds.core.DatasetInfo, feature: str, output_dtype: Any = None, *, mean: Any = 0.0,
                   std: Any = 1.0) -> Dequantization:
    """The scale and offset of one video or volume feature under `output_dtype` (None: its stored dtype)."""
    if feature not in info.features:
        raise ValueError(f"{info.full_name}: unknown feature {feature!r}; expected one of {sorted(info.features)}")
    connector = info.features[feature]
    if not (frames.is_encoded_video(connector) or is_volume(connector)):
        raise ValueError(f"{info.full_name}: feature {feature!r} is neither a video nor a volume; "
                         f"output_dtype applies to {list(data_features(info, list(info.features)))}")
    stored = stored_dtype(connector)
    dtype = stored if output_dtype is None else output_dtype_name(output_dtype)
    if dtype in INTEGER_DTYPES and dtype != stored:
        raise ValueError(f"{info.full_name}: feature {feature!r} is stored as {stored}, so output_dtype must be one of "
                         f"{list(FLOAT_DTYPES) + [stored]}, got {dtype!r}")
    mean_arr, std_arr = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if np.any(std_arr == 0):
        raise ValueError(f"std must be non-zero, got {std!r}")
    if dtype in FLOAT_DTYPES or is_volume(connector):
        # Floats come out finished; a volume's stored int16 values are its float values.
        if is_volume(connector) and not (np.all(mean_arr == 0) and np.all(std_arr == 1)):
            raise ValueError(f"{info.full_name}: mean/std normalize video frames; volume {feature!r} takes none")
        return Dequantization(feature, dtype, stored, 1.0, 0.0)
    top = float(np.iinfo(np.dtype(stored)).max)  # frames scaled to [0, 1], then (x - mean) / std
    return Dequantization(feature, dtype, stored, per_channel(1.0 / (top * std_arr)),
                          per_channel(-mean_arr / std_arr))
