"""Streaming Beam writer: shard planning, skips, split infos, file formats and a real tfds read-back."""

import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import beam_writer


def toy_example_fn(record):
    """Yields one example per record, a skip for 'bad' records and a masked part for 'half'."""
    name, value = record
    if name.startswith("bad"):
        raise ValueError(f"{name}: unreadable")
    if name.startswith("half"):
        yield beam_writer.Skip(source=f"{name}/part1", reason="missing part", example=name)
    yield name, {"x": np.full((4,), value, np.int64), "name": name}


class ToyBuilder(beam_writer.StreamingBeamBuilder, skip_registration=True):
    """A tiny dataset built through the streaming writer."""

    name = "vidvol_toy"
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = 3
    NUM_TRAIN = 10

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"x": tfds.features.Tensor(shape=(4,), dtype=np.int64), "name": tfds.features.Text()}
            ),
        )

    def _split_generators(self, dl_manager):
        train = [(f"ok{i}", (f"ok{i}", i)) for i in range(self.NUM_TRAIN)] + [("bad0", ("bad0", -1)), ("half0", ("half0", 99))]
        test = [("bad1", ("bad1", -1)), ("t0", ("t0", 100))]
        return {"train": self._generate_examples(train), "test": self._generate_examples(test)}

    def _generate_examples(self, sources):
        return beam_writer.ExamplesFromSources(sources, toy_example_fn)


def _build(tmp_path, file_format=None, **config):
    builder = ToyBuilder(data_dir=str(tmp_path), file_format=file_format)
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts, **config))
    return builder


def test_plan_shards_is_stable_and_complete():
    sources = [(f"s{i}", i) for i in range(11)]
    a = beam_writer.plan_shards("train", sources, 3, lambda i, n: f"f{i}-of-{n}")
    b = beam_writer.plan_shards("train", list(reversed(sources)), 3, lambda i, n: f"f{i}-of-{n}")
    assert [t.sources for t in a] == [t.sources for t in b]
    flat = [s for t in a for s in t.sources]
    assert sorted(flat) == sorted(sources) and len(flat) == 11
    assert [len(t.sources) for t in a] == [3, 4, 4]
    with pytest.raises(ValueError, match="Duplicate source ids"):
        beam_writer.plan_shards("train", sources + [("s1", 5)], 2, lambda i, n: "x")


def test_num_shards_for():
    assert beam_writer.num_shards_for(0, 10) == 0
    assert beam_writer.num_shards_for(2, 10, min_shards=4) == 2
    assert beam_writer.num_shards_for(100, 10 << 20, max_shard_size=100 << 20, min_shards=4) == 12  # 10, to a multiple of 4
    assert beam_writer.num_shards_for(100, 8 << 20, max_shard_size=100 << 20, min_shards=4) == 8
    assert beam_writer.num_shards_for(6, 10 << 20, max_shard_size=1 << 20, min_shards=4) == 6
    assert beam_writer.num_shards_for(100, 1, num_shards=7) == 7


