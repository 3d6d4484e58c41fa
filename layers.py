"""Keras layers that finish on the accelerator what `vidvol.load` leaves undone on the host.

`Dequantize(scale, offset)` turns the stored integers of `vidvol.Output(dtype="uint8"|"int16")`
into float on the device. This module imports only Keras and NumPy (no other vidvol module): the
lowest layer of the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np


def _as_config(values: Any) -> float | list[float]:
    """A scalar or per-channel list of plain floats (JSON-serializable layer config)."""
    arr = np.asarray(values, np.float64)
    if arr.ndim > 1:
        raise ValueError(f"scale/offset must be a scalar or one value per channel, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"scale/offset must be finite, got {values!r}")
    return float(arr) if arr.ndim == 0 else [float(v) for v in arr]


@keras.saving.register_keras_serializable(package="vidvol")
class Dequantize(keras.layers.Layer):
    """`cast(x) * scale + offset`: stored integers (or any numbers) to float on the device.

    The stored integers of `vidvol.load` with `vidvol.Output(dtype="uint8"|"int16")` (a quarter or
    half the bytes of float32 through the input pipeline and onto the device) become
    `x * scale + offset` in float on the device; with the scale and offset of
    `vidvol.dequantize_params(...)` that equals `vidvol.load`'s float32 output within float rounding.

        dq = vidvol.dequantize_params("hmdb51/split1_20x64x64", "uint8", mean=MEAN, std=STD, data_dir=D)
        ds = vidvol.load("hmdb51/split1_20x64x64", "train", 32, data_dir=D,
                         spec=vidvol.ReadSpec(output=vidvol.Output(dtype="uint8")))
        video = keras.Input((20, 64, 64, 3), dtype="uint8")
        x = vidvol.layers.Dequantize(dq.scale, dq.offset)(video)   # or dq.layer()

    Args:
      scale, offset: scalars, or one value per channel (the last axis), e.g. from
        `vidvol.dequantize_params(...)`.
      dtype: the layer's dtype (policy): the output dtype, e.g. "float32" (default), "bfloat16", or
        "mixed_bfloat16". The product is formed in float32 and then cast, so the numbers equal
        `vidvol.load`'s float32 output before that cast whatever the policy.
    """

    def __init__(self, scale: float | Sequence[float] = 1.0, offset: float | Sequence[float] = 0.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.scale = _as_config(scale)
        self.offset = _as_config(offset)
        self._scale = np.asarray(self.scale, np.float32)
        self._offset = np.asarray(self.offset, np.float32)
        self.supports_masking = True

    def build(self, input_shape):
        channels = input_shape[-1] if input_shape else None
        for name, value in (("scale", self._scale), ("offset", self._offset)):
            if value.ndim == 1 and channels is not None and value.shape[0] not in (1, channels):
                raise ValueError(f"Dequantize: {value.shape[0]} {name} values for inputs with {channels} channels "
                                 f"(input shape {tuple(input_shape)})")
        super().build(input_shape)

    def call(self, inputs):
        x = keras.ops.cast(inputs, "float32")
        if not np.all(self._scale == 1.0):
            x = x * keras.ops.convert_to_tensor(self._scale, "float32")
        if not np.all(self._offset == 0.0):
            x = x + keras.ops.convert_to_tensor(self._offset, "float32")
        return keras.ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "offset": self.offset}
