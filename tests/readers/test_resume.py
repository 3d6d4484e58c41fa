"""Stopping and resuming `vidvol.load`: an iterator checkpoint is a few KiB of state, restored exactly in a fresh process.

Every kind of pipeline (batch parse, per-example parse with random clips, evaluation multi-clips,
host JPEG decode, fire_hrr windows, direct MRI volume reads, augmented MRI patches, lean mode, raw frames,
video_folder, read-time augmentation;
seeded and unseeded; `repeat` or not) is read for a while in this process, checkpointed with
`tf.train.Checkpoint(iterator=it)`, and read on; one fresh Python process then restores every
checkpoint into a pipeline made anew (with another seed, or none) and must give exactly the same
next batches, across the epoch boundary where the case repeats. Real builds of sample data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import resume_cases  # tests/resume_cases.py (tests/ on sys.path)
from batch_checks import assert_same_batches
from conftest import in_process_config
from in_process_build import build
import vidvol
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.datasets.video_folder import make_dummy_data as folder_dummy
from vidvol.datasets.video_folder import video_folder_dataset_builder as folder
from vidvol.readers import order
from vidvol.testing import samples

MAX_CHECKPOINT_BYTES = 16 << 10  # state, not data: a few KiB whatever the dataset (the target is 64 MiB)


@pytest.fixture(scope="module")
def resume_root(tmp_path_factory):
    """The module's folder: sample inputs under hmdb/, fire/ and mri/, every build under data/."""
    return tmp_path_factory.mktemp("resume")


@pytest.fixture(scope="module")
def hmdb_default(resume_root):
    """hmdb51/split1_20x64x64 alone (all the fast lane's case reads, so it builds no other config): its data_path."""
    root = resume_root
    samples.write_hmdb51_layout(str(root / "hmdb"), videos_per_class=6, num_frames=(8, 30), height=48, width=64,
                                splits=(1,), seed=3)
    return os.fspath(build(hmdb.Builder, "split1_20x64x64", root / "hmdb", root / "data").data_path)


@pytest.fixture(scope="module")
def built(resume_root, hmdb_default):
    """{name: data_path} of the builds the cases read (hmdb51 three configs, fire_hrr, mri_volumes, video_folder)."""
    root = resume_root
    samples.write_fire_hrr_frames(str(root / "fire"), experiments=(("exp_a", 12), ("exp_b", 7), ("exp_c", 9)),
                                  height=36, width=64)
    samples.write_mri_volumes(str(root / "mri"), num_subjects=6, with_split=True)
    out = {"split1_20x64x64": hmdb_default}
    for config in ("split1_all_112x112", "split1_20x64x64_raw"):
        out[config] = build(hmdb.Builder, config, root / "hmdb", root / "data").data_path
    out["fire"] = build(fire.Builder, "161x135x240", root / "fire", root / "data").data_path
    out["mri"] = build(mri.Builder, "small_32", root / "mri", root / "data").data_path
    builder = folder.Builder(data_dir=str(root / "data"))
    builder.download_and_prepare(download_config=in_process_config(manual_dir=os.path.join(folder_dummy.DUMMY_DIR, "folders")))
    out["folder"] = builder.data_path
    return {k: os.fspath(v) for k, v in out.items()}


def _per_epoch(case: dict) -> int:
    """Batches in one epoch of the case's pipeline."""
    builder = tfds.builder_from_directory(case["data_path"])
    n = builder.info.splits[case["split"]].num_examples
    return n // case["batch"]


