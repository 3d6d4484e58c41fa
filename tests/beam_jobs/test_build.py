"""The build entry point on the direct runner: counts and counters, no-op re-runs, --overwrite, same bytes twice."""

from __future__ import annotations

import os
import shutil

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol.beam_jobs import build
from vidvol.beam_jobs import runners
from vidvol.datasets.hmdb51 import layout
from vidvol.datasets.hmdb51 import make_dummy_data

pytestmark = pytest.mark.slow  # subprocess builds/CLIs: `make test` runs them, `make test-fast` does not

DATASET = "hmdb51/split1_20x64x64"
IN_MEMORY = ("--direct_num_workers=1", "--direct_running_mode=in_memory")


def expected_videos(manual: str) -> dict[str, list[str]]:
    """Video ids per split of official split 1, from the split files (the layout parser)."""
    found = layout.find_layout(manual, manual + "_extracted")
    entries = layout.split_entries(found, 1)
    return {s: sorted(e.video for e in entries if e.subset == s) for s in ("train", "test")}


def records(data_path: str) -> dict[str, list[bytes]]:
    """Every TFRecord file of a prepared dataset, by file name, records in file order."""
    return {
        name: list(tf.data.TFRecordDataset(os.path.join(data_path, name)).as_numpy_iterator())
        for name in sorted(os.listdir(data_path))
        if ".tfrecord-" in name
    }


