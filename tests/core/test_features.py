"""WholeNumberVolume and BoxMask: exact round trips through TFDS serialization, per example, per batch and NumPy-only."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_parser, example_serializer

from vidvol.builders.transforms import volume
from vidvol.core import features as vf
from vidvol.readers.tfdata.batch_parser import BatchParser

SHAPE = (6, 7, 5)


def _round_trip(feature_dict: tfds.features.FeaturesDict, examples: list[dict]) -> tuple[list[dict], dict, list[bytes]]:
    """Serializes examples as TFDS writes them; returns per-example decodes, one batched decode and the records.

    Every record is also decoded as `tfds.data_source` decodes it (NumPy only, no TF graph), which
    must give the same arrays as the per-example TF decode.
    """
    serializer = example_serializer.ExampleSerializer(feature_dict.get_serialized_info())
    records = [serializer.serialize_example(feature_dict.encode_example(ex)) for ex in examples]
    parser = example_parser.ExampleParser(feature_dict.get_serialized_info())
    singles = [tfds.as_numpy(feature_dict.decode_example(parser.parse_example(tf.constant(r)))) for r in records]
    names = list(feature_dict.keys())
    batched = BatchParser(feature_dict, names, []).parse(tf.constant(records))
    for record, single in zip(records, singles):
        numpy_only = feature_dict.deserialize_example_np(record)
        for name in names:
            assert isinstance(numpy_only[name], np.ndarray) and numpy_only[name].flags.writeable
            assert numpy_only[name].dtype == single[name].dtype, name
            np.testing.assert_array_equal(numpy_only[name], single[name])
    return singles, tfds.as_numpy(batched), records


def test_whole_numbers_are_stored_as_int16_and_decode_exactly():
    rng = np.random.default_rng(0)
    ints = rng.integers(-32768, 32768, SHAPE).astype(np.float32)
    floats = rng.normal(size=SHAPE).astype(np.float32)
    feature = vf.WholeNumberVolume(SHAPE)
    assert feature.encode_example(ints)["int16"] == 1 and len(feature.encode_example(ints)["data"]) == 2 * ints.size
    assert feature.encode_example(floats)["int16"] == 0 and len(feature.encode_example(floats)["data"]) == 4 * ints.size
    assert not feature.is_whole_int16(np.full(SHAPE, 40000.0, np.float32))
    assert not feature.is_whole_int16(np.full(SHAPE, np.nan, np.float32))
    fd = tfds.features.FeaturesDict({"volume": feature})
    for batch in ([ints, ints * 0 + 3], [floats, floats + 1], [ints, floats]):  # int16, float32, mixed
        singles, batched, _ = _round_trip(fd, [{"volume": v} for v in batch])
        for i, v in enumerate(batch):
            np.testing.assert_array_equal(singles[i]["volume"], v)
            np.testing.assert_array_equal(batched["volume"][i], v)
        assert batched["volume"].dtype == np.float32 and batched["volume"].shape == (2,) + SHAPE
    with pytest.raises(ValueError, match="expected"):
        feature.encode_example(np.zeros((2, 2, 2), np.float32))


def test_crop_pad_masks_are_boxes_stored_as_corners():
    feature = vf.BoxMask(SHAPE)
    masks = []  # from the real crop/pad stage: padded, exact and cropped axes
    for src in ((3, 9, 2), (6, 7, 5), (10, 2, 8)):
        image = volume.Volume(data=np.ones(src, np.float32), affine=np.eye(4), spacing=np.ones(3, np.float32),
                              original_shape=src)
        masks.append(volume.crop_or_pad(image, SHAPE).mask)
    masks.append(np.zeros(SHAPE, np.uint8))
    fd = tfds.features.FeaturesDict({"mask": feature})
    singles, batched, records = _round_trip(fd, [{"mask": m} for m in masks])
    for i, m in enumerate(masks):
        np.testing.assert_array_equal(singles[i]["mask"], m)
        np.testing.assert_array_equal(batched["mask"][i], m)
    assert batched["mask"].dtype == np.uint8
    assert max(len(r) for r in records) < 100  # corners, not voxels
    two_boxes = np.zeros(SHAPE, np.uint8)
    two_boxes[0, 0, 0] = two_boxes[5, 6, 4] = 1
    with pytest.raises(ValueError, match="not one axis-aligned box"):
        feature.encode_example(two_boxes)
    with pytest.raises(ValueError, match="0 or 1"):
        feature.encode_example(np.full(SHAPE, 2, np.uint8))


def test_features_survive_features_json():
    fd = tfds.features.FeaturesDict({"volume": vf.WholeNumberVolume(SHAPE), "mask": vf.BoxMask(SHAPE)})
    again = tfds.features.FeatureConnector.from_json(fd.to_json())
    assert isinstance(again["volume"], vf.WholeNumberVolume) and isinstance(again["mask"], vf.BoxMask)
    assert again["volume"].shape == SHAPE and again["mask"].shape == SHAPE
    assert again["volume"].np_dtype == np.float32 and again["mask"].np_dtype == np.uint8