# name: (build, split, batch, load kwargs, env, repeat across the epoch boundary)
CASES = {
    "hmdb_batch_parse_seeded_repeat": ("split1_20x64x64", "train", 2, {"seed": 3, "repeat": True}, None),
    "hmdb_batch_parse_unseeded": ("split1_20x64x64", "train", 2, {}, None),
    "hmdb_eval": ("split1_20x64x64", "test", 4, {}, None),
    "hmdb_random_clips_seeded_repeat": ("split1_20x64x64", "train", 2,
                                        {"seed": 5, "repeat": True, "spec": "ReadSpec(clips=Clips(length=8))"}, None),
    "hmdb_all_frames_clips_unseeded_repeat": ("split1_all_112x112", "train", 2,
                                              {"repeat": True, "spec": "ReadSpec(clips=Clips(length=4, stride=2))"}, None),
    "hmdb_all_frames_eval_multi_clips": ("split1_all_112x112", "test", 2,
                                         {"spec": "ReadSpec(clips=Clips(length=4, stride=2, eval_clips=3))"}, None),
    "hmdb_host_jpeg_decode_seeded_repeat": ("split1_20x64x64", "train", 2, {"seed": 1, "repeat": True},
                                            {"VIDVOL_JPEG_DECODE": "host"}),
    "hmdb_raw_frames_unseeded_repeat": ("split1_20x64x64_raw", "train", 2, {"repeat": True}, None),
    "hmdb_lean_mode_seeded": ("split1_20x64x64", "train", 2,
                              {"seed": 2, "tuning": "Tuning(memory_budget_bytes=2**20)"}, None),
    "fire_windows_host_decode_seeded_repeat": ("fire", "train", 1, {"seed": 4, "repeat": True},
                                               {"VIDVOL_JPEG_DECODE": "host"}),
    "fire_windows_unseeded": ("fire", "train", 1, {}, None),
    "mri_direct_reads_seeded_repeat": ("mri", "train", 2, {"seed": 6, "repeat": True}, None),
    "mri_direct_reads_eval": ("mri", "train", 2, {"training": False}, None),
    "mri_augmented_seeded_repeat": ("mri", "train", 2, {"seed": 9, "repeat": True, "spec": (
        "ReadSpec(augment=VolumeAugment(patch_size=(16, 16, 24), samples_per_volume=2, flip_prob=0.5, rotate_prob=0.5, "
        "scale_prob=0.5, scale_factors=0.1, shift_prob=0.5, shift_offsets=3.0))")}, None),
    "mri_augmented_unseeded_eval": ("mri", "train", 2, {"training": False, "spec": (
        "ReadSpec(augment=VolumeAugment(patch_size=(16, 16, 24), flip_prob=0.5))")}, None),
    "video_folder_seeded_repeat": ("folder", "train", 2, {"seed": 8, "repeat": True}, None),
    # Read-time augmentation: crops and flips drawn per (key, epoch, index), so a restore continues them exactly.
    "hmdb_augment_random_clips_seeded_repeat": ("split1_20x64x64", "train", 2, {
        "seed": 7, "repeat": True, "spec": "ReadSpec(clips=Clips(length=8), augment=VideoAugment(48))"}, None),
    "hmdb_augment_raw_frames_unseeded_repeat": ("split1_20x64x64_raw", "train", 2, {
        "repeat": True, "spec": "ReadSpec(augment=VideoAugment(40, training_crop='random_short_side_scale', min_size=48, "
                                "max_size=64))"}, None),
    "hmdb_augment_eval_multi_crop": ("split1_all_112x112", "test", 2, {
        "spec": "ReadSpec(clips=Clips(length=4, eval_clips=2), augment=VideoAugment(96, min_size=100, multi_crop=True))"},
        None),
}


def _cases(built, tmp_path) -> list[dict]:
    cases = []
    for name, (data, split, batch, kwargs, env) in CASES.items():
        case = dict(name=name, data_path=built[data], split=split, batch=batch, kwargs=kwargs, env=env,
                    checkpoint=str(tmp_path / name / "ckpt"), out=str(tmp_path / f"{name}.npz"),
                    restore_seed=(kwargs["seed"] + 1000 if "seed" in kwargs else None))
        per_epoch = max(1, _per_epoch(case))
        if kwargs.get("repeat"):
            case["skip"], case["batches"] = per_epoch - 1, 4  # the next batches cross into the second epoch
        else:
            case["skip"], case["batches"] = per_epoch // 2, per_epoch  # the rest of the epoch (and its end)
        cases.append(case)
    return cases