def file_stamps(data_path: str) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every file of a dataset folder."""
    return {n: (os.stat(os.path.join(data_path, n)).st_ino, os.stat(os.path.join(data_path, n)).st_mtime_ns)
            for n in sorted(os.listdir(data_path))}


@pytest.fixture(scope="module")
def manual_dir(tmp_path_factory) -> str:
    manual = tmp_path_factory.mktemp("manual") / "hmdb51"
    shutil.copytree(make_dummy_data.DUMMY_DIR, manual)
    return str(manual)


@pytest.fixture(scope="module")
def direct_build(manual_dir, tmp_path_factory):
    """One multi-process direct build (2 SDK worker processes) through the entry point."""
    data_dir = str(tmp_path_factory.mktemp("direct"))
    result = build.build(DATASET, manual_dir=manual_dir, data_dir=data_dir, beam_flags=["--direct_num_workers=2"])
    return data_dir, result


def test_direct_build_counts_and_summary(direct_build, manual_dir):
    data_dir, result = direct_build
    expected = expected_videos(manual_dir)
    assert result.built and result.dataset == DATASET + "/1.0.0"
    assert result.data_path == os.path.join(data_dir, "hmdb51", "split1_20x64x64", "1.0.0")
    info = tfds.builder(DATASET, data_dir=data_dir).info.splits
    for split, videos in expected.items():
        s = result.splits[split]
        assert s["examples"] == len(videos) == info[split].num_examples
        assert s["num_bytes"] == info[split].num_bytes and s["shards"] == info[split].num_shards
        ds = tfds.load(DATASET, split=split, data_dir=data_dir, download=False)
        assert sorted(ex["video_id"].decode() for ex in tfds.as_numpy(ds)) == videos
    lines = build.summary_lines(result)
    assert lines[1].startswith(f"{DATASET}/1.0.0 train: {len(expected['train'])} examples in {info['train'].num_shards} shards")
    assert lines[1].endswith("0 inputs skipped")


def test_rebuild_is_a_noop_and_overwrite_rebuilds_the_same_bytes(direct_build, manual_dir):
    data_dir, first = direct_build
    before_files = file_stamps(first.data_path)
    before_records = records(first.data_path)
    before_shards = open(os.path.join(first.data_path, "shards.json"), encoding="utf-8").read()
    assert len(before_records) == sum(s["shards"] for s in first.splits.values())

    again = build.build(DATASET, manual_dir=manual_dir, data_dir=data_dir, beam_flags=IN_MEMORY)
    assert not again.built and again.splits == first.splits
    assert file_stamps(first.data_path) == before_files  # nothing rewritten
    assert "nothing rebuilt" in build.summary_lines(again)[-1]

    # --overwrite rebuilds, here in a single in-memory worker instead of two worker processes:
    # the same examples in the same order, byte for byte.
    rebuilt = build.build(DATASET, manual_dir=manual_dir, data_dir=data_dir, beam_flags=IN_MEMORY, overwrite=True)
    assert rebuilt.built and rebuilt.splits == first.splits
    after_files = file_stamps(first.data_path)
    assert after_files.keys() == before_files.keys()
    assert all(after_files[n] != before_files[n] for n in before_files)
    assert records(first.data_path) == before_records
    # The checksums and counts the workers recorded are the same on both runners, byte for byte.
    assert open(os.path.join(first.data_path, "shards.json"), encoding="utf-8").read() == before_shards


def test_num_shards_and_leftovers_of_interrupted_builds(manual_dir, tmp_path):
    data_dir = str(tmp_path / "out")
    stale = os.path.join(data_dir, "hmdb51", "split1_20x64x64", "incomplete.ABC123_1.0.0")
    os.makedirs(stale)
    with open(os.path.join(stale, "hmdb51-train.tfrecord-00000-of-00004.partial"), "wb") as f:
        f.write(b"half a shard")
    builder = build.make_builder(DATASET, data_dir)
    assert build.incomplete_dirs(builder) == [stale]
    assert not builder.is_prepared()
    result = build.build(DATASET, manual_dir=manual_dir, data_dir=data_dir, beam_flags=IN_MEMORY,
                         num_shards=2, remove_incomplete=True)
    assert not os.path.exists(stale)
    assert {s: v["shards"] for s, v in result.splits.items()} == {"train": 2, "test": 2}
    assert sum(len(r) for r in records(result.data_path).values()) == sum(v["examples"] for v in result.splits.values())


def test_max_shard_size_reaches_the_writer(manual_dir):
    builder = build.make_builder(DATASET, "/nonexistent")
    config = build.download_config(manual_dir=manual_dir, flags=runners.pipeline_flags("direct"), max_shard_size_mb=3)
    assert config.max_shard_size == 3 << 20
    assert builder._max_shard_size(config) == 3 << 20
    default = build.download_config(manual_dir=manual_dir, flags=runners.pipeline_flags("direct"))
    assert builder._max_shard_size(default) == builder.builder_config.max_shard_size
    assert type(config.beam_runner).__name__ == "FnApiRunner"
    assert config.beam_options.get_all_options()["direct_running_mode"] == "multi_processing"


def test_bad_options_stop_before_anything_is_written(manual_dir, tmp_path):
    with pytest.raises(runners.UnknownOptionError, match="direct_num_workerz"):
        build.build(DATASET, manual_dir=manual_dir, data_dir=str(tmp_path / "a"), beam_flags=["--direct_num_workerz=2"])
    with pytest.raises(ValueError, match="--runner portable .* or --runner dask .*, not .direct."):
        build.build(DATASET, manual_dir=manual_dir, data_dir=str(tmp_path / "b"), local_services=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_summary_lines_say_which_split_is_empty_and_why():
    result = build.BuildResult(
        "mri_volumes/small_32/2.0.0", "/d", True,
        {"train": {"examples": 9, "shards": 4, "num_bytes": 2 << 20, "skipped_inputs": 0, "masked_parts": 0},
         "test": {"examples": 0, "shards": 0, "num_bytes": 0, "skipped_inputs": 1, "masked_parts": 0}},
        [{"source": "v/a.nii.gz", "reason": "FileNotFoundError: v/a.nii.gz", "split": "test", "example": ""}],
        {"test": "every input skipped: 1 missing file"},
    )
    lines = build.summary_lines(result)
    assert lines[0] == ("mri_volumes/small_32/2.0.0 test: empty — every input skipped: 1 missing file; not registered "
                        "(loading it lists the splits there are)")
    assert lines[1].startswith("mri_volumes/small_32/2.0.0 train: 9 examples in 4 shards")


def test_tfds_build_file_format_array_record_gives_random_access(manual_dir, tmp_path, tfds_build):
    """The issue's reproduction: `tfds build --file_format array_record` now writes real ArrayRecord shards."""
    data_dir = tmp_path / "tfds_cli"
    tfds_build(DATASET, manual_dir, data_dir, "--file_format", "array_record",
               "--beam_pipeline_options=direct_num_workers=1,direct_running_mode=in_memory")
    ids = {}
    for split, want in expected_videos(manual_dir).items():
        source = tfds.data_source(DATASET, split=split, data_dir=str(data_dir))  # raised "Corrupted Riegeli/records file"
        ids[split] = sorted(source[i]["video_id"].decode() for i in range(len(source)))
        assert ids[split] == want
        ours = vidvol.data_source(DATASET, split, data_dir=data_dir)
        assert ours[0]["video"].shape == (20, 64, 64, 3) and ours[0]["video"].dtype == "uint8"
    path = os.path.join(str(data_dir), "hmdb51", "split1_20x64x64", "1.0.0")
    assert not [n for n in os.listdir(path) if ".tfrecord" in n]
    assert build.read_result(build.make_builder(DATASET, str(data_dir)), built=True).splits["train"]["examples"] == 6


@pytest.mark.parametrize("file_format", ["parquet", "riegeli"])
def test_cli_refuses_a_file_format_it_cannot_honour_before_writing(manual_dir, tmp_path, capsys, file_format):
    data_dir = tmp_path / "out"
    code = build.main([DATASET, "--manual_dir", manual_dir, "--data_dir", str(data_dir), "--file_format", file_format,
                       *IN_MEMORY])
    assert code == 2
    assert f"error: file_format '{file_format}' is not supported by vidvol builds" in capsys.readouterr().err
    assert not data_dir.exists()
    cmd = build.tfds_command(DATASET, manual_dir=manual_dir, data_dir="/d", flags=["--runner=direct"],
                             file_format="array_record")
    assert cmd[-2:] == ["--file_format", "array_record"]
