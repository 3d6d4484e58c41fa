"""Stored-raw clip configs (`*_raw`): the same clips as the JPEG configs, uncompressed, read without a decode.

Built once per module from the same sample videos (real XVID AVI files, in-process Beam) as a JPEG
config and its raw twin; values are checked against each other, against the frames OpenCV decodes
from the source videos, and between `tfds.load`, `vidvol.load` and the random-access reader.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol import Clips, Output, ReadSpec, Tuning
from vidvol.builders.transforms import clips
from vidvol.builders.transforms import video
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb
from vidvol.readers import frames
from vidvol.readers.tfdata.batch_parser import BatchParser
from vidvol.testing import samples

# JPEG q90 of 64x64 frames against their uncompressed originals (textured, moving sample content):
# a few levels on average; single pixels on sharp colour edges (4:2:0 chroma) are off by up to ~90.
JPEG_MEAN_ABS = 4.0
JPEG_MIN_PSNR_DB = 30.0


@pytest.fixture(scope="module")
def built(tmp_path_factory, build_once):
    """hmdb51 split1_20x64x64 and split1_20x64x64_raw from the same videos (2 classes x 6 videos, 4 train, 4 test)."""
    root = tmp_path_factory.mktemp("raw")
    manual = root / "manual"
    samples.write_hmdb51_layout(str(manual), classes=["wave", "run"], videos_per_class=6, num_frames=(12, 40),
                                height=60, width=80, splits=(1,), seed=5)
    data = root / "data"
    return manual, data, build_once(hmdb.Builder, "split1_20x64x64", manual, data), build_once(
        hmdb.Builder, "split1_20x64x64_raw", manual, data)


@pytest.fixture(scope="module")
def build_once():
    from conftest import in_process_config

    def build(builder_cls, config, manual, data):
        builder = builder_cls(data_dir=str(data), config=config)
        builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
        return builder

    return build


def _by_id(builder, split):
    return {ex["video_id"].decode(): ex for ex in tfds.as_numpy(builder.as_dataset(split=split))}


def test_raw_configs_are_named_not_built_by_default():
    names = [c.name for c in hmdb.Builder.all_configs()]
    assert "split1_20x64x64_raw" in names and "split3_16x112x112_raw" in names
    assert [c.name for c in hmdb.Builder.BUILDER_CONFIGS] == ["split1_20x64x64"]  # `tfds build hmdb51`: one pass
    raw = hmdb.Builder(config="split2_20x64x64_raw", data_dir="/nonexistent")
    feature = raw.info.features["video"]
    assert type(feature) is tfds.features.Tensor and feature.shape == (20, 64, 64, 3) and feature.np_dtype == np.uint8
    assert frames.is_raw_video(feature) and frames.stored_as_bytes(feature) and not frames.is_encoded_video(feature)
    assert "20x64x64_raw" in [c.name for c in vfb.Builder.all_configs()]  # video_folder offers the same geometries
    with pytest.raises(ValueError, match="fixed-length clips only"):
        clips.ClipSpec(num_frames=None, height=64, width=64, image_format="raw")
    with pytest.raises(ValueError, match="fixed-length clips only"):
        hmdb.Builder(config=hmdb.Hmdb51Config(name="all_raw", num_frames=None, height=64, width=64, image_format="raw"),
                     data_dir="/nonexistent").info


def test_raw_equals_the_decoded_resized_frames_and_jpeg_within_its_error(built):
    manual, _, jpeg, raw = built
    for split in ("train", "test"):
        raw_ex, jpeg_ex = _by_id(raw, split), _by_id(jpeg, split)
        assert sorted(raw_ex) == sorted(jpeg_ex) and raw_ex
        for vid, r in raw_ex.items():
            j = jpeg_ex[vid]
            assert r["video"].shape == j["video"].shape == (20, 64, 64, 3) and r["video"].dtype == np.uint8
            for name in ("mask", "frame_indices", "label", "num_frames", "fps"):
                np.testing.assert_array_equal(r[name], j[name])
            # Exactly what the build decoded from the source: OpenCV's frames at the stored indices, resized.
            real = int(r["mask"].sum())
            path = next(p for p in (manual / "hmdb51_org").rglob(vid))
            source = video.decode_frames(str(path), r["frame_indices"][:real], size=(64, 64), resize_mode="resize")
            np.testing.assert_array_equal(r["video"][:real], source.frames)
            assert r["video"][real:].max(initial=0) == 0
            diff = np.abs(r["video"].astype(np.int16) - j["video"].astype(np.int16))
            psnr = 10 * np.log10(255.0**2 / max(float(np.mean(diff.astype(np.float64) ** 2)), 1e-12))
            assert diff.mean() < JPEG_MEAN_ABS and psnr > JPEG_MIN_PSNR_DB, (vid, diff.mean(), psnr)
            assert r["video"].std() > 10  # real content, not blank frames that would match anything


def test_raw_config_stores_and_reads_through_plain_tfds_load(built):
    _, data, _, raw = built
    ds = tfds.load("hmdb51/split1_20x64x64_raw", split="train", data_dir=str(data), as_supervised=True)
    video_spec, label_spec = ds.element_spec
    assert video_spec.shape == (20, 64, 64, 3) and video_spec.dtype == tf.uint8 and label_spec.dtype == tf.int64
    reference = _by_id(raw, "train")
    got = list(tfds.as_numpy(ds))
    assert len(got) == len(reference)
    stored = {ex["video"].tobytes() for ex in reference.values()}
    assert {v.tobytes() for v, _ in got} == stored
    # Storage: one bytes value of T*H*W*3 per clip, no per-frame encoding.
    raw_info, jpeg_info = raw.info.splits["train"], built[2].info.splits["train"]
    assert raw_info.num_bytes >= raw_info.num_examples * 20 * 64 * 64 * 3
    assert raw_info.num_bytes / raw_info.num_examples > 4 * jpeg_info.num_bytes / jpeg_info.num_examples


@pytest.mark.slow
def test_vidvol_load_raw_is_tfds_frames_over_255_and_close_to_jpeg(built):
    _, _, jpeg, raw = built
    reference = _by_id(raw, "test")
    names = ReadSpec(output=Output(features=["video", "mask", "label", "video_id"]))
    got_raw = {vid.decode(): (v, m) for b in tfds.as_numpy(vidvol.load(raw, "test", 3, spec=names))
               for v, m, vid in zip(b["video"], b["mask"], b["video_id"])}
    got_jpeg = {vid.decode(): v for b in tfds.as_numpy(vidvol.load(jpeg, "test", 3, spec=names))
                for v, vid in zip(b["video"], b["video_id"])}
    assert sorted(got_raw) == sorted(reference) == sorted(got_jpeg)
    for vid, (v, m) in got_raw.items():
        assert v.dtype == np.float32 and v.shape == (20, 64, 64, 3)
        np.testing.assert_allclose(v, reference[vid]["video"].astype(np.float32) / 255.0, atol=1e-6)
        np.testing.assert_array_equal(m, reference[vid]["mask"])
        assert np.abs(v - got_jpeg[vid]).mean() * 255 < JPEG_MEAN_ABS
    # Supervised output at a static batch (training): frames float32 in [0, 1], mask float32, one parse per batch.
    (x, mask), label = next(iter(vidvol.load(raw, "train", 2, seed=1)))
    assert x.shape == (2, 20, 64, 64, 3) and x.dtype == tf.float32 and mask.dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1.0 and float(tf.reduce_max(x)) > 0.2


def test_batch_parser_decodes_raw_frames_in_one_decode_raw(built):
    _, _, _, raw = built
    features = raw.info.features
    parser = BatchParser(features, ["video", "mask", "label"], ["video"])
    assert parser.raw == ("video",) and parser.videos == ()
    files = [str(p) for p in raw.data_path.glob("hmdb51-train.tfrecord-*")]
    serialized = next(iter(tf.data.TFRecordDataset(sorted(files)).batch(3)))
    fn = tf.function(parser.parse)
    out = fn(serialized)
    graph = fn.get_concrete_function(serialized).graph
    assert [op.type for op in graph.get_operations()].count("DecodeRaw") == 1
    assert not any(op.type in ("While", "StatelessWhile", "TensorListReserve") for op in graph.get_operations())
    for i in range(int(serialized.shape[0])):
        one = features.deserialize_example(serialized[i])
        np.testing.assert_array_equal(out["video"][i].numpy(), one["video"].numpy())
        np.testing.assert_array_equal(out["mask"][i].numpy(), one["mask"].numpy())


@pytest.mark.slow
def test_read_time_clips_and_per_example_path_agree_on_raw(built):
    _, _, jpeg, raw = built
    kwargs = dict(spec=ReadSpec(clips=Clips(length=8, stride=2, eval_clips=2),
                                output=Output(features=["video", "mask", "video_id"])))
    a = {vid.decode(): (v, m) for b in tfds.as_numpy(vidvol.load(raw, "test", 2, **kwargs))
         for v, m, vid in zip(b["video"], b["mask"], b["video_id"])}
    b = {vid.decode(): v for bt in tfds.as_numpy(vidvol.load(jpeg, "test", 2, **kwargs))
         for v, vid in zip(bt["video"], bt["video_id"])}
    reference = _by_id(raw, "test")
    assert sorted(a) == sorted(b) == sorted(reference)
    for vid, (v, m) in a.items():
        assert v.shape == (2, 8, 64, 64, 3) and m.shape == (2, 8)
        assert np.abs(v - b[vid]).mean() * 255 < JPEG_MEAN_ABS
        full = reference[vid]["video"].astype(np.float32) / 255.0
        for clip in range(2):  # every valid slot is one of the stored frames, invalid slots are zero
            for t in range(8):
                if m[clip, t]:
                    assert any(np.allclose(v[clip, t], f, atol=1e-6) for f in full)
                else:
                    assert v[clip, t].max() == 0
    # Per-example parse (TFDS's own Tensor decode) gives the same batches as the per-batch decode_raw.
    ids = ReadSpec(output=Output(features=["video", "video_id"]))
    slow = list(tfds.as_numpy(vidvol.load(raw, "test", 2, spec=ids, tuning=Tuning(parse_per_batch=False))))
    fast = list(tfds.as_numpy(vidvol.load(raw, "test", 2, spec=ids)))
    for x, y in zip(slow, fast):
        np.testing.assert_array_equal(x["video"], y["video"])
        np.testing.assert_array_equal(x["video_id"], y["video_id"])


def test_random_access_reader_reads_raw_frames(built, tmp_path):
    manual = built[0]
    builder = hmdb.Builder(data_dir=str(tmp_path), config="split1_20x64x64_raw", file_format="array_record")
    from conftest import in_process_config

    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    source = vidvol.data_source(builder, "test")
    reference = _by_id(built[3], "test")
    ex = source[0]
    assert ex["video"].dtype == np.uint8 and ex["video"].shape == (20, 64, 64, 3)
    np.testing.assert_array_equal(ex["video"], reference[ex["video_id"].decode()]["video"])
    batches = vidvol.grain_dataset(builder, "test", 2, training=False, spec=ReadSpec(clips=Clips(length=8)))
    (x, mask), _ = next(iter(batches))
    assert x.shape == (2, 8, 64, 64, 3) and x.dtype == np.float32 and mask.shape == (2, 8)
    assert os.path.isdir(builder.data_dir)