@pytest.mark.long
@pytest.mark.slow
def test_every_pipeline_resumes_exactly_in_a_fresh_process(built, tmp_path):
    cases = _cases(built, tmp_path)
    expected, sizes = {}, {}
    for case in cases:
        expected[case["name"]], sizes[case["name"]] = resume_cases.save(case, case["skip"], case["batches"])
        assert expected[case["name"]], case["name"]
    listing = tmp_path / "cases.json"
    listing.write_text(json.dumps(cases))
    script = os.path.join(os.path.dirname(resume_cases.__file__), "resume_cases.py")
    proc = subprocess.run([sys.executable, script, str(listing)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-6000:]
    for case in cases:
        name = case["name"]
        got = np.load(case["out"])
        want = expected[name]
        assert int(got["count"]) == len(want), name
        for i, batch in enumerate(want):
            for j, tensor in enumerate(batch):
                np.testing.assert_array_equal(got[f"b{i}_{j}"], tensor, err_msg=f"{name}: batch {i}, tensor {j}")
        assert 0 < sizes[name] <= MAX_CHECKPOINT_BYTES, (name, sizes[name])


def test_a_restored_iterator_continues_in_this_process_too(hmdb_default, tmp_path):
    """The same contract without a second process (the fast lane's check): seeded, across the epoch boundary."""
    case = dict(data_path=hmdb_default, split="train", batch=2, kwargs={"seed": 3, "repeat": True},
                checkpoint=str(tmp_path / "c" / "ckpt"), restore_seed=77)
    skip = _per_epoch(case) - 1
    after, size = resume_cases.save(case, skip, 4)
    assert size <= MAX_CHECKPOINT_BYTES
    assert_same_batches(resume_cases.restore(case, 4), after)
    uninterrupted = resume_cases.take(iter(resume_cases.make(case)), skip + 4)[skip:]
    assert_same_batches(uninterrupted, after)


@pytest.mark.slow
def test_a_rebuilt_dataset_refuses_the_old_checkpoint(built, tmp_path):
    """Another build of the same dataset, config and version (other inputs): the restore must fail, naming both
    builds, the dataset and what to do, instead of resuming on other examples."""
    root = tmp_path / "rebuilt"
    samples.write_hmdb51_layout(str(root / "hmdb"), videos_per_class=5, num_frames=(8, 30), height=48, width=64,
                                splits=(1,), seed=11)
    other = os.fspath(build(hmdb.Builder, "split1_20x64x64", root / "hmdb", root / "data").data_path)
    case = dict(data_path=built["split1_20x64x64"], split="train", batch=2, kwargs={"seed": 3, "repeat": True},
                checkpoint=str(tmp_path / "c" / "ckpt"))
    resume_cases.save(case, 1, 1)
    saved = resume_cases.make(case)
    rebuilt = dict(case, data_path=other)
    it = iter(resume_cases.make(rebuilt))
    tf.train.Checkpoint(iterator=it).read(case["checkpoint"])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        next(it)
    message = str(info.value)
    ours = vidvol.readers.records.open_split(tfds.builder_from_directory(case["data_path"]), "train").fingerprint
    theirs = vidvol.readers.records.open_split(tfds.builder_from_directory(other), "train").fingerprint
    assert ours != theirs
    assert f"this iterator checkpoint was saved reading {ours}" in message and f"this pipeline reads {theirs}" in message
    assert "hmdb51/split1_20x64x64" in message and "Restore the model and optimizer without the iterator" in message
    del saved


@pytest.mark.slow
def test_a_checkpoint_of_another_global_batch_is_refused(built, tmp_path):
    case = dict(data_path=built["split1_20x64x64"], split="train", batch=1, kwargs={"seed": 3},
                checkpoint=str(tmp_path / "c" / "ckpt"))
    resume_cases.save(case, 1, 1)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    it = iter(vidvol.load(tfds.builder_from_directory(case["data_path"]), "train", 1, seed=3, input_context=context))
    tf.train.Checkpoint(iterator=it).read(case["checkpoint"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"saved with a global batch of 1 \(1 per pipeline x 1 "
                                                             r"pipelines\); this pipeline reads 2 \(1 per pipeline x 2 "
                                                             r"pipelines\).*pass batch_size=1 // 2"):
        next(it)


def _stateful_ops(ds: tf.data.Dataset) -> list[str]:
    """Stateful ops in the functions of a dataset's graph (map, scan...), by TensorFlow's own op registry.

    What TF's external-state check looks at (dataset ops themselves checkpoint their own state);
    Assert is allowed by that check too.
    """
    from tensorflow.python.framework import op_def_registry

    graph = tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())
    found = set()
    for node in (n for f in graph.library.function for n in f.node_def):
        op = op_def_registry.get(node.op)
        if op is not None and op.is_stateful and node.op != "Assert":
            found.add(node.op)
    return sorted(found)


@pytest.mark.slow
def test_no_pipeline_holds_a_stateful_op_and_the_guard_names_a_users_own(built, tmp_path):
    """vidvol's Python reads are stateless `tf.numpy_function`s and nothing relaxes TF's external-state policy. Under
    symbolic checkpointing TF saves without checking for external state, so a user's own stateful map after
    `load` would be left out silently: `check_resumable` runs TF's check and names it."""
    builder = tfds.builder_from_directory(built["split1_20x64x64"])
    pipelines = [
        vidvol.load(builder, "train", 2, seed=1),
        vidvol.load(builder, "train", 2, spec=vidvol.ReadSpec(clips=vidvol.Clips(8)), repeat=True),
        vidvol.load(builder, "test", 2),
        vidvol.load(tfds.builder_from_directory(built["mri"]), "train", 2),
    ]
    with resume_cases.environment({"VIDVOL_JPEG_DECODE": "host"}):
        pipelines.append(vidvol.load(builder, "train", 2, seed=1))
    for ds in pipelines:
        assert _stateful_ops(ds) == []
        vidvol.check_resumable(ds)
        assert ds.options().experimental_external_state_policy in (None, tf.data.experimental.ExternalStatePolicy.FAIL)
        assert ds.options().experimental_symbolic_checkpoint
        graph = tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())
        assert "PyFuncStateless" in {n.op for f in graph.library.function for n in f.node_def}  # Python, stateless
    theirs = pipelines[0].map(lambda x, y: (x, y + tf.cast(tf.random.uniform([], 0, 2, tf.int32), y.dtype)))
    assert _stateful_ops(theirs) == ["RandomUniformInt"]
    with pytest.raises(vidvol.readers.NotResumableError, match=r"stateful op \(RandomUniformInt is stateful\)"):
        vidvol.check_resumable(theirs)
    it = iter(theirs)
    next(it)
    tf.train.Checkpoint(iterator=it).write(str(tmp_path / "silently"))  # what the guard is for: TF saves it anyway


