"""The direct wire-format serializer writes exactly the bytes TFDS's ExampleSerializer + deterministic SerializeToString do."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.builders.writer import example_bytes
from vidvol.core import features as vfeatures

RNG = np.random.default_rng(7)


def tfds_bytes(features, example) -> bytes:
    serializer = tfds.core.ExampleSerializer(features.get_serialized_info())
    return serializer.get_tf_example(features.encode_example(example)).SerializeToString(deterministic=True)


def jpeg(h=24, w=32) -> bytes:
    ok, buf = cv2.imencode(".jpg", RNG.integers(0, 256, (h, w, 3), dtype=np.uint8))
    assert ok
    return buf.tobytes()


def every_kind():
    features = tfds.features.FeaturesDict({
        "video": tfds.features.Video((3, 24, 32, 3), encoding_format="jpeg"),
        "clip": tfds.features.Video((None, 24, 32, 3), encoding_format="png"),
        "image": tfds.features.Image(shape=(24, 32, 3)),
        "mask": tfds.features.Tensor(shape=(3,), dtype=np.uint8),
        "frame_indices": tfds.features.Tensor(shape=(3,), dtype=np.int32),
        "big_ints": tfds.features.Tensor(shape=(300,), dtype=np.int64),
        "hrr": tfds.features.Tensor(shape=(3,), dtype=np.float32),
        "empty_floats": tfds.features.Tensor(shape=(None,), dtype=np.float32),
        "flags": tfds.features.Tensor(shape=(2,), dtype=np.bool_),
        "u64": tfds.features.Scalar(dtype=np.uint64),
        "offset": tfds.features.Scalar(dtype=np.int64),
        "label": tfds.features.ClassLabel(names=["a", "b", "c"]),
        "video_id": tfds.features.Text(),
        "nested": tfds.features.Sequence(tfds.features.Sequence(np.int32)),
        "volume": vfeatures.WholeNumberVolume((4, 5, 6)),
        "volume_f": vfeatures.WholeNumberVolume((2, 3, 1)),
        "box": vfeatures.BoxMask((4, 5, 6)),
        "meta": {"fps": tfds.features.Scalar(dtype=np.float32), "name": tfds.features.Text()},
    })
    box = np.zeros((4, 5, 6), np.uint8)
    box[1:3, 0:5, 2:6] = 1
    big = RNG.integers(-2**62, 2**62, 300)
    big[:5] = [0, -1, 127, 128, -2**63]
    example = {
        "video": [jpeg() for _ in range(3)],
        "clip": RNG.integers(0, 256, (2, 24, 32, 3), dtype=np.uint8),
        "image": RNG.integers(0, 256, (24, 32, 3), dtype=np.uint8),
        "mask": np.array([1, 1, 0], np.uint8),
        "frame_indices": np.array([0, 7, -1], np.int32),
        "big_ints": big,
        "hrr": np.array([0.5, -1e30, np.nan], np.float32),
        "empty_floats": np.zeros((0,), np.float32),
        "flags": np.array([True, False]),
        "u64": np.uint64(2**64 - 2),
        "offset": -300,
        "label": "b",
        "video_id": "clip é ✓",
        "nested": [[1, 2, 3], [], [4]],
        "volume": RNG.integers(-500, 500, (4, 5, 6)).astype(np.float32),
        "volume_f": RNG.normal(size=(2, 3, 1)).astype(np.float32),
        "box": box,
        "meta": {"fps": 29.97, "name": ""},
    }
    return features, example


def test_every_feature_kind_serializes_to_tfds_bytes():
    features, example = every_kind()
    expected = tfds_bytes(features, example)
    serializer = example_bytes.Serializer(features)
    assert serializer.fast
    assert serializer(example) == expected
    parsed = tf.train.Example.FromString(expected)
    assert len(parsed.features.feature) > 15  # the comparison covered a real, full map


@pytest.mark.parametrize("dataset", ["hmdb51/split1_20x64x64", pytest.param("fire_hrr", marks=pytest.mark.slow), "mri_volumes/small_32", "video_folder"])
def test_the_registered_datasets_features_serialize_to_tfds_bytes(dataset, tmp_path):
    import vidvol  # noqa: F401

    features = tfds.builder(dataset, data_dir=str(tmp_path)).info.features
    example = {}
    for name, feature in features.items():
        info = feature.get_tensor_info()
        if isinstance(feature, tfds.features.Video):
            n = feature.shape[0] or 4
            example[name] = [jpeg(*feature.shape[1:3]) if feature._encoding_format == "jpeg"
                             else RNG.integers(0, 256, feature.shape[1:], dtype=np.uint8) for _ in range(n)]
        elif isinstance(feature, vfeatures.BoxMask):
            example[name] = np.ones(feature.get_tensor_info().shape, np.uint8)
        elif isinstance(feature, vfeatures.WholeNumberVolume):
            example[name] = RNG.integers(0, 900, info.shape).astype(np.float32)
        elif isinstance(feature, tfds.features.ClassLabel):
            if feature.num_classes is None:  # names set at build time (mri_volumes: from the CSV)
                feature.names = ["fail", "pass"]
            example[name] = feature.num_classes - 1
        elif isinstance(feature, tfds.features.Text) or info.dtype == tf.string:
            example[name] = f"{name}-x"
        else:
            shape = tuple(d if d is not None else 3 for d in info.shape)
            example[name] = (RNG.random(shape) * 100).astype(info.np_dtype)
    assert example_bytes.Serializer(features)(example) == tfds_bytes(features, example)


def test_errors_name_the_feature():
    features = tfds.features.FeaturesDict({"hrr": tfds.features.Tensor(shape=(3,), dtype=np.float32)})
    encoded = {"hrr": np.zeros((4,), np.float32)}
    with pytest.raises(ValueError, match="`hrr`"):
        example_bytes.serialize(encoded, features.get_serialized_info())


def test_the_tfds_path_is_kept_as_the_fallback():
    features, example = every_kind()
    assert example_bytes.Serializer(features, fast=False)(example) == example_bytes.Serializer(features)(example)
