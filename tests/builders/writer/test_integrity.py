"""Shard integrity on a real mri_volumes build: shards.json, `python -m vidvol verify` on clean, flipped,
truncated and missing shards, and `vidvol.load` naming the damaged file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol.builders.writer import shards_file
from vidvol.cli import verify as verify_cli
from vidvol.core import tfds_api
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.readers import shards
from vidvol.testing import samples

DATASET = "mri_volumes/small_32"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """10 subjects of real NIfTI, built in-process: (manual_dir, data_dir, builder)."""
    root = tmp_path_factory.mktemp("integrity")
    manual, data_dir = root / "manual", root / "data"
    samples.write_mri_volumes(str(manual), num_subjects=10, shape=(12, 12, 12))
    from conftest import in_process_config

    builder = mri.Builder(data_dir=str(data_dir), config="small_32")
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    return str(manual), str(data_dir), builder


def _train_files(builder) -> list[str]:
    return [os.path.join(os.fspath(builder.data_path), f) for f in builder.info.splits["train"].filenames]


def _record_starts(path: str) -> list[int]:
    """Byte offset of each record of a healthy TFRecord file."""
    starts, offset = [], 0
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        starts.append(offset)
        offset += len(record) + 16
    return starts


@pytest.fixture(scope="module")
def damaged(built, tmp_path_factory):
    """A copy of the build with one flipped byte (shard 0, record 1), a truncated shard 1 and a missing shard 2."""
    manual, data_dir, builder = built
    copy = str(tmp_path_factory.mktemp("damaged") / "data")
    shutil.copytree(data_dir, copy)
    damaged_builder = tfds.builder(DATASET, data_dir=copy)
    files = _train_files(damaged_builder)
    flipped, truncated, missing = files[0], files[1], files[2]
    starts = {f: _record_starts(f) for f in (flipped, truncated)}
    data = bytearray(open(flipped, "rb").read())
    data[starts[flipped][1] + 500] ^= 0x01  # one bit, inside record 1's data
    open(flipped, "wb").write(bytes(data))
    keep = starts[truncated][-1] + 40  # the last record cut short
    open(truncated, "r+b").truncate(keep)
    os.remove(missing)
    return {"data_dir": copy, "manual": manual, "builder": damaged_builder, "flipped": flipped, "truncated": truncated,
            "missing": missing, "starts": starts}


def test_shards_json_matches_the_files_and_a_clean_build_verifies(built, capsys):
    manual, data_dir, builder = built
    doc = shards_file.read_shards_file(os.fspath(builder.data_path))
    assert doc["manual_dir"] == manual and doc["checksum"] == "sha256"
    lengths = {f: n for s in builder.info.splits.values() for f, n in zip(s.filenames, s.shard_lengths)}
    assert {e["file"]: e["examples"] for e in doc["shards"]} == lengths
    for entry in doc["shards"]:
        data = open(os.path.join(os.fspath(builder.data_path), entry["file"]), "rb").read()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["num_bytes"] == len(data)
    assert verify_cli.main([DATASET, "--data_dir", data_dir]) == 0
    out = capsys.readouterr().out
    assert f"OK {DATASET}" in out and f"{len(lengths)} shard files, {sum(lengths.values())} records" in out
    assert "BROKEN" not in out


def test_verify_names_each_broken_file_with_its_offset_and_the_rebuild_command(damaged, capsys):
    assert verify_cli.main([DATASET, "--data_dir", damaged["data_dir"]]) == 1
    out = capsys.readouterr().out
    rebuild = (f"python -m vidvol.beam_jobs.build {DATASET} --manual_dir {damaged['manual']} "
               f"--data_dir {damaged['data_dir']} --overwrite")
    flipped_start = damaged["starts"][damaged["flipped"]][1]
    truncated_start = damaged["starts"][damaged["truncated"]][-1]
    lines = out.splitlines()
    broken = [l for l in lines if l.startswith("BROKEN ")]
    assert len(broken) == 3, out
    assert any(l.startswith(f"BROKEN {damaged['flipped']}: record 1 at byte offset {flipped_start}: DataLossError: corrupted record")
               and "sha256" in l for l in broken), out
    assert any(l.startswith(f"BROKEN {damaged['truncated']}: record {len(damaged['starts'][damaged['truncated']]) - 1} "
                            f"at byte offset {truncated_start}: DataLossError: truncated record") for l in broken), out
    assert any(l.startswith(f"BROKEN {damaged['missing']}: missing") for l in broken), out
    for i, line in enumerate(lines):
        if line.startswith("BROKEN "):
            assert lines[i + 1] == f"  rebuild: {rebuild}"
    assert lines[-2].startswith("3 of ") and lines[-1] == f"  {rebuild}"


@pytest.mark.slow  # a Python subprocess: make test runs it, make test-fast does not
def test_verify_cli_through_python_m_vidvol(damaged):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "vidvol", "verify", DATASET, "--data_dir", damaged["data_dir"]],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"BROKEN {damaged['flipped']}: record 1 at byte offset" in proc.stdout


@pytest.mark.parametrize("parse_per_batch", [True, False])
def test_load_names_a_missing_shard_file_and_the_verify_command(damaged, parse_per_batch):
    verify = f"python -m vidvol verify {DATASET} --data_dir {damaged['data_dir']}"
    with pytest.raises(FileNotFoundError) as info:
        vidvol.load(DATASET, "train", 2, data_dir=damaged["data_dir"], training=False,
                    tuning=vidvol.Tuning(parse_per_batch=parse_per_batch))
    assert f"shard files missing: {damaged['missing']}." in str(info.value) and verify in str(info.value)


@pytest.mark.parametrize("cut", [False, True])
def test_load_of_a_damaged_file_names_it(built, tmp_path, cut):
    """One shard with a flipped bit (or cut short): the error names exactly that file and the verify command, in
    training, at evaluation (both parse paths) and in load_labels; the intact split still reads."""
    _, data_dir, _ = built
    copy = str(tmp_path / "data")
    shutil.copytree(data_dir, copy)
    flipped = _train_files(tfds.builder(DATASET, data_dir=copy))[3]
    start = _record_starts(flipped)[-1]
    data = bytearray(open(flipped, "rb").read())
    if cut:
        data = data[: start + 30]
    else:
        data[start + 100] ^= 0x80
    open(flipped, "wb").write(bytes(data))
    verify = f"python -m vidvol verify {DATASET} --data_dir {copy}"
    reads = [lambda: list(vidvol.load(DATASET, "train", 2, data_dir=copy, seed=0, drop_remainder=False)),
             lambda: list(vidvol.load(DATASET, "train", 2, data_dir=copy, training=False,
                                      tuning=vidvol.Tuning(parse_per_batch=False))),
             lambda: vidvol.load_labels(DATASET, "train", data_dir=copy)]
    for read in reads:
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            read()
        assert f"shard file {flipped} could not be read to its end" in str(info.value) and verify in str(info.value)
    assert len(vidvol.load_labels(DATASET, "validation", data_dir=copy)) == 1  # the intact split still reads


def test_checked_reader_gives_tfds_order_element_for_element(built):
    _, _, builder = built
    cases = [
        ("train", tfds.ReadConfig(shuffle_seed=3, interleave_cycle_length=2, interleave_block_length=1), True),
        ("train[2:7]", tfds.ReadConfig(interleave_cycle_length=4, interleave_block_length=1), False),
        ("train", tfds.ReadConfig(shuffle_seed=5, interleave_cycle_length=1, interleave_block_length=1,
                                  input_context=tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)), True),
    ]
    for split, config, shuffle in cases:
        config.options.deterministic = True
        ours = list(shards.read_records(builder, split, config, shuffle_files=shuffle).as_numpy_iterator())
        theirs = list(tfds_api.read_files(builder, split, config, shuffle_files=shuffle).as_numpy_iterator())
        assert ours == theirs and ours, split


def test_split_hashing_left_empty_is_named_with_why(built):
    _, data_dir, builder = built
    assert set(builder.info.splits) == {"train", "validation"}  # 10 subjects: hashing put none in test
    doc = json.loads(open(os.path.join(os.fspath(builder.data_path), "skip_report.json")).read())
    assert doc["empty_splits"] == {"test": "10 subjects; hashing (~10% to test) put none in test"}
    with pytest.raises(shards.SplitNotFoundError,
                       match=r"no split 'test'; it came out empty when the dataset was built \(10 subjects; hashing .* put none "
                             r"in test\), so it was not registered. The splits there are: train \(9 examples\), validation \(1 example\)"):
        vidvol.load(DATASET, "test", 2, data_dir=data_dir)
    with pytest.raises(ValueError, match="no split 'tset'. The splits there are: train"):
        vidvol.load_labels(DATASET, "train[:50%]+tset", data_dir=data_dir)
