"""The prepared dataset a reader opens: its builder, its features' roles, and the defaults every reader shares."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from vidvol.core import dataset_copy, store
from vidvol.readers import bucket, frames


class DatasetNotPreparedError(FileNotFoundError):
    """The dataset (config) has not been built into the data directory."""


def get_builder(name: str | tfds.core.DatasetBuilder, data_dir: str | os.PathLike | None = None) -> tfds.core.DatasetBuilder:
    """The prepared builder for `name` ("hmdb51" or "hmdb51/split1_20x64x64"), or `name` itself."""
    if isinstance(name, tfds.core.DatasetBuilder):
        builder = name
    elif data_dir is not None and store.is_bucket(os.fspath(data_dir)):
        builder = _from_bucket(name, os.fspath(data_dir))
    else:
        builder = tfds.builder(name, data_dir=None if data_dir is None else os.fspath(data_dir))
    if not builder.is_prepared():
        raise DatasetNotPreparedError(
            f"{builder.data_dir}: dataset {builder.info.full_name} is not prepared there; build it first, e.g. "
            f"`tfds build {builder.name}/{builder.builder_config.name if builder.builder_config else ''} "
            "--imports vidvol --manual_dir DIR --data_dir DATA_DIR`"
        )
    return builder


def _from_bucket(name: str, url: str) -> tfds.core.DatasetBuilder:
    """The builder of a dataset in a bucket: its metadata copied into the local cache, its shards left in the bucket.

    TensorFlow here cannot open s3:// (so neither can `tfds.load`); `readers.bucket` reads the records
    by byte range, or through its bounded shard cache.
    """
    try:
        return bucket.open_builder(name, url)
    except dataset_copy.CopyError as e:
        raise DatasetNotPreparedError(str(e)) from None


def static_bytes(shape: Sequence[int | None], dtype: Any) -> int:
    """Bytes of a tensor of static `shape` (0 when a dimension is unknown)."""
    if any(d is None for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def per_frame_features(features: tfds.features.FeaturesDict, video: str, names: Sequence[str]) -> tuple[str, ...]:
    """Features among `names` with one entry per frame of `video` (same leading dimension), e.g. mask, hrr."""
    length = features[video].shape[0]
    out = []
    for name in names:
        feature = features[name]
        if name == video or frames.is_encoded_video(feature) or frames.is_raw_video(feature):
            continue
        if not isinstance(feature, tfds.features.Tensor):
            continue
        if len(feature.shape) >= 1 and feature.shape[0] == length:
            out.append(name)
    return tuple(out)


def is_training(split: str, training: bool | None = None) -> bool:
    """`training`, or by default whether the split's name starts with "train" ("train", "train[:80%]", "train+validation")."""
    return split.split("[")[0].strip().startswith("train") if training is None else bool(training)


def supervised_keys(info: tfds.core.DatasetInfo, inputs: str | Sequence[str] | None = None, target: str | None = None) -> tuple[tuple[str, ...], str]:
    """Input feature names and target name: the builder's supervised_keys, plus `mask` for a single input."""
    features = info.features
    keys = info.supervised_keys
    if inputs is None or target is None:
        if not keys or len(keys) != 2:
            raise ValueError(f"{info.full_name}: no (inputs, target) supervised_keys; set Output.inputs and "
                             "Output.target (or Output.features for dicts)")
    if inputs is None:
        first = keys[0]
        inputs = tuple(first) if isinstance(first, (tuple, list)) else (first,)
        if len(inputs) == 1 and "mask" in features and inputs[0] != "mask":
            inputs = inputs + ("mask",)
    elif isinstance(inputs, str):
        inputs = (inputs,)
    target = keys[1] if target is None else target
    if not isinstance(target, str):
        raise ValueError(f"{info.full_name}: target must be one feature name, got {target!r}")
    names = tuple(inputs) + (target,)
    unknown = [n for n in names if n not in features]
    if unknown:
        raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(features)}")
    return tuple(inputs), target
