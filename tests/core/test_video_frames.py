"""VideoFrames: TFDS Video's stored bytes, decoded to the same uint8 frames without a per-example tf.map_fn."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_parser, example_serializer

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.core import features as vf
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.hmdb51 import make_dummy_data

T, H, W = 5, 24, 32


def _clips(count: int, seed: int = 0) -> list[np.ndarray]:
    """Textured, noisy uint8 clips (JPEG stores them lossily: decoders may differ, so equality is meaningful)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W]
    out = []
    for _ in range(count):
        base = 120 + 60 * np.sin(x[..., None] / rng.uniform(2, 6) + y[..., None] / rng.uniform(2, 6) + np.arange(3))
        frames = base[None] + rng.normal(0, 25, (T, H, W, 3))
        out.append(np.clip(frames, 0, 255).astype(np.uint8))
    return out


def _records(feature: tfds.features.FeaturesDict, clips: list[np.ndarray]) -> list[bytes]:
    serializer = example_serializer.ExampleSerializer(feature.get_serialized_info())
    return [serializer.serialize_example(feature.encode_example({"video": c})) for c in clips]


def _decode_each(feature: tfds.features.FeaturesDict, records: list[bytes]) -> list[np.ndarray]:
    """Per-example decode inside tf.data, as `tfds.load` runs it; checks the static element shape."""
    parser = example_parser.ExampleParser(feature.get_serialized_info())
    ds = tf.data.Dataset.from_tensor_slices(records).map(lambda r: feature.decode_example(parser.parse_example(r)))
    assert ds.element_spec["video"].shape == feature["video"].shape and ds.element_spec["video"].dtype == tf.uint8
    return [ex["video"] for ex in tfds.as_numpy(ds)]


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_bytes_written_by_tfds_video_decode_identically(fmt):
    old = tfds.features.FeaturesDict({"video": tfds.features.Video((T, H, W, 3), encoding_format=fmt)})
    new = tfds.features.FeaturesDict({"video": vf.VideoFrames((T, H, W, 3), encoding_format=fmt)})
    assert new.get_serialized_info() == old.get_serialized_info() and new["video"].shape == (T, H, W, 3)
    clips = _clips(3)
    records = _records(old, clips)
    assert _records(new, clips) == records  # the same stored bytes, whichever class writes them
    got, want = _decode_each(new, records), _decode_each(old, records)
    for clip, g, w in zip(clips, got, want):
        assert g.dtype == np.uint8 and g.shape == (T, H, W, 3)
        np.testing.assert_array_equal(g, w)
        if fmt == "png":
            np.testing.assert_array_equal(g, clip)
        else:
            assert 0 < np.abs(g.astype(int) - clip).mean() < 20  # lossy, but the same clip
    # The new feature's graph has no while loop (the per-example tf.map_fn it replaces).
    parser = example_parser.ExampleParser(new.get_serialized_info())
    graph = tf.function(lambda r: new.decode_example(parser.parse_example(r))).get_concrete_function(
        tf.TensorSpec([], tf.string)).graph.as_graph_def()
    ops = {n.op for n in graph.node}
    assert not ops & {"While", "StatelessWhile"} and ("DecodeJpeg" if fmt == "jpeg" else "DecodePng") in ops


def test_batch_decode_equals_per_example_decode():
    new = tfds.features.FeaturesDict({"video": vf.VideoFrames((T, H, W, 3), encoding_format="jpeg")})
    records = _records(new, _clips(4, seed=1))
    each = np.stack(_decode_each(new, records))
    # A batch of still-encoded frames, as `decoders={"video": tfds.decode.SkipDecoding()}` + `.batch(4)` give it.
    parser = example_parser.ExampleParser(new.get_serialized_info())
    encoded = tf.stack([parser.parse_example(tf.constant(r))["video"] for r in records])
    assert encoded.shape == (4, T)
    video = new["video"]
    static = video.decode_batch_example(encoded)  # static batch: one unrolled decode of all 4 x T frames
    assert static.dtype == tf.uint8 and static.shape == (4, T, H, W, 3)
    np.testing.assert_array_equal(static.numpy(), each)
    dynamic = tf.function(video.decode_batch_example, input_signature=[tf.TensorSpec([None, T], tf.string)])
    out = dynamic(encoded)  # unknown batch size: per video, each unrolled
    assert dynamic.get_concrete_function().structured_outputs.shape.as_list() == [None, T, H, W, 3]
    np.testing.assert_array_equal(out.numpy(), each)
    # The same through tfds.decode: a user's SkipDecoding + batch + decode_batch_example.
    ds = tf.data.Dataset.from_tensor_slices(records).map(
        lambda r: new.decode_example(parser.parse_example(r), decoders={"video": tfds.decode.SkipDecoding()}))
    ds = ds.batch(2, drop_remainder=True).map(lambda ex: video.decode_batch_example(ex["video"]))
    assert ds.element_spec.shape == (2, T, H, W, 3)
    np.testing.assert_array_equal(np.concatenate(list(tfds.as_numpy(ds))), each)


