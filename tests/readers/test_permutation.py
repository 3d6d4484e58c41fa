"""`readers.permutation`: a keyed bijection on [0, n), evaluable at any position, the same in TensorFlow and NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from vidvol.readers import permutation
from vidvol.readers import rng


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 17, 100, 1000, 4097])
def test_every_position_gets_a_distinct_example_and_both_forms_agree(n):
    seed = rng.example_seed(7, 3, 0, rng.ORDER).numpy()
    ours = permutation.permute_np(np.arange(n), n, seed)
    assert sorted(ours.tolist()) == list(range(n))
    np.testing.assert_array_equal(permutation.permute(tf.range(n, dtype=tf.int64), n, tf.constant(seed)).numpy(), ours)
    if n > 5:
        j = np.array([n - 1, 0, n // 2])  # any single position, without the others
        np.testing.assert_array_equal(permutation.permute_np(j, n, seed), ours[j])


def test_one_seed_per_position_and_numpy_seeds_match_tensorflows():
    epochs = tf.constant([3, 3, 4, 4, 4], tf.int64)
    seeds = rng.example_seed(7, epochs, 0, rng.ORDER)
    np.testing.assert_array_equal(rng.seed_np(7, epochs.numpy(), 0, rng.ORDER), seeds.numpy())
    np.testing.assert_array_equal(rng.seed_np(-1, 5, np.arange(4), rng.CLIP), rng.example_seed(-1, 5, tf.range(4), rng.CLIP).numpy())
    positions = np.array([0, 1, 0, 1, 2])
    got = permutation.permute(tf.constant(positions, tf.int64), 10, seeds).numpy()
    want = [permutation.permute_np(p, 10, s) for p, s in zip(positions, seeds.numpy())]
    np.testing.assert_array_equal(got, want)


def test_orders_look_uniform_over_seeds():
    """Where position 0 lands, and whether neighbours stay neighbours, over many keys (a uniform shuffle's rates)."""
    n, keys = 50, 4000
    first = np.array([permutation.permute_np(0, n, rng.seed_np(k, 0, 0, rng.ORDER)) for k in range(keys)])
    counts = np.bincount(first, minlength=n)
    assert counts.min() > 40 and counts.max() < 125  # 80 expected each, ~5 sigma
    orders = [permutation.permute_np(np.arange(n), n, rng.seed_np(k, 1, 0, rng.ORDER)) for k in range(400)]
    neighbours = np.mean([np.mean(np.abs(np.diff(o)) == 1) for o in orders])
    assert neighbours < 2.5 * 2 / n  # a uniform shuffle: 2/n
    assert len({tuple(o) for o in orders}) == 400
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 5\)"):
        permutation.permute_np([5], 5, first[:2])
