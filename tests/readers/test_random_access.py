"""Random access over ArrayRecord shards: vidvol.data_source vs tfds.load, NumPy clip rules, Grain, PyTorch.

Real builds of the committed dummy data (hmdb51 default config, mri_volumes small_32) in both file
formats, in this process; the TFRecord build is the reference read by `tfds.load` / `vidvol.load`.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec
from vidvol.datasets.mri_volumes import make_dummy_data as mri_dummy
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.readers import clip_sampling
from vidvol.readers.random_access import data_source as random_access

HMDB = "hmdb51/split1_20x64x64"
MRI = "mri_volumes/small_32"


@pytest.fixture(scope="module")
def hmdb_dirs(hmdb_dummy_builds):
    """hmdb51's default config from its dummy data, as TFRecord and ArrayRecord (tests/readers/conftest.py)."""
    return hmdb_dummy_builds


@pytest.fixture(scope="module")
def mri_dirs(tmp_path_factory):
    """mri_volumes small_32 built twice from the dummy data."""
    from conftest import in_process_config

    dirs = {}
    for fmt in ("tfrecord", "array_record"):
        dirs[fmt] = str(tmp_path_factory.mktemp(f"mri_{fmt}"))
        builder = mri.Builder(data_dir=dirs[fmt], config="small_32", file_format=fmt)
        builder.download_and_prepare(download_config=in_process_config(manual_dir=mri_dummy.DUMMY_DIR))
    return dirs


def _by(examples, key):
    return {ex[key]: ex for ex in examples}


def test_hmdb51_by_index_gives_tfds_load_tensors(hmdb_dirs):
    for split in ("train", "test"):
        ds = vidvol.data_source(HMDB, split, data_dir=hmdb_dirs["array_record"])
        ours = _by(ds.__getitems__(list(range(len(ds)))), "video_id")
        assert _by([ds[i] for i in range(len(ds))], "video_id").keys() == ours.keys()
        loaded = _by(tfds.as_numpy(tfds.load(HMDB, split=split, data_dir=hmdb_dirs["tfrecord"])), "video_id")
        stored = _by(tfds.as_numpy(tfds.load(HMDB, split=split, data_dir=hmdb_dirs["tfrecord"],
                                             decoders={"video": tfds.decode.SkipDecoding()})), "video_id")
        assert ours.keys() == loaded.keys() and len(ours) == len(ds) > 0
        for vid, ex in ours.items():
            ref = loaded[vid]
            assert ex.keys() == ref.keys()
            for name in ex:
                assert type(ex[name]) is type(ref[name]), name
                assert np.shape(ex[name]) == np.shape(ref[name]) and np.asarray(ex[name]).dtype == np.asarray(ref[name]).dtype
                if name != "video":
                    np.testing.assert_array_equal(ex[name], ref[name], err_msg=name)
            # JPEG frames: tf.io.decode_jpeg's pixels (tfds.load), bit for bit, not OpenCV's accurate IDCT
            # (TFDS's NumPy decoder), which is a few levels off.
            np.testing.assert_array_equal(ex["video"], ref["video"])
            accurate = np.stack([tf.io.decode_jpeg(f, dct_method="INTEGER_ACCURATE").numpy() for f in stored[vid]["video"]])
            assert not np.array_equal(ex["video"], accurate)
        # tfds.data_source itself (TFDS's NumPy decode of VideoFrames): tfds.load's pixels too, not OpenCV's.
        theirs = _by(tfds.data_source(HMDB, split=split, data_dir=hmdb_dirs["array_record"]), "video_id")
        assert theirs.keys() == loaded.keys()
        for vid, ex in theirs.items():
            np.testing.assert_array_equal(np.stack(ex["video"]), loaded[vid]["video"])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


