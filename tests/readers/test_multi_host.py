"""Equal batches of disjoint examples on every host: `vidvol.load` over N input pipelines balances by examples.

Over uneven shards (13 examples in 4 files: 4, 3, 3, 3), every pipeline yields the same number of
batches for 2, 3, 4, 6 and 8 pipelines: training drops `13 mod N` examples an epoch, evaluation pads
the short pipelines with an example whose mask (and frames) are zero, and loses none. The shares
are disjoint whatever a host did before (a peek, a rebuilt dataset, a late start), and a
checkpoint of one pipeline of N restores into each of M with the same global batch (#34).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from in_process_build import build
import vidvol
from vidvol import Output, ReadSpec
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.readers import order
from vidvol.testing import samples

# 3 pipelines (the uneven case: 4 shards) in the fast lane; 2, 4, 6 and 8 in `make test` (marked slow).
PIPELINES = (3, *(pytest.param(n, marks=pytest.mark.slow) for n in (2, 4, 6)), pytest.param(8, marks=pytest.mark.long))
IDS = ReadSpec(output=Output(features=["video_id", "mask"]))


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """hmdb51/split1_20x64x64 with 13 train and 13 test examples, each split in 4 shard files of 4, 3, 3, 3."""
    root = tmp_path_factory.mktemp("uneven")
    samples.write_hmdb51_layout(str(root / "manual"), videos_per_class=13, num_frames=(4, 8), height=24, width=32,
                                splits=(1,), seed=2)
    builder = build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data", num_shards=4)
    for split in ("train", "test"):
        assert builder.info.splits[split].num_examples == 13
        assert sorted(builder.info.splits[split].shard_lengths) == [3, 3, 3, 4]
    return builder


def _context(pipelines: int, pipeline: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                      num_replicas_in_sync=pipelines)


@pytest.mark.parametrize("pipelines", PIPELINES)
def test_training_pipelines_yield_equal_batches_of_disjoint_examples(uneven, pipelines):
    reads = [list(tfds.as_numpy(vidvol.load(uneven, "train", 1, seed=4, spec=IDS, input_context=_context(pipelines, p))))
             for p in range(pipelines)]
    assert {len(r) for r in reads} == {13 // pipelines}  # the same number of batches on every host
    seen = [b["video_id"][0] for r in reads for b in r]
    assert len(set(seen)) == len(seen) == 13 - 13 % pipelines  # disjoint; 13 mod N left out this epoch
    batched = [len(list(vidvol.load(uneven, "train", 2, seed=4, input_context=_context(pipelines, p))))
               for p in range(pipelines)]
    assert len(set(batched)) == 1 and batched[0] == (13 // pipelines) // 2


@pytest.mark.slow
def test_the_left_out_examples_change_from_epoch_to_epoch(uneven):
    """3 pipelines, 13 examples: one left out an epoch; over the epochs of a repeated read another one (the tail of a new order),
    and every epoch of every pipeline is disjoint from the others' (unseeded: the hosts share a fixed seed)."""
    all_ids = {i.decode() for i in vidvol.load_labels(uneven, "train", target="video_id")}
    epochs = 6
    per_epoch = 13 // 3
    streams = []
    for p in range(3):  # unseeded: over input pipelines the seed is a shared one (order.SHARED_SEED)
        it = iter(tfds.as_numpy(vidvol.load(uneven, "train", 1, spec=IDS, repeat=True, input_context=_context(3, p))))
        streams.append([next(it)["video_id"][0].decode() for _ in range(epochs * per_epoch)])
    left_out = []
    for e in range(epochs):
        read = [i for s in streams for i in s[e * per_epoch:(e + 1) * per_epoch]]
        assert len(set(read)) == len(read) == 12
        left_out += sorted(all_ids - set(read))
    assert len(set(left_out)) > 1  # not the same example every epoch