@pytest.mark.slow
def test_the_seed_comes_from_the_checkpoint_not_the_new_pipeline(built, tmp_path):
    """An unseeded run's order is drawn, and the restore continues that order, not the new pipeline's."""
    case = dict(data_path=built["split1_20x64x64"], split="train", batch=1,
                kwargs={"spec": "ReadSpec(output=Output(features=['video_id']))"}, checkpoint=str(tmp_path / "c" / "ckpt"))
    after, _ = resume_cases.save(case, 2, 3)
    other = resume_cases.take(iter(resume_cases.make(case)), 5)[2:]
    restored = resume_cases.restore(dict(case, restore_seed=None), 3)
    assert [b[0].tolist() for b in restored] == [b[0].tolist() for b in after]
    assert [b[0].tolist() for b in other] != [b[0].tolist() for b in after]  # a fresh unseeded run: another order


def test_order_rule_numpy_and_tensorflow_agree():
    for layout in (order.Layout(11, 3, 1, True), order.Layout(11, 3, 2, False), order.Layout(7, 1, 0, True)):
        k = tf.range(3 * layout.per_epoch, dtype=tf.int64)
        epoch, t = layout.locate_tf(k, tf.constant(0, tf.int64), tf.constant(0, tf.int64))
        draws = {k: v.numpy() for k, v in layout.examples_tf(epoch, t, tf.constant(5, tf.int64)).items()}
        for e in range(3):
            at = slice(e * layout.per_epoch, (e + 1) * layout.per_epoch)
            index, valid = layout.examples_np(np.arange(layout.per_epoch), e, 5)
            np.testing.assert_array_equal(draws["index"][at], index)
            np.testing.assert_array_equal(draws["valid"][at], valid)
            assert (draws["epoch"][at] == e).all()