def test_mri_volumes_by_index_are_identical_to_tfds_load(mri_dirs):
    ds = vidvol.data_source(MRI, "train", data_dir=mri_dirs["array_record"])
    ours = _by(list(ds), "path")
    loaded = _by(tfds.as_numpy(tfds.load(MRI, split="train", data_dir=mri_dirs["tfrecord"])), "path")
    assert ours.keys() == loaded.keys() and len(ours) == 4
    for key, ex in ours.items():
        for name in ex:
            assert np.asarray(ex[name]).dtype == np.asarray(loaded[key][name]).dtype, name
            np.testing.assert_array_equal(ex[name], loaded[key][name], err_msg=name)
        assert ex["volume"].dtype == np.float32 and ex["mask"].dtype == np.uint8 and ex["mask"].shape == (32, 32, 32)
    copy = pickle.loads(pickle.dumps(ds))  # what a Grain or DataLoader worker process gets
    np.testing.assert_array_equal(copy[1]["volume"], ds[1]["volume"])


def test_wrong_format_errors_name_the_fix(hmdb_dirs):
    with pytest.raises(random_access.RandomAccessError, match=r"stored as tfrecord.*--file_format array_record"):
        vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["tfrecord"])
    with pytest.raises(ValueError, match=r"stored as array_record.*vidvol.data_source"):
        vidvol.load(HMDB, "train", 2, data_dir=hmdb_dirs["array_record"])


def test_numpy_clip_rules_are_the_tf_rules():
    for spec in (clip_sampling.ClipWindow(3, 2, 3), clip_sampling.ClipWindow(4, 1, 1), clip_sampling.ClipWindow(5, 3, 4)):
        for frames in (0, 1, 4, 11, 25, 60):
            tf_idx, tf_valid = clip_sampling.even_clips(tf.constant(frames), spec)
            np_idx, np_valid = clip_sampling.even_clips_np(frames, spec)
            np.testing.assert_array_equal(np_idx, tf_idx.numpy())
            np.testing.assert_array_equal(np_valid, tf_valid.numpy())
            assert np_idx.dtype == np.int32
    spec = clip_sampling.ClipWindow(clip_length=4, stride=3)
    rng = np.random.default_rng(0)
    starts = {int(clip_sampling.random_clip_np(15, spec, rng)[0][0]) for _ in range(300)}
    assert starts == set(range(6))  # 15 frames, span 10: starts 0..5, as random_clip
    short, valid = clip_sampling.random_clip_np(5, spec, rng)
    np.testing.assert_array_equal(short, [0, 3, 4, 4])
    np.testing.assert_array_equal(valid, [True, True, False, False])


def test_grain_eval_batches_match_vidvol_load(hmdb_dirs):
    kwargs = dict(spec=ReadSpec(clips=Clips(length=8, stride=2, eval_clips=2)))
    grain_batches = list(vidvol.grain_dataset(HMDB, "test", 2, data_dir=hmdb_dirs["array_record"], **kwargs))
    assert [len(b[1]) for b in grain_batches] == [2, 1]  # evaluation keeps the last partial batch
    (x, mask), y = grain_batches[0]
    assert x.shape == (2, 2, 8, 64, 64, 3) and x.dtype == np.float32 and mask.shape == (2, 2, 8) and mask.dtype == np.float32
    ours = [((x[i], m[i]), y[i]) for (x, m), y in grain_batches for i in range(len(y))]
    theirs = [((x[i], m[i]), y[i]) for (x, m), y in tfds.as_numpy(vidvol.load(HMDB, "test", 3, data_dir=hmdb_dirs["tfrecord"], **kwargs))
              for i in range(len(y))]
    assert sorted(int(e[1]) for e in ours) == sorted(int(e[1]) for e in theirs)
    for (gx, gm), gy in ours:  # same clips, masks and labels; the same frames (float32 rounding apart)
        diffs = [np.abs(gx - tx).max() if (gy == ty and np.array_equal(gm, tm)) else np.inf for (tx, tm), ty in theirs]
        assert min(diffs) <= 1e-6


