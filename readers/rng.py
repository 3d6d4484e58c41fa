"""Per-example randomness as a pure function of (seed, epoch, example index, stream).

Every random choice a reader makes for one example (its place in the epoch's order, its clip, its
crop, flip or patch) is drawn from a stateless seed derived from the read's seed, the epoch, the
example's index in its split and a *stream* naming the use. Nothing random is held as state: an
iterator restored from a checkpoint, another host, or a random-access reader asked for index `i`
gets the same draws as the uninterrupted run, and streams never correlate (a clip start and a
crop of the same example are independent draws).

`example_seed` is the tf.data form (a stateless `[2]` int64 seed for `tf.random.stateless_*`);
`example_rng` the NumPy form (a `np.random.Generator`) for the random-access readers. The two
are independent generators: they give the same *distribution* of draws, not the same numbers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Stream ids: one per use of randomness. Append new uses; never renumber (it would change draws).
ORDER = 0  # the epoch's example order (a permutation of the split)
CLIP = 1  # a training clip's start frame
VIDEO_AUGMENT = 2  # crops and flips of video frames
VOLUME_AUGMENT = 3  # patches, flips, rotations and intensity changes of volumes

_GOLDEN = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64: splitmix64's increment


def _mix(x: tf.Tensor) -> tf.Tensor:
    """splitmix64's finalizer on int64 (wrapping arithmetic; logical shifts through uint64)."""
    u = tf.bitcast(x, tf.uint64)
    u = tf.bitwise.bitwise_xor(u, tf.bitwise.right_shift(u, tf.constant(30, tf.uint64))) * tf.constant(0xBF58476D1CE4E5B9, tf.uint64)
    u = tf.bitwise.bitwise_xor(u, tf.bitwise.right_shift(u, tf.constant(27, tf.uint64))) * tf.constant(0x94D049BB133111EB, tf.uint64)
    u = tf.bitwise.bitwise_xor(u, tf.bitwise.right_shift(u, tf.constant(31, tf.uint64)))
    return tf.bitcast(u, tf.int64)


def example_seed(seed, epoch, index, stream: int) -> tf.Tensor:
    """A stateless `[2]` int64 seed for one example's draws of `stream` (tensors or ints; `index` may be a vector -> `[N, 2]`)."""
    seed = tf.cast(seed, tf.int64)
    epoch = tf.cast(epoch, tf.int64)
    index = tf.cast(index, tf.int64)
    a = _mix(seed * _GOLDEN + tf.constant(stream + 1, tf.int64))
    b = _mix(a + epoch * _GOLDEN)
    c = _mix(b + index * _GOLDEN)
    d = _mix(c + tf.constant(0x5851F42D4C957F2D, tf.int64))
    return tf.stack([c, d], axis=-1)


def example_rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    """The NumPy generator for one example's draws of `stream` (random-access readers)."""
    words = [int(v) & 0xFFFFFFFFFFFFFFFF for v in (seed, epoch, index, stream)]
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(words)))
