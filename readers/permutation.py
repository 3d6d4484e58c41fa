"""A keyed bijection on [0, n): the epoch's example order, evaluable at any one position in O(1).

`permute` (TensorFlow, vectorized) and `permute_np` (NumPy) give the same integers: position `j` of
an epoch reads example `permute(j, n, seed)`, every example exactly once. Nothing is held, so a
restored iterator, another host and the random-access readers compute the same order.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vidvol.readers import rng

ROUNDS = 6


def half_bits(n: int) -> int:
    """Bits of each half of the network for a domain of n values (the block holds 2 * half bits >= log2 n)."""
    bits = max(2, int(max(1, n) - 1).bit_length())
    return (bits + 1) // 2


# ----------------------------------------------------------------------------------------------- NumPy


def _round_keys_np(seed: np.ndarray) -> np.ndarray:
    """(ROUNDS, K) round keys of K [2] seeds (K, 2)."""
    s = np.ascontiguousarray(seed, np.int64).view(np.uint64)
    return np.stack([rng.mix_np(s[:, 0] + np.uint64((rng.GOLDEN * (r + 1)) & rng.U64)) ^ s[:, 1] for r in range(ROUNDS)])


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
                left, right = right, left ^ (rng.mix_np(right ^ key) & mask)
            return (left << np.uint64(half)) | right

        y = encrypt(x.astype(np.uint64).reshape(-1), keys)
        outside = y >= np.uint64(n)
        while outside.any():
            y[outside] = encrypt(y[outside], keys if keys.shape[1] == 1 else keys[:, outside])
            outside = y >= np.uint64(n)
    return y.astype(np.int64).reshape(x.shape)


# ----------------------------------------------------------------------------------------------- TensorFlow


def permute(positions: tf.Tensor, n: int, seed: tf.Tensor) -> tf.Tensor:
    """The example at each of `positions` (int64, each in [0, n)) of the order keyed by `seed`.

    The order is a pure function of the position and the `[2]` seed (`rng.example_seed(seed, epoch,
    pipeline, rng.ORDER)`), so an iterator restored at position `j` continues the same order,
    another host computes the same one, and the random-access readers (`readers.random_access`,
    through `permute_np`) share it.

    A balanced Feistel network on the smallest even number of bits holding n (at least 2), six
    rounds (`ROUNDS`) of splitmix64's finalizer keyed per round, restricted to [0, n) by
    cycle-walking: a value that lands at or past n is encrypted again until it falls inside (the
    network is a permutation of [0, 2^bits), so the walk ends, on average after under 4 encryptions
    since 2^bits < 4n). Six rounds because four rounds of a balanced Feistel network are the minimum
    for a pseudo-random permutation in theory; two more cost little (a few integer ops per position)
    and remove the residual structure a simple round function leaves at four (measured by
    `benchmarks/sections/resume.py`'s order metrics).

    Args:
      positions: int64 positions, any shape, each in [0, n).
      n: a Python int (one pipeline's examples per epoch, fixed when the pipeline is made).
      seed: int64 `[..., 2]` broadcastable against `positions` (one `[2]` seed, or one per position:
        a batch that crosses an epoch boundary holds positions of two orders).

    Returns:
      The example index at each position, int64, the shape of `positions`.
    """
    x = tf.cast(positions, tf.int64)
    n = int(n)
    if n <= 1:
        return tf.zeros_like(x)
    out = _permute_fn(x, tf.cast(seed, tf.int64), tf.constant(half_bits(n), tf.int64), tf.constant(n, tf.int64))
    return rng.with_shape(out, x.shape)


def _permute(x: tf.Tensor, seed: tf.Tensor, half: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
    half = tf.bitcast(half, tf.uint64)
    mask = tf.bitwise.left_shift(rng.u64(1), half) - rng.u64(1)
    s = tf.bitcast(seed, tf.uint64)
    keys = [tf.bitwise.bitwise_xor(rng.mix(s[..., 0] + rng.u64(rng.GOLDEN * (r + 1))), s[..., 1]) for r in range(ROUNDS)]

    def encrypt(v: tf.Tensor) -> tf.Tensor:
        left, right = tf.bitwise.right_shift(v, half), tf.bitwise.bitwise_and(v, mask)
        for key in keys:
            left, right = right, tf.bitwise.bitwise_xor(left, tf.bitwise.bitwise_and(rng.mix(tf.bitwise.bitwise_xor(right, key)), mask))
        return tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, half), right)

    limit = tf.bitcast(n, tf.uint64)
    y = encrypt(tf.bitcast(x, tf.uint64))

    def walk(v: tf.Tensor) -> tf.Tensor:
        return tf.where(v >= limit, encrypt(v), v)

    y = tf.while_loop(lambda v: tf.reduce_any(v >= limit), lambda v: (walk(v),), (y,))[0]
    return tf.bitcast(y, tf.int64)


# Traced once per process and called as one op (each `vidvol.load` made afresh reuses it: rng.example_seed).
_permute_fn = tf.function(_permute, input_signature=[tf.TensorSpec(None, tf.int64)] * 2 + [tf.TensorSpec([], tf.int64)] * 2,
                          autograph=False, reduce_retracing=True)