def test_grain_training_shuffles_reproducibly_and_draws_clips(hmdb_dirs):
    def epoch(seed):
        ds = vidvol.grain_dataset(HMDB, "train", 2, data_dir=hmdb_dirs["array_record"], seed=seed,
                                  spec=ReadSpec(clips=Clips(length=6), normalize=Normalize(mean=0.5, std=0.25)))
        return list(ds)

    a, b, c = epoch(1), epoch(1), epoch(2)
    assert len(a) == 3 and all(len(y) == 2 for _, y in a)  # 6 training examples
    labels = sorted(int(v) for _, y in a for v in y)
    source = vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["array_record"],
                                spec=ReadSpec(output=Output(features=["label"])))
    assert labels == sorted(int(source[i]["label"]) for i in range(len(source)))  # every example once
    for ((xa, ma), ya), ((xb, mb), yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert any(not np.array_equal(ya, yc) or not np.array_equal(xa, xc) for ((xa, _), ya), ((xc, _), yc) in zip(a, c))
    (x, mask), _ = a[0]
    assert x.shape == (2, 6, 64, 64, 3) and mask.shape == (2, 6)
    assert x.min() >= -2.0 - 1e-6 and x.max() <= 2.0 + 1e-6  # (x / 255 - 0.5) / 0.25


def test_torch_protocol_without_torch(hmdb_dirs):
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=7, spec=ReadSpec(clips=Clips(4)))
    assert len(ds) == 6
    (x, mask), y = ds[0]
    assert x.shape == (4, 64, 64, 3) and x.dtype == np.float32 and mask.shape == (4,) and np.asarray(y).dtype == np.int64
    batch = ds.__getitems__([0, 3, 5])  # a DataLoader's batched fetch
    assert len(batch) == 3
    np.testing.assert_array_equal(batch[0][0][0], x)  # same (seed, epoch, index), same clip
    copy = pickle.loads(pickle.dumps(ds))  # a worker process's copy
    np.testing.assert_array_equal(copy[0][0][0], x)
    clips = set()
    for e in range(8):
        ds.set_epoch(e)
        clips.add(ds[0][0][0].tobytes())
    assert len(clips) > 1  # a new clip draw per epoch
    evaluation = vidvol.torch_dataset(HMDB, "test", data_dir=hmdb_dirs["array_record"],
                                      spec=ReadSpec(clips=Clips(length=4, eval_clips=3)))
    (x, mask), _ = evaluation[1]
    assert x.shape == (3, 4, 64, 64, 3) and mask.shape == (3, 4)


def test_torch_dataloader(hmdb_dirs):
    torch = pytest.importorskip("torch")  # the optional `vidvol[torch]` extra
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=0, spec=ReadSpec(clips=Clips(4)))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, multiprocessing_context="spawn")
    batches = list(loader)
    assert [len(y) for _, y in batches] == [4, 2]
    (x, mask), y = batches[0]
    assert isinstance(x, torch.Tensor) and x.shape == (4, 4, 64, 64, 3) and x.dtype == torch.float32
    assert mask.shape == (4, 4) and y.dtype == torch.int64
    source = vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["array_record"],
                                spec=ReadSpec(output=Output(features=["label"])))
    assert sorted(int(v) for _, y in batches for v in y) == sorted(int(source[i]["label"]) for i in range(len(source)))
    forked = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="fork")
    with pytest.raises(Exception, match="multiprocessing_context='spawn'"):  # a clear error, not a segfault
        list(forked)


def test_the_random_access_readers_refuse_retired_keywords(hmdb_dirs):
    data_dir = hmdb_dirs["array_record"]
    with pytest.raises(TypeError, match=r"torch_dataset\(\) no longer takes eval_clips= \(retired in vidvol 0.2.0\): "
                                        r"pass spec=vidvol.ReadSpec\(clips=vidvol.Clips\(eval_clips=2\)\)"):
        vidvol.torch_dataset(HMDB, "test", data_dir=data_dir, eval_clips=2)
    with pytest.raises(TypeError, match=r"data_source\(\) no longer takes features="):
        vidvol.data_source(HMDB, "test", data_dir=data_dir, features=["label"])


