"""Read-time clip sampling: which stored frames form a fixed-length clip (graph-mode TF, static clip shapes).

A clip is `clip_length` frame indices `start, start + stride, ..., start + (clip_length - 1) * stride`.
Training draws `start` uniformly from every start whose clip fits in the video (start 0 when none
fits); evaluation takes `num_clips` evenly spaced starts from the first to the last fitting start
(the middle one when `num_clips == 1`). Slots that run past the video's end get `valid = False`
and repeat the last frame's index, so a gather stays in range and the caller zeroes them. The
functions work on index tensors only; decoding the chosen frames is the loader's job.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ClipWindow:
    """Clip length, frame stride and the number of evenly spaced clips taken at evaluation."""

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


def _clip_from_starts(starts: tf.Tensor, num_frames: tf.Tensor, spec: ClipWindow) -> tuple[tf.Tensor, tf.Tensor]:
    """Indices (..., clip_length) from start indices, clamped into range, with their validity."""
    offsets = tf.range(spec.clip_length, dtype=tf.int32) * spec.stride
    indices = tf.expand_dims(starts, -1) + offsets
    valid = indices < num_frames
    last = tf.maximum(num_frames - 1, 0)
    return tf.minimum(indices, last), valid


def max_start(num_frames: tf.Tensor, spec: ClipWindow) -> tf.Tensor:
    """Largest start index whose whole clip lies inside the video (0 when no clip fits)."""
    return tf.maximum(tf.cast(num_frames, tf.int32) - spec.span, 0)


def random_clip(num_frames: tf.Tensor, spec: ClipWindow, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One clip at a uniformly drawn start: (indices int32 (T,), valid bool (T,)); `seed` is a stateless [2] seed."""
    num_frames = tf.cast(num_frames, tf.int32)
    start = tf.random.stateless_uniform(
        [], seed=seed, minval=0, maxval=max_start(num_frames, spec) + 1, dtype=tf.int32
    )
    return _clip_from_starts(start, num_frames, spec)


def even_starts(num_frames: tf.Tensor, spec: ClipWindow) -> tf.Tensor:
    """`eval_clips` evenly spaced start indices (int32), rounded; the middle start for a single clip."""
    top = tf.cast(max_start(num_frames, spec), tf.float64)
    if spec.eval_clips == 1:
        fractions = tf.constant([0.5], tf.float64)
    else:
        fractions = tf.linspace(tf.constant(0.0, tf.float64), 1.0, spec.eval_clips)
    return tf.cast(tf.round(fractions * top), tf.int32)


def even_clips(num_frames: tf.Tensor, spec: ClipWindow) -> tuple[tf.Tensor, tf.Tensor]:
    """`eval_clips` evenly spaced clips: (indices int32 (N, T), valid bool (N, T))."""
    num_frames = tf.cast(num_frames, tf.int32)
    return _clip_from_starts(even_starts(num_frames, spec), num_frames, spec)
