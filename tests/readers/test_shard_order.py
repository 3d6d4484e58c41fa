"""The shard-streaming order (`ReadSpec(order=ShardOrder(...))`): its rule, its promises and its refusals.

The rule is a seeded permutation of the split per epoch that reads each shard within one block of shards;
`vidvol.load`, Grain and the PyTorch sampler compute it alike. Over uneven shards (13 examples in 4 files:
4, 3, 3, 3) the fleet promises of the default order hold in it too: equal batches of disjoint examples per
pipeline, a checkpoint that resumes exactly and restores from N pipelines into M, and a state saved in
the other order refused with an error naming both.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from in_process_build import build
import vidvol
from vidvol import Output, ReadSpec, ShardOrder, Tuning
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.readers import order
from vidvol.readers.shard_order import OrderError
from vidvol.testing import samples

IDS = ReadSpec(output=Output(features=["video_id"]), order=ShardOrder(block=2))


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """hmdb51/split1_20x64x64 with 13 train and 13 test examples in 4 shard files of 4, 3, 3, 3 (TFRecord), and
    the same as ArrayRecord: (tfrecord builder, array_record data_dir)."""
    from conftest import in_process_config  # tests/conftest.py

    root = tmp_path_factory.mktemp("shard_order")
    samples.write_hmdb51_layout(str(root / "manual"), videos_per_class=13, num_frames=(4, 8), height=24, width=32,
                                splits=(1,), seed=2)
    builder = build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data", num_shards=4)
    assert sorted(builder.info.splits["train"].shard_lengths) == [3, 3, 3, 4]
    ar = hmdb.Builder(data_dir=str(root / "ar"), config="split1_20x64x64", file_format="array_record")
    ar.download_and_prepare(download_config=in_process_config(manual_dir=str(root / "manual"), num_shards=4))
    return builder, str(root / "ar")


def _context(pipelines: int, pipeline: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                      num_replicas_in_sync=pipelines)


def _ids(ds) -> list[str]:
    return [i.decode() for b in tfds.as_numpy(ds) for i in b["video_id"]]


def _take_ids(it, batches: int) -> list[str]:
    return [i.decode() for _ in range(batches) for i in next(it)["video_id"].numpy()]


@pytest.mark.parametrize("sizes, block", [((4, 3, 3, 3), 2), ((5, 7, 1, 9, 4, 6, 3), 3), ((2,) * 9, 1), ((6, 1), 2)])
def test_each_epoch_is_a_permutation_that_reads_each_shard_within_one_block(sizes, block):
    blocks = ShardOrder(block).over(sizes, "test split")
    first = np.concatenate([[0], np.cumsum(sizes)])
    shard_of = np.searchsorted(first, np.arange(sum(sizes)), side="right") - 1
    orders = []
    for epoch in range(3):
        index = blocks.index_np(np.arange(sum(sizes)), epoch, 77)
        assert sorted(index.tolist()) == list(range(sum(sizes)))  # every example once
        sequence = blocks.shard_sequence(77, epoch)
        place = {int(f): p for p, f in enumerate(sequence)}
        positions_of_block = {}
        for t, i in enumerate(index):
            positions_of_block.setdefault(place[int(shard_of[i])] // block, []).append(t)
        spans = [(min(ts), max(ts)) for _, ts in sorted(positions_of_block.items())]
        # the blocks follow one another: a block's positions are one run, before the next block's
        assert all(hi - lo + 1 == len(positions_of_block[b]) for b, (lo, hi) in enumerate(spans))
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        orders.append(index.tolist())
    assert orders[0] != orders[1] or len(sizes) == 1  # a new order each epoch
    again = ShardOrder(block).over(sizes, "test split").index_np(np.arange(sum(sizes)), 0, 77)
    assert again.tolist() == orders[0]  # a pure function of (key, epoch)


def test_numpy_and_tensorflow_give_the_same_order_across_an_epoch_boundary():
    layout = order.Layout(22, 2, 1, True, ShardOrder(3).over((5, 7, 1, 9 - 5, 4, 1), "x"))
    epochs, t = layout.locate_tf(tf.range(30, dtype=tf.int64), tf.constant(np.int64(0)), tf.constant(np.int64(4)))
    got = layout.examples_tf(epochs, t, tf.constant(np.int64(99)))["index"].numpy()
    want = [int(layout.blocks.index_np(np.int64(tt), np.int64(e), 99)) for e, tt in zip(epochs.numpy(), t.numpy())]
    assert got.tolist() == want


def test_load_reads_the_rule_and_pipelines_get_equal_disjoint_shares(uneven):
    builder, _ = uneven
    ids = [i.decode() for i in vidvol.load_labels(builder, "train", target="video_id")]
    key = int(order.iteration_key(4, 0))
    layout = order.Layout(13, 1, 0, True, ShardOrder(2).over((4, 3, 3, 3), "x"))
    sizes = builder.info.splits["train"].shard_lengths
    layout = order.Layout(13, 1, 0, True, ShardOrder(2).over(sizes, "x"))
    want = [ids[i] for i in layout.examples_np(np.arange(13), 0, key)[0]]
    one = _ids(vidvol.load(builder, "train", 1, seed=4, spec=IDS, epoch=0))
    assert one == want
    assert one != _ids(vidvol.load(builder, "train", 1, seed=4, epoch=0, spec=ReadSpec(output=IDS.output)))
    reads = [_ids(vidvol.load(builder, "train", 1, seed=4, spec=IDS, input_context=_context(3, p))) for p in range(3)]
    assert {len(r) for r in reads} == {13 // 3}  # the same number of batches on every host
    seen = [i for r in reads for i in r]
    assert len(set(seen)) == len(seen) == 12 and set(seen) <= set(want)  # disjoint; 13 mod 3 left out
    assert [r for r in reads] == [want[p:12:3] for p in range(3)]  # pipeline p reads positions p, p + 3, ...


def _save(it, path) -> str:
    tf.train.Checkpoint(iterator=it).write(path)
    return path


def _restored(ds, path):
    it = iter(ds)
    tf.train.Checkpoint(iterator=it).read(path).assert_consumed()
    return it


def test_a_checkpoint_resumes_exactly_and_from_two_pipelines_into_four(uneven, tmp_path):
    builder, _ = uneven
    host = lambda pipelines, p, batch: vidvol.load(builder, "train", batch, seed=5, repeat=True, spec=IDS,
                                                   input_context=_context(pipelines, p))
    it = iter(vidvol.load(builder, "train", 2, seed=5, repeat=True, spec=IDS))
    _take_ids(it, 3)
    path = _save(it, str(tmp_path / "one" / "ckpt"))
    straight = _take_ids(it, 8)  # across the epoch boundary
    assert _take_ids(_restored(vidvol.load(builder, "train", 2, seed=99, repeat=True, spec=IDS), path), 8) == straight

    before = []
    for p in (0, 1):
        it = iter(host(2, p, 2))
        before += _take_ids(it, 1)
        if p == 0:
            path = _save(it, str(tmp_path / "two" / "ckpt"))
    rest = (13 - 4) // 4
    reads = [_take_ids(_restored(host(4, p, 1), path), rest) for p in range(4)]
    now = [i for r in reads for i in r]
    assert len(set(now)) == len(now) == rest * 4 and not set(now) & set(before)
    key = int(order.iteration_key(5, 0))
    layout = order.Layout(13, 1, 0, True, ShardOrder(2).over(builder.info.splits["train"].shard_lengths, "x"))
    ids = [i.decode() for i in vidvol.load_labels(builder, "train", target="video_id")]
    full = [ids[i] for i in layout.examples_np(np.arange(13), 0, key)[0]]
    assert sorted(before) == sorted(full[:4]) and set(now) == set(full[4:4 + rest * 4])


def test_a_checkpoint_of_the_other_order_is_refused_naming_both(uneven, tmp_path):
    builder, _ = uneven
    plain = ReadSpec(output=IDS.output)
    for saved_spec, restored_spec in ((plain, IDS), (IDS, plain), (IDS, ReadSpec(output=IDS.output,
                                                                                 order=ShardOrder(3)))):
        it = iter(vidvol.load(builder, "train", 2, seed=5, spec=saved_spec))
        next(it)
        path = _save(it, str(tmp_path / f"{id(saved_spec)}-{id(restored_spec)}" / "ckpt"))
        with pytest.raises(tf.errors.InvalidArgumentError, match="ReadSpec.order") as e:
            next(_restored(vidvol.load(builder, "train", 2, seed=5, spec=restored_spec), path))
        blocks = {s.order.block for s in (saved_spec, restored_spec) if s.order is not None}
        assert all(f"blocks of {b} shard files" in e.value.message for b in blocks)


def test_bad_blocks_and_windows_are_refused_when_the_pipeline_is_made(uneven):
    builder, ar = uneven
    with pytest.raises(ValueError, match=r"block must be an integer >= 1 .*smallest that works is 1"):
        ShardOrder(block=0)
    too_big = ReadSpec(order=ShardOrder(block=5))
    with pytest.raises(OrderError, match=r"4 shard files; use block=4 at most"):
        vidvol.load(builder, "train", 2, spec=too_big)
    with pytest.raises(OrderError, match=r"use block=4 at most"):
        vidvol.grain_dataset("hmdb51/split1_20x64x64", "train", 2, data_dir=ar, spec=too_big)
    with pytest.raises(OrderError, match=r"use block=4 at most"):
        vidvol.torch_dataset("hmdb51/split1_20x64x64", "train", data_dir=ar, spec=too_big)
    with pytest.raises(OrderError, match=r"stream_window=1000 bytes cannot hold one block of 2 shard files .*"
                                         r"the smallest window that works is (\d+) bytes") as e:
        vidvol.load(builder, "train", 2, spec=IDS, tuning=Tuning(stream_window=1000))
    least = int(e.value.args[0].split("works is ")[1].split(" ")[0])
    vidvol.load(builder, "train", 2, spec=IDS, tuning=Tuning(stream_window=least))  # the least that works does
    with pytest.raises(OrderError):
        vidvol.load(builder, "train", 2, spec=IDS, tuning=Tuning(stream_window=least - 1))
    with pytest.raises(ValueError, match="per-example order"):
        vidvol.load(builder, "train", 2, tuning=Tuning(stream_window="1GB"))
    with pytest.raises(ValueError, match="ReadSpec.order must be None"):
        ReadSpec(order=2)


def test_grain_and_the_sampler_read_load_s_order_and_refuse_the_other_order_s_state(uneven):
    builder, ar = uneven
    name = "hmdb51/split1_20x64x64"
    spec = ReadSpec(order=ShardOrder(2))
    examples = vidvol.torch_dataset(name, "train", data_dir=ar, seed=3, spec=spec)
    sampler = examples.sampler(num_replicas=2, rank=1)
    sampler.set_epoch(1)
    layout = order.Layout(13, 2, 1, True, ShardOrder(2).over(examples.source.shard_sizes, "x"))
    assert [int(i) for i in sampler] == layout.examples_np(np.arange(6), 1, 3)[0].tolist()
    plain = vidvol.torch_dataset(name, "train", data_dir=ar, seed=3).sampler(num_replicas=2, rank=1)
    with pytest.raises(ValueError, match="shard-streaming order in blocks of 2"):
        plain.load_state_dict(sampler.state_dict())
    ds = vidvol.grain_dataset(name, "train", 2, data_dir=ar, seed=3, spec=spec)
    it = iter(ds)
    next(it)
    state = it.get_state()
    straight = [next(it)[1].tolist() for _ in range(3)]
    again = iter(vidvol.grain_dataset(name, "train", 2, data_dir=ar, seed=3, spec=spec))
    again.set_state(state)
    assert [next(again)[1].tolist() for _ in range(3)] == straight
    other = iter(vidvol.grain_dataset(name, "train", 2, data_dir=ar, seed=3))
    with pytest.raises(ValueError, match="shard-streaming order"):
        other.set_state(state)


_RESTORE = r"""
import json, sys
import tensorflow as tf
import vidvol
from vidvol import Output, ReadSpec, ShardOrder
ds = vidvol.load("hmdb51/split1_20x64x64", "train", 2, data_dir=sys.argv[1], repeat=True,
                 spec=ReadSpec(output=Output(features=["video_id"]), order=ShardOrder(block=2)))
it = iter(ds)
tf.train.Checkpoint(iterator=it).read(sys.argv[2]).assert_consumed()
print(json.dumps([i.decode() for _ in range(8) for i in next(it)["video_id"].numpy()]))
"""


# A second Python importing TensorFlow (~8 s of CPU): `make test` runs it; the fast lane keeps the same restore in
# this process (test_a_checkpoint_resumes_exactly_and_from_two_pipelines_into_four).
@pytest.mark.slow
def test_a_fresh_process_continues_the_saved_order_exactly(uneven, tmp_path):
    """Saved here after 3 batches (seed 5); a new process without a seed restores it: the next 8 batches (across the
    epoch boundary) are those this process reads on."""
    import json
    import os
    import subprocess
    import sys

    builder, _ = uneven
    it = iter(vidvol.load(builder, "train", 2, seed=5, repeat=True, spec=IDS))
    _take_ids(it, 3)
    path = _save(it, str(tmp_path / "ckpt"))
    straight = _take_ids(it, 8)
    data_dir = os.fspath(builder.data_path.parents[2])  # DATA_DIR/hmdb51/CONFIG/VERSION
    proc = subprocess.run([sys.executable, "-c", _RESTORE, data_dir, path], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == straight
