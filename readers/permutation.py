"""A keyed bijection on [0, n): the epoch's example order, evaluable at any one position in O(1).

`permute(positions, n, seed)` (TensorFlow, vectorized) and `permute_np` (NumPy) give the same
integers: position `j` of an epoch reads example `permute(j, n, seed)`, and every example comes
exactly once. Nothing is held: the order is a pure function of the position and the `[2]` seed
(`rng.example_seed(seed, epoch, pipeline, rng.ORDER)`), so an iterator restored at position `j`
continues the same order, another host computes the same one, and the random-access readers
(`readers.resumable`) share it.

A balanced Feistel network on the smallest even number of bits holding n (at least 2), six rounds
of splitmix64's finalizer keyed per round, restricted to [0, n) by cycle-walking: a value that
lands at or past n is encrypted again until it falls inside (the network is a permutation of
[0, 2^bits), so the walk ends, on average after under 4 encryptions since 2^bits < 4n). Six rounds
because four rounds of a balanced Feistel network are the minimum for a pseudo-random permutation
in theory; two more cost little (a few integer ops per position) and remove the residual structure
a simple round function leaves at four (measured by `benchmarks/resume.py`'s order metrics).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

ROUNDS = 6
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = 0xFFFFFFFFFFFFFFFF


def half_bits(n: int) -> int:
    """Bits of each half of the network for a domain of n values (the block holds 2 * half bits >= log2 n)."""
    bits = max(2, int(max(1, n) - 1).bit_length())
    return (bits + 1) // 2


# ----------------------------------------------------------------------------------------------- NumPy


def _mix_np(u: np.ndarray) -> np.ndarray:
    u = u ^ (u >> np.uint64(30))
    u = u * np.uint64(_M1)
    u = u ^ (u >> np.uint64(27))
    u = u * np.uint64(_M2)
    return u ^ (u >> np.uint64(31))


def seed_np(seed, epoch, index, stream: int) -> np.ndarray:
    """`rng.example_seed` in NumPy, the same integers ([..., 2] int64; `index` may be an array): the
    random-access readers key their orders with it without running TensorFlow."""
    u = lambda v: np.asarray(v, np.int64).astype(np.uint64)  # noqa: E731  (two's complement, as TF's bitcast)
    with np.errstate(over="ignore"):
        g = np.uint64(_GOLDEN)
        a = _mix_np(u(seed) * g + np.uint64(stream + 1))
        b = _mix_np(a + u(epoch) * g)
        c = _mix_np(b + u(index) * g)
        d = _mix_np(c + np.uint64(0x5851F42D4C957F2D))
    c, d = np.broadcast_arrays(c, d)
    return np.stack([c, d], axis=-1).astype(np.int64)


def _round_keys_np(seed: np.ndarray) -> np.ndarray:
    """(ROUNDS, K) round keys of K [2] seeds (K, 2)."""
    s = np.ascontiguousarray(seed, np.int64).view(np.uint64)
    return np.stack([_mix_np(s[:, 0] + np.uint64((_GOLDEN * (r + 1)) & _U64)) ^ s[:, 1] for r in range(ROUNDS)])


def permute_np(positions, n: int, seed) -> np.ndarray:
    """NumPy form of `permute`: the same integers (int64) for the same positions, n and seeds."""
    x = np.asarray(positions, np.int64)
    n = int(n)
    if n <= 1:
        return np.zeros_like(x)
    if np.any((x < 0) | (x >= n)):
        raise ValueError(f"positions must lie in [0, {n})")
    seed = np.asarray(seed, np.int64)
    seeds = seed.reshape(1, 2) if seed.ndim == 1 else np.broadcast_to(seed, x.shape + (2,)).reshape(-1, 2)
    half = half_bits(n)
    mask = np.uint64((1 << half) - 1)
    with np.errstate(over="ignore"):
        keys = _round_keys_np(seeds)

        def encrypt(v: np.ndarray, k: np.ndarray) -> np.ndarray:
            left, right = v >> np.uint64(half), v & mask
            for key in k:
                left, right = right, left ^ (_mix_np(right ^ key) & mask)
            return (left << np.uint64(half)) | right

        y = encrypt(x.astype(np.uint64).reshape(-1), keys)
        outside = y >= np.uint64(n)
        while outside.any():
            y[outside] = encrypt(y[outside], keys if keys.shape[1] == 1 else keys[:, outside])
            outside = y >= np.uint64(n)
    return y.astype(np.int64).reshape(x.shape)


# ----------------------------------------------------------------------------------------------- TensorFlow


def _u64(value: int) -> tf.Tensor:
    return tf.constant(value & _U64, tf.uint64)


def _mix(u: tf.Tensor) -> tf.Tensor:
    shift = lambda v, s: tf.bitwise.right_shift(v, _u64(s))  # noqa: E731
    u = tf.bitwise.bitwise_xor(u, shift(u, 30)) * _u64(_M1)
    u = tf.bitwise.bitwise_xor(u, shift(u, 27)) * _u64(_M2)
    return tf.bitwise.bitwise_xor(u, shift(u, 31))


def permute(positions: tf.Tensor, n: int, seed: tf.Tensor) -> tf.Tensor:
    """The example at each of `positions` (int64, each in [0, n)) of the order keyed by `seed`.

    `seed`: int64 `[..., 2]` broadcastable against `positions` (one `[2]` seed, or one per position:
    a batch that crosses an epoch boundary holds positions of two orders). `n` is a Python int (one
    pipeline's examples per epoch, fixed when the pipeline is made).
    """
    x = tf.cast(positions, tf.int64)
    n = int(n)
    if n <= 1:
        return tf.zeros_like(x)
    half = half_bits(n)
    mask = _u64((1 << half) - 1)
    s = tf.bitcast(tf.cast(seed, tf.int64), tf.uint64)
    keys = [tf.bitwise.bitwise_xor(_mix(s[..., 0] + _u64(_GOLDEN * (r + 1))), s[..., 1]) for r in range(ROUNDS)]

    def encrypt(v: tf.Tensor) -> tf.Tensor:
        left, right = tf.bitwise.right_shift(v, _u64(half)), tf.bitwise.bitwise_and(v, mask)
        for key in keys:
            left, right = right, tf.bitwise.bitwise_xor(left, tf.bitwise.bitwise_and(_mix(tf.bitwise.bitwise_xor(right, key)), mask))
        return tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, _u64(half)), right)

    limit = _u64(n)
    y = encrypt(tf.bitcast(x, tf.uint64))

    def walk(v: tf.Tensor) -> tf.Tensor:
        return tf.where(v >= limit, encrypt(v), v)

    y = tf.while_loop(lambda v: tf.reduce_any(v >= limit), lambda v: (walk(v),), (y,))[0]
    return tf.bitcast(y, tf.int64)