@pytest.mark.parametrize("pipelines", PIPELINES)
def test_evaluation_pads_with_zero_masks_and_loses_no_example(uneven, pipelines):
    spec = ReadSpec(output=Output(features=["video_id", "mask", "video"]))
    reads = [list(tfds.as_numpy(vidvol.load(uneven, "test", 2, spec=spec, input_context=_context(pipelines, p))))
             for p in range(pipelines)]
    assert len({len(r) for r in reads}) == 1  # equal batches at evaluation too
    assert len({sum(len(b["video_id"]) for b in r) for r in reads}) == 1
    real, pads = [], 0
    for r in reads:
        for b in r:
            for vid, mask, video in zip(b["video_id"], b["mask"], b["video"]):
                if mask.any():
                    real.append(vid.decode())
                else:
                    pads += 1
                    assert not video.any()
    assert sorted(real) == sorted(i.decode() for i in vidvol.load_labels(uneven, "test", target="video_id"))
    assert pads == (-13) % pipelines


def test_supervised_evaluation_pads_are_weighted_out_by_the_mask(uneven):
    """The recipe the docstrings give: weight each example by whether its mask has any frame."""
    losses = []
    for p in range(3):
        for (video, mask), label in vidvol.load(uneven, "test", 4, input_context=_context(3, p)):
            weight = tf.cast(tf.reduce_max(mask, axis=1) > 0, tf.float32)
            losses.append(float(tf.reduce_sum(weight)))
    assert sum(losses) == 13


@pytest.mark.slow
def test_distribute_takes_the_same_rule(uneven):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dist = vidvol.distribute(strategy, uneven, "train", 2, seed=0)
    assert sum(1 for _ in dist) == 13 // 2  # one pipeline: the whole split, the last partial batch dropped


# Shares that cannot overlap (#34): which examples pipeline p of P reads in epoch e is a function of (seed, epoch,
# p, P, split) only: not of how many iterators a host opened, when it started, or TensorFlow's global seed.

def _ids(ds) -> list[str]:
    return [i.decode() for b in tfds.as_numpy(ds) for i in b["video_id"]]


def _host(uneven, pipelines, p, **kwargs) -> tf.data.Dataset:
    kwargs = {"seed": 5, **kwargs}
    return vidvol.load(uneven, "train", 1, spec=ReadSpec(output=Output(features=["video_id"])),
                       input_context=_context(pipelines, p), **kwargs)


# 3 pipelines in every lane; the other counts and the unseeded variant at another epoch in the long lane (each
# host is a pipeline made and read; the rule itself is checked at every count by the NumPy test below).
ELASTIC = (pytest.param(3, {}), *(pytest.param(n, kw, marks=pytest.mark.long)
                                  for n in (2, 3, 4, 6, 8) for kw in ({}, {"seed": None, "epoch": 1})
                                  if (n, kw) != (3, {})))