def test_random_access_readers_refuse_what_they_cannot_honour(hmdb_dirs):
    data_dir = hmdb_dirs["array_record"]
    refused = [
        (ReadSpec(normalize=Normalize(resize=(32, 32))), r"cannot honour spec normalize.resize"),
        (ReadSpec(output=Output(dtype="bfloat16")), r"cannot honour spec output.dtype"),
        (ReadSpec(output=Output(features=["video", "label"])), r"cannot honour spec output.features"),
        (ReadSpec(output=Output(mask_dtype=None)), r"cannot leave the mask out"),
    ]
    for spec, message in refused:
        with pytest.raises(ValueError, match=message):
            vidvol.torch_dataset(HMDB, "train", data_dir=data_dir, spec=spec)
        with pytest.raises(ValueError, match=message):
            vidvol.grain_dataset(HMDB, "train", 2, data_dir=data_dir, spec=spec)
    for spec in (ReadSpec(clips=Clips(length=4)), ReadSpec(normalize=Normalize(mean=0.5)),
                 ReadSpec(output=Output(mask_dtype="uint8"))):
        with pytest.raises(ValueError, match=r"vidvol.data_source cannot honour spec .*it returns the stored examples"):
            vidvol.data_source(HMDB, "train", data_dir=data_dir, spec=spec)
    with pytest.raises(TypeError, match=r"grain_dataset\(\) got an unexpected keyword argument 'resize'"):
        vidvol.grain_dataset(HMDB, "train", 2, data_dir=data_dir, resize=(32, 32))  # it never took one
    # What they do honour: the mask in any mask dtype (bfloat16 too), a mask-less input set.
    (x, mask), _ = vidvol.torch_dataset(HMDB, "train", data_dir=data_dir, seed=0,
                                        spec=ReadSpec(output=Output(mask_dtype="bfloat16")))[0]
    assert str(mask.dtype) == "bfloat16" and x.dtype == np.float32
    x, _ = vidvol.torch_dataset(HMDB, "train", data_dir=data_dir, seed=0,
                                spec=ReadSpec(output=Output(inputs="video", mask_dtype=None)))[0]
    assert x.shape == (20, 64, 64, 3)


# ----------------------------------------------------------------------------------------------
# Resuming: Grain iterator state and the PyTorch sampler's state_dict (readers/random_access/grain.py, epoch_order.py)


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y)):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("seed", [3, None])
def test_grain_iterator_state_resumes_exactly_across_epochs(hmdb_dirs, seed):
    import json

    import grain

    spec = ReadSpec(clips=Clips(length=6))
    make = lambda: vidvol.grain_dataset(HMDB, "train", 2, data_dir=hmdb_dirs["array_record"], seed=seed, spec=spec,
                                        num_epochs=3, drop_remainder=False)
    for iterate in (iter, lambda ds: iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=2)))):
        it = iterate(make())
        head = [next(it) for _ in range(2)]  # 6 examples a epoch: batches 2 and 3 cross into epoch 2 at 3
        state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
        rest = list(it)
        assert len(head) + len(rest) == 9 and (seed is None or state["seed"] == seed)
        again = iterate(make())  # a new dataset: unseeded, it drew another seed; the state's is taken up
        again.set_state(state)
        _same(list(again), rest)
    labels = [int(v) for _, y in list(make())[:3] for v in y]  # one epoch: every example once
    source = vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["array_record"],
                                spec=ReadSpec(output=Output(features=["label"])))
    assert sorted(labels) == sorted(int(source[i]["label"]) for i in range(len(source)))
    other = iter(vidvol.grain_dataset(HMDB, "test", 2, data_dir=hmdb_dirs["array_record"], seed=seed, spec=spec))
    with pytest.raises(ValueError, match=r"this state was saved reading hmdb51/split1_20x64x64/.* split train.*this "
                                         r"reader reads .* split test"):
        other.set_state(state)


