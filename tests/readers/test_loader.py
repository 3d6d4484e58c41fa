"""vidvol.load: model-ready streaming reads over datasets built by the real Beam pipeline.

Each dataset is built once per module (in-process Beam) from sample inputs written with real
encoders; values are checked against stock `tfds.load` reads of the same files.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from batch_checks import assert_same_batches  # tests/batch_checks.py (tests/ on sys.path)
from in_process_build import build as _build  # tests/in_process_build.py (tests/ on sys.path)
import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec, Tuning
from vidvol.readers import clip_sampling
from vidvol.readers.tfdata import load as readers_api
from vidvol.readers.tfdata.batch_parser import BatchParser
from vidvol import readers
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples


@pytest.fixture(scope="module")
def hmdb_dirs(tmp_path_factory):
    """Sample HMDB51 layout: 3 classes x 6 videos of 8-30 frames (split 1: 6 train, 6 test)."""
    root = tmp_path_factory.mktemp("hmdb")
    samples.write_hmdb51_layout(
        str(root / "manual"), videos_per_class=6, num_frames=(8, 30), height=48, width=64, splits=(1,), seed=3
    )
    return root / "manual", root / "data"


@pytest.fixture(scope="module")
def hmdb_fixed(hmdb_dirs):
    """hmdb51/split1_20x64x64 (the default config), 4 shards per split."""
    return _build(hmdb.Builder, "split1_20x64x64", *hmdb_dirs)


@pytest.fixture(scope="module")
def hmdb_all(hmdb_dirs):
    """hmdb51/split1_all_112x112: every frame, variable length."""
    return _build(hmdb.Builder, "split1_all_112x112", *hmdb_dirs)


def _by_id(builder, split: str) -> dict[str, dict]:
    """Stock tfds reads of a split, keyed by video_id."""
    return {ex["video_id"].decode(): ex for ex in tfds.as_numpy(builder.as_dataset(split=split))}


def _ids(ds) -> list[str]:
    """All video_ids a dict-output dataset yields, in order."""
    return [i.decode() for b in tfds.as_numpy(ds) for i in b["video_id"]]


# ----------------------------------------------------------------------------------------------
# Structure, shapes and values


def test_public_names_are_exported():
    assert vidvol.load is readers.load
    assert vidvol.load_labels is readers.load_labels


def test_static_shapes_of_tfds_load_and_loader(hmdb_fixed, hmdb_dirs):
    stock = tfds.load("hmdb51/split1_20x64x64", split="train", data_dir=str(hmdb_dirs[1]))
    for spec in tf.nest.flatten(stock.element_spec):
        assert None not in spec.shape, spec
    train = readers.load(hmdb_fixed, "train", 4)
    (video, mask), label = train.element_spec
    assert video.shape == (4, 20, 64, 64, 3) and video.dtype == tf.float32
    assert mask.shape == (4, 20) and mask.dtype == tf.float32
    assert label.shape == (4,) and label.dtype == tf.int64
    test = readers.load(hmdb_fixed, "test", 4)
    for spec in tf.nest.flatten(test.element_spec):
        assert spec.shape[0] is None and None not in spec.shape[1:], spec


def _fixed_configs():
    """(builder class, config name) of every fixed-shape config of the three datasets (hmdb51: split 1)."""
    out = []
    for cls in (hmdb.Builder, fire.Builder, mri.Builder):
        for config in cls.all_configs():
            if cls is hmdb.Builder and (not config.name.startswith("split1_") or config.num_frames is None):
                continue
            # The fast lane keeps each dataset's smallest fixed config; every other config runs in `make test`.
            big = config.name not in ("split1_20x64x64", "161x135x240", "small_32")
            out.append(pytest.param(cls, config.name, id=f"{cls.name}/{config.name}",
                                    marks=[pytest.mark.slow] if big else []))
    return out


@pytest.fixture(scope="module")
def manual_dirs(tmp_path_factory, hmdb_dirs):
    """Tiny sample inputs for every dataset, written once."""
    root = tmp_path_factory.mktemp("inputs")
    samples.write_fire_hrr_frames(str(root / "fire"), experiments=(("exp_a", 5), ("exp_b", 3)), height=36, width=64)
    samples.write_mri_volumes(str(root / "mri"), num_subjects=2, shape=(20, 24, 18), with_split=False)
    return {"hmdb51": hmdb_dirs[0], "fire_hrr": root / "fire", "mri_volumes": root / "mri"}


@pytest.mark.parametrize("builder_cls,config", _fixed_configs())
def test_every_fixed_config_has_static_shapes(builder_cls, config, manual_dirs, tmp_path):
    builder = _build(builder_cls, config, manual_dirs[builder_cls.name], tmp_path)
    stock = tfds.load(f"{builder_cls.name}/{config}", split="train", data_dir=str(tmp_path))
    for spec in tf.nest.flatten(stock.element_spec):
        assert None not in spec.shape, spec
    for spec in tf.nest.flatten(readers.load(builder, "train", 2, training=True).element_spec):
        assert spec.shape[0] == 2 and None not in spec.shape, spec
    for spec in tf.nest.flatten(readers.load(builder, "train", 2, training=False).element_spec):
        assert spec.shape[0] is None and None not in spec.shape[1:], spec


def test_eval_values_match_tfds_load(hmdb_fixed):
    reference = _by_id(hmdb_fixed, "test")
    ds = readers.load(hmdb_fixed, "test", 4, spec=ReadSpec(output=Output(features=["video", "mask", "label", "video_id"])))
    seen = []
    for batch in tfds.as_numpy(ds):
        for video, mask, label, vid in zip(batch["video"], batch["mask"], batch["label"], batch["video_id"]):
            ref = reference[vid.decode()]
            np.testing.assert_allclose(video, ref["video"].astype(np.float32) / 255.0, atol=1e-6)
            np.testing.assert_array_equal(mask, ref["mask"])
            assert label == ref["label"]
            seen.append(vid.decode())
    assert sorted(seen) == sorted(reference)


def test_supervised_output_is_video_mask_label(hmdb_fixed):
    reference = _by_id(hmdb_fixed, "test")
    ds = readers.load(hmdb_fixed, "test", 16)
    (video, mask), label = next(iter(ds))
    assert video.shape[0] == len(reference) == label.shape[0]
    ref_labels = sorted(int(r["label"]) for r in reference.values())
    assert sorted(label.numpy().tolist()) == ref_labels
    assert mask.dtype == tf.float32 and set(np.unique(mask.numpy())) <= {0.0, 1.0}
    assert 0.0 <= float(tf.reduce_min(video)) and float(tf.reduce_max(video)) <= 1.0


def test_normalization_and_resize(hmdb_fixed):
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    out = Output(features=["video", "video_id"])
    plain = next(iter(readers.load(hmdb_fixed, "test", 3, training=False, spec=ReadSpec(output=out))))
    normed = next(iter(readers.load(hmdb_fixed, "test", 3, training=False,
                                    spec=ReadSpec(normalize=Normalize(mean, std), output=out))))
    resized = next(iter(readers.load(hmdb_fixed, "test", 3, training=False,
                                     spec=ReadSpec(normalize=Normalize(mean, std, resize=(24, 40)), output=out))))
    assert plain["video_id"].numpy().tolist() == normed["video_id"].numpy().tolist()
    expected = (plain["video"].numpy() - np.array(mean, np.float32)) / np.array(std, np.float32)
    np.testing.assert_allclose(normed["video"].numpy(), expected, atol=1e-5)
    assert resized["video"].shape == (3, 20, 24, 40, 3)
    frame = tf.image.resize(normed["video"][1, 7], (24, 40), method="bilinear")
    np.testing.assert_allclose(resized["video"][1, 7].numpy(), frame.numpy(), atol=1e-5)


def test_lean_memory_mode_gives_the_same_batches(hmdb_fixed, caplog):
    caplog.set_level("INFO", logger=readers_api.__name__)
    spec = ReadSpec(normalize=Normalize(mean=0.5, std=0.25))
    fast = list(readers.load(hmdb_fixed, "test", 4, spec=spec))
    lean = list(readers.load(hmdb_fixed, "test", 4, spec=spec, tuning=Tuning(memory_budget_bytes=2**20)))
    assert "lean memory mode" in caplog.text
    assert len(fast) == len(lean) == 2
    for ((xf, mf), yf), ((xl, ml), yl) in zip(fast, lean):
        np.testing.assert_allclose(xf.numpy(), xl.numpy(), atol=1e-5)
        np.testing.assert_array_equal(mf.numpy(), ml.numpy())
        np.testing.assert_array_equal(yf.numpy(), yl.numpy())


def test_parse_per_batch_matches_tfds_per_example_parse(hmdb_fixed, caplog):
    caplog.set_level("INFO", logger=readers_api.__name__)
    kw = dict(seed=5, spec=ReadSpec(normalize=Normalize(mean=0.5, std=0.25)))
    per_batch = list(readers.load(hmdb_fixed, "train", 2, **kw))
    per_example = list(readers.load(hmdb_fixed, "train", 2, tuning=Tuning(parse_per_batch=False), **kw))
    assert re.findall(r"parse per (\w+)", caplog.text) == ["batch", "example"]
    assert_same_batches(per_batch, per_example)  # same values, same order under a seed
    feats = ReadSpec(output=Output(features=["video_id", "label", "mask", "num_frames", "fps", "frame_indices"]))
    by_batch = list(readers.load(hmdb_fixed, "test", 4, spec=feats))
    by_example = list(readers.load(hmdb_fixed, "test", 4, spec=feats, tuning=Tuning(parse_per_batch=False)))
    assert_same_batches(by_batch, by_example)  # eval: partial last batch, scalars and text too
    assert BatchParser.for_features(hmdb_fixed.info.features, ["video", "label"], ["video"]) is not None


def test_variable_length_features_are_parsed_per_example(hmdb_all, caplog):
    caplog.set_level("INFO", logger=readers_api.__name__)
    features = hmdb_all.info.features
    assert BatchParser.for_features(features, ["video", "label"], ["video"]) is None
    assert BatchParser.for_features(features, ["label", "num_frames"], []) is not None
    readers.load(hmdb_all, "train", 2, spec=ReadSpec(clips=Clips(length=4)), seed=0)
    assert "parse per example" in caplog.text


def test_drop_remainder_in_training_only(hmdb_fixed):
    assert [int(b[1].shape[0]) for b in readers.load(hmdb_fixed, "train", 4, seed=0)] == [4]
    assert [int(b[1].shape[0]) for b in readers.load(hmdb_fixed, "train", 4, training=False)] == [4, 2]


@pytest.mark.slow  # ten pipelines (make test); the fast lane keeps test_training_clips_decode_the_sampled_frames_and_vary_per_epoch
def test_training_epoch_covers_split_and_is_deterministic_under_seed(hmdb_fixed):
    all_ids = sorted(_by_id(hmdb_fixed, "train"))
    ids_labels = ReadSpec(output=Output(features=["video_id", "label"]))
    ds = readers.load(hmdb_fixed, "train", 1, seed=7, spec=ids_labels)
    first, second = _ids(ds), _ids(ds)
    assert sorted(first) == sorted(second) == all_ids
    again = readers.load(hmdb_fixed, "train", 1, seed=7, spec=ids_labels)
    assert _ids(again) == first and _ids(again) == second
    ids = ReadSpec(output=Output(features=["video_id"]))
    orders = {tuple(_ids(readers.load(hmdb_fixed, "train", 1, seed=s, spec=ids))) for s in range(6)}
    assert len(orders | {tuple(first), tuple(second)}) > 1


def test_load_labels_reads_only_the_target_in_eval_order(hmdb_fixed, hmdb_dirs):
    labels = readers.load_labels("hmdb51/split1_20x64x64", "test", data_dir=hmdb_dirs[1])
    eval_labels = np.concatenate([y.numpy() for _, y in readers.load(hmdb_fixed, "test", 4)])
    np.testing.assert_array_equal(labels, eval_labels)
    assert labels.dtype == np.int64 and labels.shape == (6,)
    ds = readers.load(hmdb_fixed, "test", 2, spec=ReadSpec(output=Output(features=["label", "video_id"])))
    assert set(ds.element_spec) == {"label", "video_id"}


def test_training_order_is_a_whole_split_permutation(hmdb_fixed, caplog):
    """The order is a permutation of the whole split, recomputed from (seed, epoch) (`readers.order`): no buffer."""
    per_example = readers.example_bytes(hmdb_fixed, "train")
    info = hmdb_fixed.info.splits["train"]
    assert per_example == pytest.approx(info.num_bytes / info.num_examples)
    caplog.set_level("INFO", logger=readers_api.__name__)
    ids = ReadSpec(output=Output(features=["video_id"]))
    plain = _ids(readers.load(hmdb_fixed, "train", 1, seed=4, spec=ids))
    assert _ids(readers.load(hmdb_fixed, "train", 1, seed=4, spec=ids)) == plain
    assert sorted(plain) == sorted(_by_id(hmdb_fixed, "train")) and plain != sorted(plain)
    assert "order: whole-split permutation per epoch" in caplog.text


def test_cycle_length_rule():
    assert readers.default_cycle_length(4, num_cpus=2) == 4
    assert readers.default_cycle_length(100, num_cpus=2) == 4
    assert readers.default_cycle_length(100, num_cpus=64) == readers.MAX_CYCLE_LENGTH
    assert readers.default_cycle_length(1, num_cpus=8) == 1


def test_two_input_pipelines_read_disjoint_files_covering_the_split(hmdb_fixed):
    assert hmdb_fixed.info.splits["train"].num_shards >= 2
    reads = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2)
        ds = readers.load(hmdb_fixed, "train", 1, seed=1, input_context=context,
                          spec=ReadSpec(output=Output(features=["video_id"])))
        reads.append(_ids(ds))
    assert reads[0] and reads[1]
    assert not set(reads[0]) & set(reads[1])
    assert sorted(reads[0] + reads[1]) == sorted(_by_id(hmdb_fixed, "train"))


def test_distribute_feeds_a_strategy(hmdb_fixed):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = readers.distribute(strategy, hmdb_fixed, "train", 4, seed=0)
    (video, mask), label = next(iter(dist))
    assert video.shape == (4, 20, 64, 64, 3) and mask.shape == (4, 20) and label.shape == (4,)


def test_more_pipelines_than_shards_read_equal_shares_more_than_examples_is_a_clear_error(hmdb_fixed):
    """The release before refused more pipelines than shard files; shares are now counted in examples."""
    shards = hmdb_fixed.info.splits["train"].num_shards
    examples = hmdb_fixed.info.splits["train"].num_examples
    reads = [_ids(readers.load(hmdb_fixed, "train", 1, seed=0, spec=ReadSpec(output=Output(features=["video_id"])),
                               input_context=tf.distribute.InputContext(num_input_pipelines=shards + 1, input_pipeline_id=p)))
             for p in range(shards + 1)]
    assert {len(r) for r in reads} == {examples // (shards + 1)}
    context = tf.distribute.InputContext(num_input_pipelines=examples + 1, input_pipeline_id=0)
    with pytest.raises(readers.ShardingError, match=rf"{examples + 1} input pipelines over {examples} examples"):
        readers.load(hmdb_fixed, "train", 1, input_context=context)


def test_unprepared_dataset_and_bad_arguments(tmp_path, hmdb_fixed):
    with pytest.raises(readers.DatasetNotPreparedError, match="not prepared"):
        readers.load("hmdb51/split1_20x64x64", "train", 2, data_dir=tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        readers.load(hmdb_fixed, "train", 0)
    with pytest.raises(ValueError, match="unknown features"):
        readers.load(hmdb_fixed, "train", 2, spec=ReadSpec(output=Output(inputs=("video", "nope"))))
    with pytest.raises(ValueError, match="no video feature|none of"):
        readers.load(hmdb_fixed, "train", 2, spec=ReadSpec(clips=Clips(length=4), output=Output(features=["label"])))


# ----------------------------------------------------------------------------------------------
# Clip sampling (pure functions, then the all-frames config)


def test_random_clip_starts_are_uniform_over_fitting_starts():
    spec = clip_sampling.ClipWindow(clip_length=4, stride=3)
    assert spec.span == 10
    starts = set()
    for s in range(200):
        indices, valid = clip_sampling.random_clip(tf.constant(15), spec, tf.constant([s, 1], tf.int64))
        indices = indices.numpy()
        assert valid.numpy().all()
        np.testing.assert_array_equal(np.diff(indices), [3, 3, 3])
        starts.add(int(indices[0]))
    assert starts == set(range(6))  # 15 frames, span 10: starts 0..5
    short, valid = clip_sampling.random_clip(tf.constant(5), spec, tf.constant([0, 0], tf.int64))
    np.testing.assert_array_equal(short.numpy(), [0, 3, 4, 4])
    np.testing.assert_array_equal(valid.numpy(), [True, True, False, False])


def test_even_clips_are_evenly_spaced_and_masked_past_the_end():
    spec = clip_sampling.ClipWindow(clip_length=3, stride=2, eval_clips=3)
    indices, valid = clip_sampling.even_clips(tf.constant(25), spec)
    top = 25 - spec.span
    np.testing.assert_array_equal(indices.numpy()[:, 0], np.round(np.linspace(0, top, 3)).astype(int))
    assert valid.numpy().all()
    indices, valid = clip_sampling.even_clips(tf.constant(4), spec)
    np.testing.assert_array_equal(indices.numpy(), [[0, 2, 3]] * 3)
    np.testing.assert_array_equal(valid.numpy(), [[True, True, False]] * 3)
    middle, _ = clip_sampling.even_clips(tf.constant(11), clip_sampling.ClipWindow(clip_length=3))
    np.testing.assert_array_equal(middle.numpy(), [[4, 5, 6]])
    with pytest.raises(ValueError, match="clip_length"):
        clip_sampling.ClipWindow(clip_length=0)


def test_all_frames_config_needs_clip_length(hmdb_all):
    with pytest.raises(ValueError, match=r"variable number of frames.*Clips\(length=T\)"):
        readers.load(hmdb_all, "train", 2)


def _check_clip(video, mask, frame_indices, ref, stride):
    """A sampled clip matches the stored frames at its indices; slots past the end are zero."""
    n = ref["video"].shape[0]
    valid = mask > 0
    first = int(frame_indices[0])
    expected = first + stride * np.arange(len(mask))
    np.testing.assert_array_equal(valid, expected < n)
    np.testing.assert_array_equal(frame_indices[valid], ref["frame_indices"][expected[valid]])
    np.testing.assert_allclose(video[valid], ref["video"][expected[valid]].astype(np.float32) / 255.0, atol=1e-6)
    assert not video[~valid].any() and not frame_indices[~valid].any()
    return first


def test_training_clips_decode_the_sampled_frames_and_vary_per_epoch(hmdb_all):
    reference = _by_id(hmdb_all, "train")
    lengths = sorted(r["video"].shape[0] for r in reference.values())
    stride = lengths[0] // 3 + 1  # the shortest video is shorter than a clip's span (3 * stride + 1)
    assert lengths[-1] >= 3 * stride + 3  # and the longest has several starts to draw from
    kw = dict(seed=5, spec=ReadSpec(clips=Clips(length=4, stride=stride),
                                    output=Output(features=["video", "mask", "frame_indices", "video_id"])))
    ds = readers.load(hmdb_all, "train", 2, **kw)
    assert ds.element_spec["video"].shape == (2, 4, 112, 112, 3)
    epochs = []
    for _ in range(2):
        starts = {}
        for batch in tfds.as_numpy(ds):
            for video, mask, idx, vid in zip(batch["video"], batch["mask"], batch["frame_indices"], batch["video_id"]):
                starts[vid.decode()] = _check_clip(video, mask, idx, reference[vid.decode()], stride)
        epochs.append(starts)
    assert len(epochs[0]) == 6
    again = {}
    for batch in tfds.as_numpy(readers.load(hmdb_all, "train", 2, **kw)):
        again.update({v.decode(): int(i[0]) for v, i in zip(batch["video_id"], batch["frame_indices"])})
    assert again == epochs[0]  # same seed, same clips
    assert epochs[0] != epochs[1]  # a new draw each epoch


def test_eval_takes_n_evenly_spaced_clips(hmdb_all):
    reference = _by_id(hmdb_all, "test")
    ds = readers.load(hmdb_all, "test", 4, spec=ReadSpec(
        clips=Clips(length=5, stride=2, eval_clips=3),
        output=Output(features=["video", "mask", "frame_indices", "video_id", "label"]),
    ))
    assert ds.element_spec["video"].shape.as_list() == [None, 3, 5, 112, 112, 3]
    seen = 0
    for batch in tfds.as_numpy(ds):
        for video, mask, idx, vid in zip(batch["video"], batch["mask"], batch["frame_indices"], batch["video_id"]):
            ref = reference[vid.decode()]
            n = ref["video"].shape[0]
            starts = [_check_clip(video[c], mask[c], idx[c], ref, 2) for c in range(3)]
            assert starts == np.round(np.linspace(0, max(n - 9, 0), 3)).astype(int).tolist()
            seen += 1
    assert seen == len(reference)
    (video, mask), label = next(iter(readers.load(hmdb_all, "test", 4, spec=ReadSpec(clips=Clips(5, eval_clips=3)))))
    assert video.shape == (4, 3, 5, 112, 112, 3) and mask.shape == (4, 3, 5) and label.shape == (4,)


# ----------------------------------------------------------------------------------------------
# fire_hrr and mri_volumes: the same loader, driven by their features and supervised keys


@pytest.fixture(scope="module")
def fire_small(tmp_path_factory):
    """fire_hrr/161x135x240 over two sample experiments (12 and 7 frames)."""
    root = tmp_path_factory.mktemp("fire")
    expected = samples.write_fire_hrr_frames(str(root / "manual"))
    return _build(fire.Builder, "161x135x240", root / "manual", root / "data"), expected


def test_fire_hrr_batches_are_video_mask_hrr(fire_small):
    builder, expected = fire_small
    ds = readers.load(builder, "train", 2, seed=0)
    (video, mask), hrr = ds.element_spec
    assert video.shape == (2, 161, 135, 240, 3) and mask.shape == (2, 161) and hrr.shape == (2, 161)
    (video, mask), hrr = next(iter(ds))
    lengths = sorted(int(m) for m in tf.reduce_sum(mask, axis=1).numpy())
    assert lengths == sorted(len(e["hrr"]) for e in expected.values())
    for row_mask, row_hrr, row_video in zip(mask.numpy(), hrr.numpy(), video.numpy()):
        n = int(row_mask.sum())
        match = [e for e in expected.values() if len(e["hrr"]) == n][0]
        np.testing.assert_allclose(row_hrr[:n], match["hrr"], rtol=1e-5)
        assert not row_hrr[n:].any() and not row_video[n:].any() and row_video[:n].max() > 0.5


def test_mri_batches_are_volume_mask_label_without_rescaling(mri_small):
    train = readers.load(mri_small, "train", 2, seed=0)
    (volume, mask), label = train.element_spec
    assert volume.shape == (2, 32, 32, 32) and volume.dtype == tf.float32
    assert mask.shape == (2, 32, 32, 32) and label.shape == (2,)
    reference = {ex["path"].decode(): ex for ex in tfds.as_numpy(mri_small.as_dataset(split="train"))}
    ds = readers.load(mri_small, "train", 3, training=False, spec=ReadSpec(output=Output(features=["volume", "mask", "path"])))
    batch = next(iter(tfds.as_numpy(ds)))
    assert len(batch["path"]) == 3
    for volume, mask, path in zip(batch["volume"], batch["mask"], batch["path"]):
        np.testing.assert_array_equal(volume, reference[path.decode()]["volume"])  # float: no /255
        np.testing.assert_array_equal(mask, reference[path.decode()]["mask"])
    assert readers.load_labels(mri_small, "train").shape == (3,)


def test_mri_parse_per_batch_decodes_volume_and_box_mask_like_tfds(mri_small):
    kw = dict(seed=1, spec=ReadSpec(output=Output(features=["volume", "mask", "label", "affine", "original_shape"])))
    per_batch = list(readers.load(mri_small, "train", 2, **kw))
    per_example = list(readers.load(mri_small, "train", 2, tuning=Tuning(parse_per_batch=False), **kw))
    assert_same_batches(per_batch, per_example)
    assert per_batch[0]["mask"].dtype == tf.uint8 and per_batch[0]["mask"].shape == (2, 32, 32, 32)
    assert int(tf.reduce_sum(tf.cast(per_batch[0]["mask"], tf.int64))) > 0


# ----------------------------------------------------------------------------------------------
# TFDS private API: the public fallback gives the same batches

_PUBLIC_ONLY_SCRIPT = """
import sys, numpy as np, tensorflow_datasets as tfds
import vidvol
from vidvol.core import tfds_api
assert not any(tfds_api.available(n) for n in ("read_files", "example_parser", "filename_template"))
builder = tfds.builder("hmdb51/split1_20x64x64", data_dir=sys.argv[1])
batches = list(tfds.as_numpy(vidvol.load(builder, "train", 2, seed=0)))
np.savez(sys.argv[2], video=np.stack([b[0][0] for b in batches]), mask=np.stack([b[0][1] for b in batches]),
         label=np.stack([b[1] for b in batches]))
