"""Per-example seeds: pure functions of (seed, epoch, index, stream), distinct across each, vectorizable."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vidvol.readers import rng


def test_seeds_are_pure_and_differ_by_every_input():
    base = rng.example_seed(7, 0, 5, rng.CLIP).numpy()
    assert base.shape == (2,) and base.dtype == np.int64
    assert (rng.example_seed(tf.constant(7), tf.constant(0), tf.constant(5), rng.CLIP).numpy() == base).all()
    others = [rng.example_seed(8, 0, 5, rng.CLIP), rng.example_seed(7, 1, 5, rng.CLIP),
              rng.example_seed(7, 0, 6, rng.CLIP), rng.example_seed(7, 0, 5, rng.VIDEO_AUGMENT)]
    assert len({tuple(base)} | {tuple(o.numpy()) for o in others}) == 5


def test_vector_indices_give_the_same_seeds_as_scalars():
    many = rng.example_seed(3, 2, tf.range(100), rng.ORDER).numpy()
    assert many.shape == (100, 2)
    assert all((many[i] == rng.example_seed(3, 2, i, rng.ORDER).numpy()).all() for i in (0, 17, 99))
    assert len({tuple(r) for r in many}) == 100


def test_draws_from_neighbouring_indices_are_uniform_and_uncorrelated():
    seeds = rng.example_seed(0, 0, tf.range(20000), rng.CLIP)
    u = tf.vectorized_map(lambda s: tf.random.stateless_uniform([], seed=s), seeds).numpy()
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert counts.min() > 1800 and counts.max() < 2200  # ~6 sigma around 2000
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.05


def test_numpy_generators_are_pure_and_independent():
    a = rng.example_rng(7, 0, 5, rng.CLIP).integers(0, 2**31, 4)
    assert (a == rng.example_rng(7, 0, 5, rng.CLIP).integers(0, 2**31, 4)).all()
    assert not (a == rng.example_rng(7, 1, 5, rng.CLIP).integers(0, 2**31, 4)).all()
    assert not (a == rng.example_rng(7, 0, 5, rng.VIDEO_AUGMENT).integers(0, 2**31, 4)).all()
    draws = np.array([rng.example_rng(1, 0, i, rng.CLIP).random() for i in range(5000)])
    assert abs(draws.mean() - 0.5) < 0.02 and abs(np.corrcoef(draws[:-1], draws[1:])[0, 1]) < 0.06
