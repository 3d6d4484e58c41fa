"""Read-time clip sampling: which stored frames form a fixed-length clip, in TF (graph mode) or NumPy.

The rules (`ClipWindow`) are written once over a small array namespace (`_TF`, `_NP`): `vidvol.load`
runs them as TF ops inside its tf.data graph (`random_clip`, `even_clips`); the random-access readers
(Grain, PyTorch) run the same rules on NumPy (`random_clip_np`, `even_clips_np`), so both sample
clips alike.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ClipWindow:
    """Clip length, frame stride and the number of evenly spaced clips taken at evaluation.

    A clip is `clip_length` frame indices `start, start + stride, ..., start + (clip_length - 1) *
    stride`. Training draws `start` uniformly from every start whose clip fits in the video (start 0
    when none fits); evaluation takes `eval_clips` evenly spaced starts from the first to the last
    fitting start (the middle one when `eval_clips == 1`). Slots that run past the video's end get
    `valid = False` and repeat the last frame's index, so a gather stays in range and the caller
    zeroes them. The functions work on index arrays only; decoding the chosen frames is the
    loader's job.
    """

    clip_length: int
    stride: int = 1
    eval_clips: int = 1

    def __post_init__(self):
        for name in ("clip_length", "stride", "eval_clips"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def span(self) -> int:
        """Number of source frames one clip covers, first to last index inclusive."""
        return (self.clip_length - 1) * self.stride + 1


# The few array operations the rules need, in TF and in NumPy (same names, same semantics: both
# round half to even, both linspace include the end point).
_TF = types.SimpleNamespace(
    int32=lambda x: tf.cast(x, tf.int32),
    arange=lambda n: tf.range(n, dtype=tf.int32),
    expand_dims=tf.expand_dims, minimum=tf.minimum, maximum=tf.maximum,
    fractions=lambda values: tf.constant(values, tf.float64),
    linspace=lambda n: tf.linspace(tf.constant(0.0, tf.float64), 1.0, n),
    float64=lambda x: tf.cast(x, tf.float64),
    round=tf.round,
)
_NP = types.SimpleNamespace(
    int32=lambda x: np.asarray(x).astype(np.int32),
    arange=lambda n: np.arange(n, dtype=np.int32),
    expand_dims=np.expand_dims, minimum=np.minimum, maximum=np.maximum,
    fractions=lambda values: np.asarray(values, np.float64),
    linspace=lambda n: np.linspace(0.0, 1.0, n, dtype=np.float64),
    float64=lambda x: np.asarray(x, np.float64),
    round=np.round,
)


def _clip_from_starts(starts: Any, num_frames: Any, spec: ClipWindow, ops=_TF) -> tuple[Any, Any]:
    """Indices (..., clip_length) from start indices, clamped into range, with their validity."""
    offsets = ops.arange(spec.clip_length) * spec.stride
    indices = ops.expand_dims(starts, -1) + offsets
    valid = indices < num_frames
    last = ops.maximum(num_frames - 1, 0)
    return ops.int32(ops.minimum(indices, last)), valid


def max_start(num_frames: Any, spec: ClipWindow, ops=_TF) -> Any:
    """Largest start index whose whole clip lies inside the video (0 when no clip fits)."""
    return ops.maximum(ops.int32(num_frames) - spec.span, 0)


def even_starts(num_frames: Any, spec: ClipWindow, ops=_TF) -> Any:
    """`eval_clips` evenly spaced start indices (int32), rounded; the middle start for a single clip."""
    top = ops.float64(max_start(num_frames, spec, ops))
    fractions = ops.fractions([0.5]) if spec.eval_clips == 1 else ops.linspace(spec.eval_clips)
    return ops.int32(ops.round(fractions * top))


def random_clip(num_frames: tf.Tensor, spec: ClipWindow, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One clip at a uniformly drawn start: (indices int32 (T,), valid bool (T,)); `seed` is a stateless [2] seed."""
    num_frames = tf.cast(num_frames, tf.int32)
    start = tf.random.stateless_uniform(
        [], seed=seed, minval=0, maxval=max_start(num_frames, spec) + 1, dtype=tf.int32
    )
    return _clip_from_starts(start, num_frames, spec)


def even_clips(num_frames: tf.Tensor, spec: ClipWindow) -> tuple[tf.Tensor, tf.Tensor]:
    """`eval_clips` evenly spaced clips: (indices int32 (N, T), valid bool (N, T))."""
    num_frames = tf.cast(num_frames, tf.int32)
    return _clip_from_starts(even_starts(num_frames, spec), num_frames, spec)


def random_clip_np(num_frames: int, spec: ClipWindow, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`random_clip` in NumPy: a start drawn uniformly by `rng`; (indices int32 (T,), valid bool (T,))."""
    num_frames = int(num_frames)
    start = np.int32(rng.integers(0, int(max_start(num_frames, spec, _NP)) + 1))
    return _clip_from_starts(start, num_frames, spec, _NP)


def even_clips_np(num_frames: int, spec: ClipWindow) -> tuple[np.ndarray, np.ndarray]:
    """`even_clips` in NumPy: (indices int32 (N, T), valid bool (N, T))."""
    num_frames = int(num_frames)
    return _clip_from_starts(even_starts(num_frames, spec, _NP), num_frames, spec, _NP)