def test_build_read_back_and_skip_report(tmp_path):
    builder = _build(tmp_path)
    info = builder.info.splits
    assert info["train"].num_examples == 11  # 10 ok + half0; bad0 skipped
    assert info["test"].num_examples == 1
    assert len(info["train"].shard_lengths) == 3
    names = sorted(ex["name"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train")))
    assert names == sorted([f"ok{i}" for i in range(10)] + ["half0"])
    for ex in tfds.as_numpy(builder.as_dataset(split="test")):
        assert ex["x"].tolist() == [100] * 4
    report = beam_writer.read_skip_report(builder.data_dir)
    skipped = {(s["source"], s["split"]) for s in report["skipped"]}
    assert skipped == {("bad0", "train"), ("bad1", "test"), ("half0/part1", "train")}
    assert report["splits"]["train"]["skipped_inputs"] == 1
    assert report["splits"]["train"]["masked_parts"] == 1
    assert not [f for f in os.listdir(builder.data_dir) if f.endswith((".partial", ".info.json"))]


def test_same_input_same_order(tmp_path):
    a = _build(tmp_path / "a")
    b = _build(tmp_path / "b")
    na = [ex["name"] for ex in tfds.as_numpy(a.as_dataset(split="train", shuffle_files=False))]
    nb = [ex["name"] for ex in tfds.as_numpy(b.as_dataset(split="train", shuffle_files=False))]
    assert na == nb and len(na) == 11


def test_empty_shards_are_dropped_and_num_shards_honoured(tmp_path):
    builder = _build(tmp_path, num_shards=20)
    lengths = builder.info.splits["test"].shard_lengths
    assert lengths == [1]  # 2 planned shards, the one holding only bad1 is dropped
    assert sum(builder.info.splits["train"].shard_lengths) == 11
    assert len(builder.info.splits["train"].shard_lengths) == 11  # 12 planned, bad0's shard dropped


def test_array_record_shards_are_real_array_record_with_the_same_examples(tmp_path):
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top

    records = _build(tmp_path / "tfrecord")
    arrays = _build(tmp_path / "array_record", file_format="array_record")
    for split in ("train", "test"):
        a, b = records.info.splits[split], arrays.info.splits[split]
        assert (a.shard_lengths, a.num_bytes) == (b.shard_lengths, b.num_bytes)
        files = sorted(f for f in os.listdir(arrays.data_dir) if f.startswith(f"vidvol_toy-{split}."))
        assert files == [f"vidvol_toy-{split}.array_record-{i:05d}-of-{len(b.shard_lengths):05d}"
                         for i in range(len(b.shard_lengths))]
        for name, length in zip(files, b.shard_lengths):  # ArrayRecord's own reader opens every shard
            reader = array_record_module.ArrayRecordReader(os.path.join(arrays.data_dir, name))
            assert reader.num_records() == length
            reader.close()
        # By index, in the same order as the TFRecord build read in file order, with the same values.
        by_index = list(tfds.data_source("vidvol_toy", split=split, data_dir=str(tmp_path / "array_record")))
        in_order = list(tfds.as_numpy(records.as_dataset(split=split, shuffle_files=False)))
        assert [ex["name"] for ex in by_index] == [ex["name"] for ex in in_order]
        for x, y in zip(by_index, in_order):
            np.testing.assert_array_equal(x["x"], y["x"])
    assert beam_writer.read_skip_report(arrays.data_dir) == beam_writer.read_skip_report(records.data_dir)
    assert not [f for f in os.listdir(arrays.data_dir) if f.endswith((".partial", ".info.json", ".tmp"))]


@pytest.mark.parametrize("file_format", ["parquet", "riegeli"])
def test_formats_the_streaming_writer_cannot_honour_fail_before_anything_is_written(tmp_path, file_format):
    with pytest.raises(ValueError, match=rf"file_format '{file_format}' is not supported by vidvol builds .*'tfrecord' or 'array_record'"):
        _build(tmp_path / "via_builder", file_format=file_format)
    assert not os.path.exists(tmp_path / "via_builder")
    builder = ToyBuilder(data_dir=str(tmp_path / "via_prepare"))
    with pytest.raises(ValueError, match=rf"file_format '{file_format}' is not supported"):
        builder.download_and_prepare(file_format=file_format)
    assert not os.path.exists(tmp_path / "via_prepare")


def test_array_record_needs_a_local_data_dir():
    assert beam_writer.check_file_format(None) is tfds.core.FileFormat.TFRECORD
    assert beam_writer.check_file_format("tfrecord", "gs://bucket/data") is tfds.core.FileFormat.TFRECORD
    assert beam_writer.check_file_format("array_record", "/tmp/data") is tfds.core.FileFormat.ARRAY_RECORD
    with pytest.raises(ValueError, match=r"gs://bucket/data: ArrayRecord files are written and read as local files only"):
        beam_writer.check_file_format("array_record", "gs://bucket/data")
    with pytest.raises(ValueError, match="not a valid FileFormat"):
        beam_writer.check_file_format("csv")