def test_variable_length_videos_decode_as_tfds_video():
    old = tfds.features.FeaturesDict({"video": tfds.features.Video((None, H, W, 3), encoding_format="jpeg")})
    new = tfds.features.FeaturesDict({"video": vf.VideoFrames((None, H, W, 3), encoding_format="jpeg")})
    clips = [c[:n] for c, n in zip(_clips(2, seed=2), (2, 5))]
    records = _records(old, clips)
    parser = example_parser.ExampleParser(new.get_serialized_info())
    for record, want in zip(records, _decode_each(old, records)):
        got = new.decode_example(parser.parse_example(tf.constant(record)))["video"].numpy()
        np.testing.assert_array_equal(got, want)


def test_features_json_names_the_class_and_old_features_upgrade():
    fd = tfds.features.FeaturesDict({"video": vf.VideoFrames((T, H, W, 3), encoding_format="jpeg"), "label": np.int64})
    as_json = fd.to_json()
    assert "vidvol.core.features.VideoFrames" in str(as_json)
    again = tfds.features.FeatureConnector.from_json(as_json)
    assert type(again["video"]) is vf.VideoFrames and again["video"].shape == (T, H, W, 3)
    assert again["video"].feature.encoding_format == "jpeg" and again["video"].np_dtype == np.uint8
    old = tfds.features.FeaturesDict({"video": tfds.features.Video((T, H, W, 3), encoding_format="png"), "label": np.int64})
    up = vf.with_fast_videos(old)
    assert type(up["video"]) is vf.VideoFrames and up["video"].feature.encoding_format == "png"
    assert up.get_serialized_info() == old.get_serialized_info() and up["label"] is old["label"]
    assert vf.with_fast_videos(fd) is fd


def test_tfds_load_of_a_built_config_gives_the_same_clips(tmp_path, build_in_process):
    manual = tmp_path / "manual"
    shutil.copytree(make_dummy_data.DUMMY_DIR, manual)
    builder = build_in_process(hmdb.Builder, manual, tmp_path / "data", config="split1_20x64x64")
    assert type(builder.info.features["video"]) is vf.VideoFrames
    ds = tfds.load("hmdb51/split1_20x64x64", split="train", data_dir=str(tmp_path / "data"), download=False)
    assert ds.element_spec["video"].shape == (20, 64, 64, 3) and ds.element_spec["video"].dtype == tf.uint8
    got = {ex["video_id"]: ex for ex in tfds.as_numpy(ds)}
    # The same records decoded by TFDS's own Video feature (what tfds.load gave before VideoFrames).
    old = tfds.features.FeaturesDict({**builder.info.features, "video": tfds.features.Video((20, 64, 64, 3), encoding_format="jpeg")})
    parser = example_parser.ExampleParser(old.get_serialized_info())
    files = [str(p) for p in sorted((tmp_path / "data").glob("hmdb51/split1_20x64x64/*/hmdb51-train.tfrecord-*"))]
    want = {ex["video_id"]: ex for ex in tfds.as_numpy(
        tf.data.TFRecordDataset(files).map(lambda r: old.decode_example(parser.parse_example(r))))}
    assert sorted(got) == sorted(want) and len(got) == 6
    for key, ex in want.items():
        for name in ex:
            np.testing.assert_array_equal(got[key][name], ex[name], err_msg=name)
        assert ex["video"][: int(ex["num_frames"])].max() > 0
    # Rebuilt from features.json alone (no builder code): the same class, the same clips.
    again = tfds.builder_from_directory(str(builder.data_path))
    assert type(again.info.features["video"]) is vf.VideoFrames
    first = next(iter(tfds.as_numpy(again.as_dataset(split="train", shuffle_files=False))))
    np.testing.assert_array_equal(first["video"], want[first["video_id"]]["video"])


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_numpy_decode_gives_tfds_load_pixels(fmt):
    """TFDS's NumPy path (`tfds.data_source`, `deserialize_example_np`) decodes VideoFrames' JPEG frames with
    `tf.io.decode_jpeg`'s pixels (libjpeg-turbo, fast IDCT: `core.jpeg`), not OpenCV's accurate IDCT, which is a
    few levels off; TFDS's own Video feature still gives OpenCV's, so the test can tell the two apart."""
    new = tfds.features.FeaturesDict({"video": vf.VideoFrames((T, H, W, 3), encoding_format=fmt)})
    old = tfds.features.FeaturesDict({"video": tfds.features.Video((T, H, W, 3), encoding_format=fmt)})
    records = _records(new, _clips(3, seed=4))
    for record, want in zip(records, _decode_each(new, records)):
        got = np.stack(new.deserialize_example_np(record)["video"])
        assert got.dtype == np.uint8 and got.shape == (T, H, W, 3)
        np.testing.assert_array_equal(got, want)
        theirs = np.stack(old.deserialize_example_np(record)["video"])
        assert np.array_equal(theirs, want) == (fmt == "png")  # OpenCV: exact for PNG, a few levels off for JPEG
