"""The features of the toy builders the writer and isolation tests build: an int64 vector and a name per example."""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds


class ToyFeatures:
    """Mixin giving a toy `StreamingBeamBuilder` its `_info`: `{"x": int64[4], "name": text}`."""

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"x": tfds.features.Tensor(shape=(4,), dtype=np.int64), "name": tfds.features.Text()}
            ),
        )
