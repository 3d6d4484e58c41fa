"""Per-example randomness, a pure function of (seed, epoch, example index, stream); splitmix64 in TF and NumPy.

`example_seed` (a stateless `[2]` int64 seed for `tf.random.stateless_*`) and `seed_np` (the same integers in
NumPy) key every random choice a reader makes for one example; `example_rng` is the NumPy generator of the
random-access readers. docs/reading.md says why nothing random is held as state.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Stream ids: one per use of randomness. Append new uses; never renumber (it would change draws).
ORDER = 0  # the epoch's example order (a permutation of the split)
CLIP = 1  # a training clip's start frame
VIDEO_AUGMENT = 2  # crops and flips of video frames
VOLUME_AUGMENT = 3  # patches, flips, rotations and intensity changes of volumes

GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's multipliers
U64 = 0xFFFFFFFFFFFFFFFF
_FINAL = 0x5851F42D4C957F2D  # the increment of the seed's second word


def u64(value: int) -> tf.Tensor:
    """A Python int as a uint64 constant (wrapped to 64 bits)."""
    return tf.constant(value & U64, tf.uint64)


def mix(u: tf.Tensor) -> tf.Tensor:
    """splitmix64's finalizer on uint64 (wrapping arithmetic)."""
    shift = lambda v, s: tf.bitwise.right_shift(v, u64(s))
    u = tf.bitwise.bitwise_xor(u, shift(u, 30)) * u64(_M1)
    u = tf.bitwise.bitwise_xor(u, shift(u, 27)) * u64(_M2)
    return tf.bitwise.bitwise_xor(u, shift(u, 31))


def mix_np(u: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays, the same integers as `mix` (call inside np.errstate(over="ignore"))."""
    u = u ^ (u >> np.uint64(30))
    u = u * np.uint64(_M1)
    u = u ^ (u >> np.uint64(27))
    u = u * np.uint64(_M2)
    return u ^ (u >> np.uint64(31))


def _example_seed(seed: tf.Tensor, epoch: tf.Tensor, index: tf.Tensor, stream: tf.Tensor) -> tf.Tensor:
    as_u64 = lambda v: tf.bitcast(v, tf.uint64)
    g = u64(GOLDEN)
    a = mix(as_u64(seed) * g + tf.bitcast(stream + 1, tf.uint64))
    b = mix(a + as_u64(epoch) * g)
    c = mix(b + as_u64(index) * g)
    d = mix(c + u64(_FINAL))
    return tf.bitcast(tf.stack([c, d], axis=-1), tf.int64)


_ANY_INT64 = tf.TensorSpec(None, tf.int64)
# Traced once per process and called as one op: a pipeline made afresh (each `vidvol.load`) does not
# rebuild these ~50 integer ops in every function that draws (`benchmarks/` reads: tf.data's tracing).
_example_seed_fn = tf.function(_example_seed, input_signature=[_ANY_INT64] * 4, autograph=False, reduce_retracing=True)


def static_shape(*values) -> tf.TensorShape:
    """The broadcast static shape of tensors or ints (unknown dims stay unknown)."""
    shape = tf.TensorShape([])
    for v in values:
        shape = tf.broadcast_static_shape(shape, tf.TensorShape(getattr(v, "shape", np.shape(v))))
    return shape


def with_shape(t: tf.Tensor, shape: tf.TensorShape) -> tf.Tensor:
    """`t` with its static shape set (a traced function's output has none)."""
    if not tf.executing_eagerly():
        t.set_shape(shape)
    return t


def example_seed(seed, epoch, index, stream: int) -> tf.Tensor:
    """A stateless `[2]` int64 seed for one example's draws of `stream` (tensors or ints; `index` may be a vector -> `[N, 2]`)."""
    args = [tf.cast(v, tf.int64) for v in (seed, epoch, index)]
    out = _example_seed_fn(*args, tf.constant(int(stream), tf.int64))
    return with_shape(out, static_shape(*args).concatenate([2]))


def seed_np(seed, epoch, index, stream: int) -> np.ndarray:
    """`example_seed` in NumPy, the same integers ([..., 2] int64; `index` may be an array): the random-access
    readers key their orders with it without running TensorFlow."""
    as_u64 = lambda v: np.asarray(v, np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        g = np.uint64(GOLDEN)
        a = mix_np(as_u64(seed) * g + np.uint64(stream + 1))
        b = mix_np(a + as_u64(epoch) * g)
        c = mix_np(b + as_u64(index) * g)
        d = mix_np(c + np.uint64(_FINAL))
    c, d = np.broadcast_arrays(c, d)
    return np.stack([c, d], axis=-1).astype(np.int64)


def example_rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    """The NumPy generator for one example's draws of `stream` (random-access readers).

    Args:
      seed: the read's seed.
      epoch: the epoch of the draw.
      index: the example's index in its split.
      stream: the use of the randomness (`CLIP`, `VIDEO_AUGMENT`, `VOLUME_AUGMENT`).

    Returns:
      A Philox generator: the same distribution of draws as `example_seed`'s, not the same numbers.
    """
    words = [int(v) & U64 for v in (seed, epoch, index, stream)]
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(words)))