@pytest.mark.slow
@pytest.mark.parametrize("pipelines, kwargs", ELASTIC)
def test_a_host_that_peeks_rebuilds_or_starts_late_reads_its_own_share(uneven, pipelines, kwargs):
    """Host 0 peeks at a batch first (`next(iter(ds))`, as notebooks and shape checks do), host 1 reads a whole pass
    and rebuilds its dataset, the last host starts after the others finished, under another global seed: the union
    over the hosts is the epoch, each example once (with `seed=None`: a shared seed)."""
    reads = {}
    for p in range(pipelines - 1):
        ds = _host(uneven, pipelines, p, **kwargs)
        if p == 0:
            next(iter(ds))  # the peek opens one more iterator
        if p == 1:
            _ids(ds)
            ds = _host(uneven, pipelines, p, **kwargs)
        reads[p] = _ids(ds)
    tf.random.set_seed(1234)  # the late host: other global seed, other iterator history
    try:
        late = _host(uneven, pipelines, pipelines - 1, **kwargs)
        next(iter(late))
        reads[pipelines - 1] = _ids(late)
    finally:
        tf.random.set_seed(None)
    seen = [i for r in reads.values() for i in r]
    assert {len(r) for r in reads.values()} == {13 // pipelines}
    assert len(set(seen)) == len(seen) == 13 - 13 % pipelines


@pytest.mark.parametrize("examples", (13, 52))
def test_the_shares_are_a_partition_of_each_epochs_order_at_any_pipeline_count(examples):
    """The rule (`order.Layout`): at 1, 2, 3, 4, 6 and 8 pipelines, over three epochs and from frontiers a restore
    may hold, the pipelines' shares are disjoint and together the epoch's order from the frontier on (less at most
    pipelines - 1 left out); every epoch is another permutation; evaluation reads every example once (pads apart)."""
    key = 77
    full = {e: order.Layout(examples, 1, 0, True).examples_np(np.arange(examples), e, key)[0] for e in range(3)}
    assert all(sorted(full[e]) == list(range(examples)) for e in full)
    assert len({tuple(v) for v in full.values()}) == 3
    for pipelines in (1, 2, 3, 4, 6, 8):
        for e in range(3):
            for frontier in (0, 8, 24 % examples):
                layouts = [order.Layout(examples, pipelines, p, True) for p in range(pipelines)]
                shares = [lay.examples_np(np.arange(lay.elements(frontier)), e, key, frontier)[0] for lay in layouts]
                read = np.concatenate(shares)
                assert len({len(s) for s in shares}) == 1 and len(set(read.tolist())) == len(read)
                assert set(read.tolist()) <= set(full[e][frontier:].tolist())
                assert len(read) > examples - frontier - pipelines
            evaluation = [order.Layout(examples, pipelines, p, False) for p in range(pipelines)]
            got = [lay.examples_np(np.arange(lay.per_epoch), e, key) for lay in evaluation]
            assert sorted(i for index, valid in got for i in index[valid].tolist()) == list(range(examples))


def test_one_pipeline_still_reads_a_new_permutation_per_pass(uneven):
    """Without input pipelines and without an epoch, each `iter(ds)` of a `repeat=False` dataset is a new pass."""
    ds = vidvol.load(uneven, "train", 1, seed=5, spec=ReadSpec(output=Output(features=["video_id"])))
    a, b = _ids(ds), _ids(ds)
    assert sorted(a) == sorted(b) and a != b
    third = vidvol.load(uneven, "train", 1, seed=5, epoch=3, spec=ReadSpec(output=Output(features=["video_id"])))
    assert _ids(third) == _ids(third) != a  # an epoch given: every pass reads it


# Elastic resume (#34): a checkpoint of any pipeline of N restores into each of M with the same global batch.

def _save(it, path) -> str:
    tf.train.Checkpoint(iterator=it).write(path)
    return path


def _restored(ds, path):
    it = iter(ds)
    tf.train.Checkpoint(iterator=it).read(path).assert_consumed()
    return it


def _take_ids(it, batches: int) -> list[str]:
    return [i.decode() for _ in range(batches) for i in next(it)["video_id"].numpy()]


@pytest.mark.slow
@pytest.mark.parametrize("pipelines, batch", [(4, 1), pytest.param(1, 4, marks=pytest.mark.long)])
def test_a_checkpoint_of_two_pipelines_resumes_on_four_or_one_with_the_same_global_batch(uneven, tmp_path, pipelines,
                                                                                          batch):
    """Global batch 4: 2 pipelines of 2 read one step, pipeline 0 saves; restored into 4 pipelines of 1 (and 1 of 4),
    the rest of the epoch is the examples not read yet, each once (as many as that layout reads of an epoch), and
    the next epoch is the one a fresh run of that layout reads."""
    ids = [i.decode() for i in vidvol.load_labels(uneven, "train", target="video_id")]
    key = int(order.iteration_key(5, 0))
    full = lambda e: [ids[i] for i in order.Layout(13).examples_np(np.arange(13), e, key)[0]]
    host = lambda pipelines, p, batch: vidvol.load(uneven, "train", batch, seed=5, repeat=True, input_context=_context(
        pipelines, p), spec=ReadSpec(output=Output(features=["video_id"])))
    before = []
    for p in (0, 1):
        it = iter(host(2, p, 2))
        before += _take_ids(it, 1)
        if p == 0:
            path = _save(it, str(tmp_path / "two" / "ckpt"))
    assert sorted(before) == sorted(full(0)[:4])
    rest = (13 - 4) // pipelines  # elements each of the new pipelines reads of the saved epoch
    per_epoch = 13 // pipelines
    reads = [_take_ids(_restored(host(pipelines, p, batch), path), -(-(rest + per_epoch) // batch))
             for p in range(pipelines)]
    now = [i for r in reads for i in r[:rest]]
    assert len(set(now)) == len(now) == rest * pipelines and not set(now) & set(before)
    assert set(now) == set(full(0)[4:4 + rest * pipelines])
    fresh = [[ids[i] for i in order.Layout(13, pipelines, p).examples_np(np.arange(per_epoch), 1, key)[0]]
             for p in range(pipelines)]
    assert [r[rest:rest + per_epoch] for r in reads] == fresh


@pytest.mark.slow
def test_a_restore_is_checked_at_the_first_next_even_with_nothing_left(uneven, tmp_path):
    """A pass read to its end and saved: restored into 4 pipelines of the same global batch it ends at once (nothing
    is left), and every mismatch still raises at the first `next()` (another global batch, another split)."""
    spec = ReadSpec(output=Output(features=["video_id"]))
    it = iter(vidvol.load(uneven, "train", 2, seed=5, spec=spec, input_context=_context(2, 0)))
    assert len(list(it)) == (13 // 2) // 2
    path = _save(it, str(tmp_path / "end" / "ckpt"))
    assert list(_restored(vidvol.load(uneven, "train", 1, seed=5, spec=spec, input_context=_context(4, 3)), path)) == []
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"global batch of 4 \(2 per pipeline x 2 pipelines\); "
                                                             r"this pipeline reads 8 \(2 per pipeline x 4 pipelines\)"):
        next(_restored(vidvol.load(uneven, "train", 2, seed=5, spec=spec, input_context=_context(4, 1)), path))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"saved reading .*split train.*this pipeline reads .*"
                                                             r"split test"):
        next(_restored(vidvol.load(uneven, "test", 2, training=True, spec=spec, input_context=_context(2, 0)), path))


@pytest.mark.slow
def test_an_evaluation_checkpoint_resumes_on_another_layout_and_loses_no_example(tmp_path):
    """The order stage alone (no data): evaluation over 2 pipelines of 2 saves after one step; restored into 4 of 1,
    the real examples read after it and before it are the split, each once, and every pipeline's count agrees with
    the pass's stated cardinality."""
    options = tf.data.Options()
    options.experimental_symbolic_checkpoint = True  # as vidvol.load's (a full checkpoint would hold the old graph)
    make = lambda pipelines, p, batch: order.index_batches(order.Layout(13, pipelines, p, False), batch,
                                                           drop_remainder=False, repeat=False, seed=1,
                                                           fingerprint="x").with_options(options)
    it = iter(make(2, 0, 2))
    next(it)
    path = _save(it, str(tmp_path / "eval" / "ckpt"))
    before = [int(i) for t in (0, 1) for i in order.Layout(13, 2, t, False).examples_np(np.arange(2), 0, 1)[0]]
    after = []
    for p in range(4):
        draws = list(_restored(make(4, p, 1), path))
        assert len(draws) == -(-(13 - 4) // 4)  # ceil of the rest over 4: every pipeline the same count
        after += [int(i) for d in draws for i, v in zip(d["index"].numpy(), d["valid"].numpy()) if v]
    assert sorted(before + after) == list(range(13))