print("TEMPLATE", tfds_api.filename_template(builder, "train").sharded_filepath(shard_index=1, num_shards=4))
"""


@pytest.mark.long
@pytest.mark.slow
def test_public_fallback_gives_the_same_batches(hmdb_fixed, tmp_path):
    import os
    import subprocess
    import sys

    from vidvol.core import tfds_api

    assert tfds_api.available("read_files")  # this process takes the private (batch-parse) path
    out = tmp_path / "public.npz"
    env = dict(os.environ, **{tfds_api.PUBLIC_ONLY_ENV: "1"})
    proc = subprocess.run([sys.executable, "-c", _PUBLIC_ONLY_SCRIPT, str(hmdb_fixed.data_path.parents[2]), str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    public = np.load(out)
    private = list(tfds.as_numpy(readers.load(hmdb_fixed, "train", 2, seed=0)))
    np.testing.assert_array_equal(public["video"], np.stack([b[0][0] for b in private]))
    np.testing.assert_array_equal(public["mask"], np.stack([b[0][1] for b in private]))
    np.testing.assert_array_equal(public["label"], np.stack([b[1] for b in private]))
    template = tfds_api.filename_template(hmdb_fixed, "train").sharded_filepath(shard_index=1, num_shards=4)
    assert f"TEMPLATE {template}" in proc.stdout


@pytest.mark.parametrize("batch", [1, 3])
def test_a_finite_read_states_how_many_batches_it_yields(hmdb_fixed, batch):
    """Keras's evaluate/predict take their steps from the cardinality (unknown: a warning that the input 'ran out of
    data'); the count stated is the count yielded, for each pipeline of a multi-host evaluation too."""
    reads = [readers.load(hmdb_fixed, split, batch, training=training, seed=0)
             for split, training in (("test", False), ("train", False), ("train", True))]
    reads += [readers.load(hmdb_fixed, "test", batch, training=False,
                           input_context=tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=p))
              for p in range(3)]
    for ds in reads:
        assert int(ds.cardinality()) >= 0
        assert int(ds.cardinality()) == sum(1 for _ in ds)
