"""`plan.plan_load`: every decision of a `vidvol.load` pipeline, on the real builders' infos, reading nothing.

The builders are the project's own (hmdb51, fire_hrr, mri_volumes) in an empty data_dir: their
`info` (features, supervised keys) is what a prepared dataset has; the split is given as facts
(examples per shard file, stored bytes per example), so no dataset is built or read here. That
the decisions give the right tensors is `test_loader.py`'s and `test_output_dtype.py`'s job.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import vidvol  # noqa: F401  (registers the datasets)
from vidvol import Clips, Normalize, Output, ReadSpec, Tuning
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.readers import clip_sampling
from vidvol.readers.tfdata import sizing
from vidvol.readers.tfdata.plan import SplitFacts, plan_load
from vidvol.readers.order import ShardingError

TRAIN = SplitFacts("train", (3, 3, 2, 2), 50_000.0)
TEST = SplitFacts("test", (3, 3), 50_000.0)


@pytest.fixture(scope="module")
def infos(tmp_path_factory):
    """The infos of unbuilt builders: {"hmdb": ..., "hmdb_all": ..., "hmdb_raw": ..., "fire": ..., "mri": ...}."""
    empty = str(tmp_path_factory.mktemp("unbuilt"))
    return {
        "hmdb": hmdb.Builder(data_dir=empty, config="split1_20x64x64").info,
        "hmdb_all": hmdb.Builder(data_dir=empty, config="split1_all_112x112").info,
        "hmdb_raw": hmdb.Builder(data_dir=empty, config="split1_20x64x64_raw").info,
        "fire": fire.Builder(data_dir=empty, config="161x135x240").info,
        "mri": mri.Builder(data_dir=empty, config="small_32").info,
    }


def _plan(info, split=TRAIN, batch_size=4, *, spec=ReadSpec(), tuning=Tuning(memory_budget_bytes=2**34), **kw):
    return plan_load(info, split, batch_size, spec=spec, tuning=tuning, **kw)


def test_training_drop_remainder_and_order_follow_the_split_and_seed(infos):
    train = _plan(infos["hmdb"])
    # Deterministic unseeded too: the order is a function of position and key (readers.order), and an
    # iterator checkpoint restores exactly only when the parallel stages keep it.
    assert train.training and train.drop_remainder and train.deterministic and train.static_batch == 4
    assert _plan(infos["hmdb"], seed=0).deterministic and train.options().experimental_symbolic_checkpoint
    test = _plan(infos["hmdb"], TEST)
    assert not test.training and not test.drop_remainder and test.deterministic and test.static_batch is None
    sliced = _plan(infos["hmdb"], SplitFacts("train[:80%]", (3, 2), 10.0))
    assert sliced.training
    assert not _plan(infos["hmdb"], training=False).training
    assert not _plan(infos["hmdb"], drop_remainder=False).drop_remainder
    assert not _plan(infos["hmdb"], seed=0, tuning=Tuning(deterministic=False)).deterministic


def test_output_structure_from_supervised_keys_or_features(infos):
    plan = _plan(infos["hmdb"])
    assert (plan.inputs, plan.target, plan.read.names) == (("video", "mask"), "label", ("video", "mask", "label"))
    plan = _plan(infos["fire"], batch_size=1)
    assert (plan.inputs, plan.target) == (("video", "mask"), "hrr") and plan.read.per_frame == ("mask", "hrr")
    plan = _plan(infos["hmdb"], spec=ReadSpec(output=Output(features=["video_id", "label"])))
    assert plan.inputs is None and plan.target is None and plan.read.names == ("video_id", "label")
    plan = _plan(infos["hmdb"], spec=ReadSpec(output=Output(inputs="video", target="num_frames")))
    assert (plan.inputs, plan.target) == (("video",), "num_frames")
    assert plan.mask_dtype == tf.float32 and not plan.omit_mask
    with pytest.raises(ValueError, match=r"unknown features \['nope'\]"):
        _plan(infos["hmdb"], spec=ReadSpec(output=Output(inputs=("video", "nope"))))


def test_fixed_shapes_parse_and_decode_per_batch_unless_something_runs_per_example(infos):
    plan = _plan(infos["hmdb"])
    assert plan.parser is not None and plan.read.decode_in_batch and not plan.lean and not plan.read.needs_example_map
    assert _plan(infos["hmdb"], tuning=Tuning(parse_per_batch=False)).parser is None
    clips = _plan(infos["hmdb"], spec=ReadSpec(clips=Clips(length=8)))
    assert clips.read.needs_example_map and clips.parser is None and clips.random_clips
    evaluation = _plan(infos["hmdb"], TEST)  # no static batch: frames decode per example
    assert not evaluation.read.decode_in_batch and evaluation.parser is None
    raw = _plan(infos["hmdb_raw"], TEST)  # raw frames: nothing to decode, one parse per batch even so
    assert raw.parser is not None and raw.read.raw == ("video",)
    labels = _plan(infos["hmdb"], TEST, spec=ReadSpec(output=Output(features=["label", "num_frames"])))
    assert labels.parser is not None and not labels.read.videos
    assert _plan(infos["hmdb_all"], spec=ReadSpec(clips=Clips(length=4))).parser is None  # variable length


def test_lean_mode_when_a_few_float_batches_exceed_the_budget(infos):
    frames = 161 * 135 * 240 * 3
    big = _plan(infos["fire"], batch_size=2)
    assert big.float_batch_bytes == 2 * 4 * (frames + 161 + 161)  # video, mask, hrr as float32
    assert not big.lean and big.decode_parallelism == tf.data.AUTOTUNE and big.read.decode_in_batch
    lean = _plan(infos["fire"], batch_size=2, tuning=Tuning(memory_budget_bytes=4 * big.float_batch_bytes - 1))
    assert lean.lean and not lean.read.decode_in_batch and lean.memory_budget == 4 * big.float_batch_bytes - 1
    assert 1 <= lean.decode_parallelism <= sizing.system.num_cpus()
    options = lean.options()
    assert not options.experimental_optimization.apply_default_optimizations
    assert not options.experimental_optimization.inject_prefetch
    assert options.autotune.ram_budget == lean.memory_budget
    assert "lean memory mode" in lean.describe(direct=False)
    resized = _plan(infos["fire"], batch_size=2, spec=ReadSpec(normalize=Normalize(resize=(34, 60))))
    assert resized.float_batch_bytes == 2 * 4 * (161 * 34 * 60 * 3 + 161 + 161)


def test_direct_volume_reads_for_volumes_parsed_per_batch_only(infos):
    plan = _plan(infos["mri"], batch_size=2)
    assert plan.direct_reads and plan.parser is not None and not plan.read.videos
    assert set(plan.read.feature_decoders) == {"volume", "mask"}  # volume to Output.dtype, box mask to mask_dtype
    assert not _plan(infos["mri"], batch_size=2, tuning=Tuning(direct_reads=False)).direct_reads
    assert not _plan(infos["mri"], batch_size=2, tuning=Tuning(parse_per_batch=False)).direct_reads
    assert not _plan(infos["hmdb"]).direct_reads


def test_every_pipeline_reads_an_equal_share_of_examples_not_of_files(infos):
    """The release before dealt shard files round-robin (2 pipelines over shards of 3, 3, 2, 2: 5 and 5, but 3
    pipelines 5, 3 and 2); now each pipeline reads n // pipelines examples of a
    whole-split permutation (training) or every N-th example padded to the largest (evaluation)."""
    plan = _plan(infos["hmdb"], tuning=Tuning())
    assert (plan.files, plan.examples, plan.layout.dropped) == (4, 10, 0)
    assert plan.read_parallelism == tf.data.AUTOTUNE and _plan(infos["hmdb"], tuning=Tuning(cycle_length=7)).read_parallelism == 7
    for pipelines in (2, 3, 4, 6, 8):
        shares = [_plan(infos["hmdb"], input_context=tf.distribute.InputContext(num_input_pipelines=pipelines,
                                                                                input_pipeline_id=p))
                  for p in range(pipelines)]
        assert {s.examples for s in shares} == {10 // pipelines} and shares[0].layout.dropped == 10 % pipelines
        evaluation = [_plan(infos["hmdb"], SplitFacts("test", (3, 3, 2, 2), 50_000.0), input_context=tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=p)) for p in range(pipelines)]
        assert {e.examples for e in evaluation} == {-(-10 // pipelines)}
        assert sum(e.layout.count for e in evaluation) == 10 and all(e.pads == bool(10 % pipelines) for e in evaluation)
    with pytest.raises(ShardingError, match=r"split 'train': 11 input pipelines over 10 examples: 1 would read nothing"):
        _plan(infos["hmdb"], input_context=tf.distribute.InputContext(num_input_pipelines=11, input_pipeline_id=0))
    with pytest.raises(ValueError, match=r"pad .* with an example whose mask is all zeros; this output has no mask"):
        _plan(infos["hmdb"], SplitFacts("test", (3, 3, 2, 2), 1.0), spec=ReadSpec(output=Output(features=["label"])),
              input_context=tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=0))


def test_clip_window_and_shape(infos):
    with pytest.raises(ValueError, match=r"variable number of frames.*Clips\(length=T\)"):
        _plan(infos["hmdb_all"])
    train = _plan(infos["hmdb_all"], spec=ReadSpec(clips=Clips(length=16, stride=2, eval_clips=3)))
    assert train.read.clip == clip_sampling.ClipWindow(16, 2, 3) and train.read.clip_shape == (16,) and train.random_clips
    test = _plan(infos["hmdb_all"], TEST, spec=ReadSpec(clips=Clips(length=16, stride=2, eval_clips=3)))
    assert test.read.clip_shape == (3, 16) and not test.random_clips
    assert _plan(infos["hmdb_all"], TEST, spec=ReadSpec(clips=Clips(length=16))).read.clip_shape == (16,)
    with pytest.raises(ValueError, match=r"Clips.length is set but none of \['label'\] is a video feature"):
        _plan(infos["hmdb"], spec=ReadSpec(clips=Clips(length=4), output=Output(features=["label"])))


def test_what_the_dataset_cannot_take_is_an_error(infos):
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        _plan(infos["hmdb"], batch_size=0)
    with pytest.raises(ValueError, match=r"Normalize \(mean, std, resize\) applies to video frames"):
        _plan(infos["mri"], spec=ReadSpec(normalize=Normalize(mean=0.5)))
    with pytest.raises(ValueError, match=r"'volume' is stored as int16, so Output.dtype must be one of"):
        _plan(infos["mri"], spec=ReadSpec(output=Output(dtype="uint8")))
    with pytest.raises(ValueError, match="the only input"):
        _plan(infos["mri"], spec=ReadSpec(output=Output(inputs="mask", mask_dtype=None)))
    left_out = _plan(infos["mri"], spec=ReadSpec(output=Output(dtype="int16", mask_dtype=None)))
    assert left_out.omit_mask and left_out.mask_dtype is None and left_out.inputs == ("volume", "mask")


def test_the_log_line_names_the_decisions(infos):
    line = _plan(infos["mri"], batch_size=2).describe(direct=True)
    assert line.startswith("mri_volumes/small_32/2.0.0 train: 10 examples in 4 files, pipeline 1 of 1: 10 examples "
                           "per epoch, order: whole-split permutation per epoch")
    assert "parse per batch, direct volume reads, decode per example" in line
    context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=2)
    assert "pipeline 3 of 3: 3 examples per epoch (1 of the split left out per epoch)" in _plan(
        infos["mri"], input_context=context).describe(direct=False)
    assert line.endswith(", training") and np.isfinite(float(line.split("(")[-1].split(" MiB")[0]))


def test_bucket_reads_in_flight_are_bounded_by_batches_and_by_bytes():
    from vidvol.readers.tfdata import sizing

    budget, small_float = 8 << 30, 1 << 20
    assert sizing.bucket_read_parallelism(small_float, budget, 8 * 65_000) == sizing.BUCKET_READS_AHEAD  # hmdb51 clips
    assert sizing.bucket_read_parallelism(small_float, budget, 8 * 4_200_000) == 2  # MRI 128^3 volumes: 2 at least
    assert sizing.bucket_read_parallelism(small_float, budget, 10 << 20) == 6
    assert sizing.bucket_read_parallelism(small_float, budget) == sizing.BUCKET_READS_AHEAD  # stored size unknown
    assert sizing.bucket_read_parallelism(budget // 24, budget, 1 << 10) == 3  # the memory budget's bound