def test_grain_set_state_changes_only_its_own_iterator_and_a_failed_one_nothing(hmdb_dirs):
    """#34: restoring one iterator (a state of another seed) leaves the dataset and its other live iterators on their
    own order, and a restore that fails (another split's state, a damaged Grain state) changes nothing."""
    make = lambda seed: vidvol.grain_dataset(HMDB, "train", 1, data_dir=hmdb_dirs["array_record"], seed=seed,
                                             spec=ReadSpec(output=Output(inputs="mask", target="label")))
    labels = lambda batches: [int(y[0]) for _, y in batches]
    ds = make(3)
    reference = labels(list(ds))
    other = iter(make(8))
    next(other)
    state = other.get_state()  # seed 8, after one batch
    a, b = iter(ds), iter(ds)
    head = labels([next(a), next(a)])
    b.set_state(state)
    assert ds.epochs.seed == 3 and labels(list(a)) == reference[2:] and head == reference[:2]
    assert labels(list(b)) == labels(list(iter(make(8))))[1:]  # b: the saved run's order from its position
    c = iter(ds)
    next(c)
    before = c.get_state()
    for bad in ({**state, "iterator": {"bogus": 1}}, iter(vidvol.grain_dataset(
            HMDB, "test", 1, data_dir=hmdb_dirs["array_record"], seed=8)).get_state()):
        with pytest.raises((ValueError, KeyError, TypeError)):
            c.set_state(bad)
        assert c.get_state() == before and ds.epochs.seed == 3
    assert labels(list(c)) == reference[1:]
    sliced = ds.to_iter_dataset()
    sliced.set_slice(slice(1, None, 2))  # what each mp_prefetch worker's copy gets: its slice survives a restore
    d = iter(sliced)
    d.set_state(state)
    assert labels(list(d)) == labels(list(iter(make(8))))[1::2][1:]


def test_a_grain_state_of_two_shards_restores_into_one_with_the_same_global_batch(hmdb_dirs):
    """#34, another shard count: shards 0 and 1 of 2 (batch 1) read a batch each, shard 0's state restores into one
    shard of batch 2: the rest of the epoch is the examples not read yet, then the next epoch is a fresh run's."""
    import grain

    make = lambda batch, shards=None, **kw: vidvol.grain_dataset(
        HMDB, "train", batch, data_dir=hmdb_dirs["array_record"], seed=6, num_epochs=2, shard_options=shards,
        spec=ReadSpec(output=Output(inputs="mask", target="label")), **kw)
    two = [make(1, grain.sharding.ShardOptions(shard_index=i, shard_count=2)) for i in range(2)]
    first = [iter(ds) for ds in two]
    for it in first:
        next(it)
    state = first[0].get_state()
    assert (state["epoch"], state["frontier"], state["global_batch"]) == (0, 2, 2)
    one = make(2)
    it = iter(one)
    it.set_state(state)
    rest = list(it)
    whole = list(make(2))  # one shard, uninterrupted: 3 batches an epoch
    assert len(rest) == 2 + 3
    read_before = {int(i) for ds in two for i in ds.epochs.indices(0, [0])}  # what the two shards read first
    assert read_before == {int(i) for i in one.epochs.indices(0, [0, 1])}  # the epoch's first two positions
    _same(rest[:2], whole[1:3])  # the rest of epoch 0: the whole run's batches after its first
    _same(rest[2:], whole[3:])  # epoch 1: the fresh one-shard run's
    with pytest.raises(ValueError, match=r"global batch of 2 \(1 per shard x 2 shards\); this dataset reads 1"):
        iter(make(1)).set_state(state)


def test_sampler_state_dict_resumes_exactly_without_torch(hmdb_dirs):
    """torchdata's StatefulDataLoader protocol, driven directly: the sampler's state_dict / load_state_dict and the
    dataset's batched fetch (`__getitems__`), as a DataLoader without workers would call them."""
    spec = ReadSpec(clips=Clips(length=4))
    make = lambda: vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], spec=spec)
    ds = make()
    sampler = ds.sampler()  # unseeded: a drawn seed, kept in the state
    assert len(sampler) == len(ds) == 6
    sampler.set_epoch(1)
    order = iter(sampler)
    first = [next(order) for _ in range(4)]
    state = sampler.state_dict()
    assert state["epoch"] == 1 and state["yielded"] == 4
    rest = list(order)
    assert sorted(int(d) for d in first + rest) == list(range(6))
    fresh_ds = make()
    fresh = fresh_ds.sampler()
    fresh.load_state_dict(pickle.loads(pickle.dumps(state)))
    fresh.set_epoch(1)  # the loop's own epoch bookkeeping: the same epoch keeps the pending position
    resumed = list(fresh)
    assert [int(d) for d in resumed] == [int(d) for d in rest] and all(d.epoch == 1 for d in resumed)
    _same(fresh_ds.__getitems__(resumed), ds.__getitems__(rest))  # the same clips (seed and epoch travel in the draws)
    fresh.set_epoch(2)
    epoch2 = [int(d) for d in fresh]
    assert sorted(epoch2) == list(range(6)) and epoch2 != [int(d) for d in first + rest]
    with pytest.raises(ValueError, match="this state was saved reading"):
        vidvol.torch_dataset(HMDB, "test", data_dir=hmdb_dirs["array_record"]).sampler().load_state_dict(state)


