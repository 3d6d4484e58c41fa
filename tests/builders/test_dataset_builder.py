"""The builder base: a toy dataset built through the streaming writer (skips, empty splits, shard list, file formats) and read back with tfds."""

import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import dataset_builder
from vidvol.builders import example_io
from vidvol.builders.writer import skip_report

from toy_features import ToyFeatures


def toy_example_fn(record):
    """Yields one example per record, a skip for 'bad' records and a masked part for 'half'."""
    name, value = record
    if name.startswith("bad"):
        raise ValueError(f"{name}: unreadable")
    if name.startswith("half"):
        yield example_io.Skip(source=f"{name}/part1", reason="missing part", example=name)
    yield name, {"x": np.full((4,), value, np.int64), "name": name}


class ToyBuilder(ToyFeatures, dataset_builder.StreamingBeamBuilder, skip_registration=True):
    """A tiny dataset built through the streaming writer."""

    name = "vidvol_toy"
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = 3
    NUM_TRAIN = 10

    def _split_generators(self, dl_manager):
        train = [(f"ok{i}", (f"ok{i}", i)) for i in range(self.NUM_TRAIN)] + [("bad0", ("bad0", -1)), ("half0", ("half0", 99))]
        test = [("bad1", ("bad1", -1)), ("t0", ("t0", 100))]
        return {"train": self._generate_examples(train), "test": self._generate_examples(test)}

    def _generate_examples(self, sources):
        return dataset_builder.ExamplesFromSources(sources, toy_example_fn)


def _build(tmp_path, file_format=None, **config):
    builder = ToyBuilder(data_dir=str(tmp_path), file_format=file_format)
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts, **config))
    return builder


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
    report = skip_report.read_skip_report(builder.data_dir)
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


# ----------------------------------------------------------------------------------------------
# Empty splits, shard checksums, file formats


class EmptySplitsBuilder(ToyBuilder, skip_registration=True):
    """train has examples; validation has no input at all (with the builder's reason); test only bad inputs."""

    name = "vidvol_toy_empty"

    def _split_generators(self, dl_manager):
        train = [(f"ok{i}", (f"ok{i}", i)) for i in range(4)]
        test = [("bad1", ("bad1", -1)), ("bad2", ("bad2", -2))]
        return {
            "train": self._generate_examples(train),
            "validation": dataset_builder.ExamplesFromSources([], toy_example_fn, empty_reason="3 subjects; hashing put none in validation"),
            "test": self._generate_examples(test),
        }


class NothingBuilder(ToyBuilder, skip_registration=True):
    name = "vidvol_toy_nothing"

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples([("bad1", ("bad1", -1))])}


def test_empty_splits_are_not_registered_and_the_summary_says_why(tmp_path, capsys):
    builder = EmptySplitsBuilder(data_dir=str(tmp_path))
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts))
    err = capsys.readouterr().err
    assert set(builder.info.splits) == {"train"}
    assert "vidvol_toy_empty validation: empty — 3 subjects; hashing put none in validation; not registered" in err
    assert "vidvol_toy_empty test: empty — every input skipped: 2 ValueError; not registered" in err
    reloaded = tfds.builder_from_directory(builder.data_dir)
    assert set(reloaded.info.splits) == {"train"}
    with pytest.raises(ValueError, match=r"Unknown split 'test'. Should be one of \['train'\]"):
        reloaded.as_dataset(split="test")
    report = skip_report.read_skip_report(builder.data_dir)
    assert report["empty_splits"] == {"validation": "3 subjects; hashing put none in validation",
                                      "test": "every input skipped: 2 ValueError"}
    assert not [f for f in os.listdir(builder.data_dir) if "-test." in f or "-validation." in f]


def test_a_build_with_no_example_at_all_fails_saying_why(tmp_path):
    builder = NothingBuilder(data_dir=str(tmp_path))
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    with pytest.raises(ValueError, match=r"no split has an example(.|\n)*train: every input skipped: 1 ValueError(.|\n)*bad1: ValueError: bad1: unreadable"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts))
    assert not builder.is_prepared()


def test_shards_json_records_every_shard_as_written(tmp_path):
    import hashlib

    builder = _build(tmp_path, num_shards=20)
    doc = json.loads((tmp_path / "vidvol_toy" / "1.0.0" / "shards.json").read_text())
    assert doc["checksum"] == "sha256" and doc["dataset"] == "vidvol_toy" and doc["version"] == "1.0.0"
    files = [e["file"] for e in doc["shards"]]
    assert files == sorted(files)
    expected = {name: n for split in builder.info.splits.values() for name, n in zip(split.filenames, split.shard_lengths)}
    assert {e["file"]: e["examples"] for e in doc["shards"]} == expected  # the dropped empty shards are not listed
    for entry in doc["shards"]:
        data = (tmp_path / "vidvol_toy" / "1.0.0" / entry["file"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["num_bytes"] == len(data)
    again = tmp_path / "again"
    _build(again, num_shards=20)
    assert (again / "vidvol_toy" / "1.0.0" / "shards.json").read_text() == json.dumps(doc, indent=1, sort_keys=True)


def test_array_record_shards_are_real_array_record_with_the_same_examples(tmp_path):
    from array_record.python import array_record_module

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
    assert skip_report.read_skip_report(arrays.data_dir) == skip_report.read_skip_report(records.data_dir)
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


class GeneratorBuilder(ToyBuilder, skip_registration=True):
    """A builder whose `_generate_examples` is a plain TFDS generator, not the streaming contract."""

    name = "vidvol_toy_generator"

    def _generate_examples(self, sources):
        yield from ((key, {"x": np.full((4,), value[1], np.int64), "name": key}) for key, value in sources)


def test_a_split_that_is_not_examples_from_sources_fails_naming_the_split_and_the_contract(tmp_path):
    builder = GeneratorBuilder(data_dir=str(tmp_path))
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    with pytest.raises(TypeError, match=r"vidvol_toy_generator: split 'train': _generate_examples must return "
                                        r"vidvol\.builders\.dataset_builder\.ExamplesFromSources\(sources, example_fn\), got generator"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts))
    assert not builder.is_prepared()
