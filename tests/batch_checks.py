"""Comparing read pipelines' outputs in tests: the same batches, tensor for tensor."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def assert_same_batches(a, b) -> None:
    """Two lists of batches (any structure; tensors or NumPy) hold equal values of equal dtype and shape, in order."""
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        tf.nest.assert_same_structure(x, y)
        for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y)):
            u, v = np.asarray(u), np.asarray(v)
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)