def test_a_sampler_state_of_two_replicas_restores_into_three_or_one(hmdb_dirs):
    """Another world size (#34): rank 0 of 2 saves after 1 example each; over 1 replica (or 3 from a state saved
    after none) the rest of the epoch is the examples not read yet, each once, then the epochs go on as that
    layout's own."""
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=4)
    two = [ds.sampler(num_replicas=2, rank=r) for r in range(2)]
    for s in two:
        s.set_epoch(1)
    streams = [iter(s) for s in two]
    before = [int(next(it)) for it in streams]
    saved = pickle.loads(pickle.dumps(two[0].state_dict()))
    assert saved["frontier"] == 2 and saved["epoch"] == 1
    one = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"]).sampler()  # seed: the state's
    one.load_state_dict(saved)
    one.set_epoch(1)
    rest = [int(d) for d in one]
    assert sorted(before + rest) == list(range(6))  # every example of epoch 1 once
    fresh = ds.sampler(seed=4)
    fresh.set_epoch(1)
    whole = [int(d) for d in fresh]  # the epoch's one order, as one replica reads it uninterrupted
    assert sorted(before) == sorted(whole[:2]) and rest == whole[2:]
    fresh.set_epoch(2)
    one.set_epoch(2)
    assert [int(d) for d in one] == [int(d) for d in fresh]  # then the epochs of a fresh one-replica run
    start = two[1].state_dict()  # rank 1 after one example, like rank 0
    three = [vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"]).sampler(num_replicas=3, rank=r)
             for r in range(3)]
    for s in three:
        s.load_state_dict(start)
        s.set_epoch(1)
    after = [int(d) for s in three for d in s]
    assert len(after) == len(set(after)) == (6 - 2) // 3 * 3 and not set(after) & set(before)
    with pytest.raises(ValueError, match="this state was saved reading"):
        vidvol.torch_dataset(HMDB, "test", data_dir=hmdb_dirs["array_record"]).sampler(num_replicas=3).load_state_dict(
            start)


def test_sampler_shares_over_replicas_are_equal_and_evaluation_pads_are_zero(hmdb_dirs):
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=1, spec=ReadSpec(clips=Clips(4)))
    for replicas in (2, 4):
        shares = [[int(d) for d in ds.sampler(num_replicas=replicas, rank=r)] for r in range(replicas)]
        assert {len(s) for s in shares} == {6 // replicas}
        seen = [i for s in shares for i in s]
        assert len(set(seen)) == len(seen) == 6 - 6 % replicas
    evaluation = vidvol.torch_dataset(HMDB, "test", data_dir=hmdb_dirs["array_record"], spec=ReadSpec(clips=Clips(4)))
    assert len(evaluation) == 3
    shares = [list(evaluation.sampler(num_replicas=2, rank=r)) for r in range(2)]
    assert {len(s) for s in shares} == {2}
    assert sorted(int(d) for s in shares for d in s if d.valid) == list(range(len(evaluation)))
    pads = [d for s in shares for d in s if not d.valid]
    assert len(pads) == 4 - len(evaluation)
    (x, mask), _ = evaluation[pads[0]]
    assert not x.any() and not mask.any()  # weight it 0


def test_stateful_dataloader_with_torch(hmdb_dirs):
    torch = pytest.importorskip("torch")
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], spec=ReadSpec(clips=Clips(4)))
    loader = stateful.StatefulDataLoader(ds, batch_size=2, sampler=ds.sampler(seed=5))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = list(it)
    again = stateful.StatefulDataLoader(ds, batch_size=2, sampler=ds.sampler(seed=99))
    again.load_state_dict(state)
    for (a, b) in zip(list(again), rest):
        torch.testing.assert_close(a[0][0], b[0][0])
