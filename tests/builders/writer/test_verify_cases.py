"""`python -m vidvol verify` on what a hand or a copy can do to a built dataset: a malformed or foreign `shards.json`,
no `shards.json` at all (TFRecord and ArrayRecord: "NOT VERIFIED", exit 3), a shard holding more records than the
build wrote (verify flags it; `vidvol.load`, `load_labels` and `data_source` refuse it, naming the file)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import vidvol
from vidvol.cli import verify as verify_cli
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples

DATASET = "mri_volumes/small_32"


def _build(root, file_format: str):
    from conftest import in_process_config

    manual, data_dir = root / "manual", root / "data"
    samples.write_mri_volumes(str(manual), num_subjects=10, shape=(10, 10, 10))
    builder = mri.Builder(data_dir=str(data_dir), config="small_32", file_format=file_format)
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    return str(data_dir), os.fspath(builder.data_path)


@pytest.fixture(scope="module")
def tfrecord(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("verify_tfrecord"), "tfrecord")


@pytest.fixture(scope="module")
def array_record(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("verify_array_record"), "array_record")


@pytest.fixture
def copy(tmp_path):
    """A copy of a built data_dir, to damage: (data_dir, data_path)."""
    def make(built):
        data_dir, data_path = built
        target = tmp_path / "data"
        shutil.copytree(data_dir, target)
        return str(target), os.path.join(str(target), os.path.relpath(data_path, data_dir))
    return make


def _verify(data_dir, capsys) -> tuple[int, str]:
    code = verify_cli.main([DATASET, "--data_dir", data_dir])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


def _edit_shards(data_path, change) -> None:
    path = os.path.join(data_path, "shards.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc = change(doc)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("change,said", [
    (lambda d: d["shards"], "malformed: it is an array, expected an object"),
    (lambda d: {**d, "manual_dir": 17}, "`manual_dir` is a number, expected a string or null"),
    (lambda d: {k: v for k, v in d.items() if k not in ("shards", "version")}, "no `version`; no `shards`"),
    (lambda d: {**d, "shards": {"a": 1}}, "`shards` is an object, expected an array"),
    (lambda d: {**d, "shards": [{**d["shards"][0], "examples": "3", "sha256": 5}] + d["shards"][1:]},
     "`examples` is '3', expected a whole number"),
    (lambda d: {**d, "checksum": "md5"}, "this vidvol records and checks 'sha256'"),
])
def test_a_malformed_shards_json_is_reported_as_such(tfrecord, copy, capsys, change, said):
    data_dir, data_path = copy(tfrecord)
    _edit_shards(data_path, change)
    code, out = _verify(data_dir, capsys)
    assert code == 1, out
    assert f"BROKEN {os.path.join(data_path, 'shards.json')}: malformed: " in out and said in out, out
    assert "rebuild" in out
    # Only shards.json is broken, no shard file: the verdict says so, not "1 of N shard files".
    assert out.splitlines()[-2] == f"shards.json of {DATASET} in {data_path} is broken; rebuild the config with", out


def test_a_shards_json_that_is_not_json_is_reported(tfrecord, copy, capsys):
    data_dir, data_path = copy(tfrecord)
    with open(os.path.join(data_path, "shards.json"), "w", encoding="utf-8") as f:
        f.write("{not json")
    code, out = _verify(data_dir, capsys)
    assert code == 1 and "shards.json: unreadable" in out, out


@pytest.mark.parametrize("key,value", [("dataset", "mri_volumes/128"), ("version", "0.9.0")])
def test_shards_json_of_another_dataset_or_version_is_flagged(tfrecord, copy, capsys, key, value):
    data_dir, data_path = copy(tfrecord)
    _edit_shards(data_path, lambda d: {**d, key: value})
    code, out = _verify(data_dir, capsys)
    assert code == 1, out
    assert "it was written for" in out and value in out and "its checksums do not apply here" in out, out


def test_a_clean_build_verifies_in_both_formats(tfrecord, array_record, capsys):
    for data_dir, _ in (tfrecord, array_record):
        code, out = _verify(data_dir, capsys)
        assert code == 0 and f"OK {DATASET}" in out and "every checksum" in out, out


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_without_shards_json_it_says_not_verified(tfrecord, array_record, copy, capsys, fmt):
    data_dir, data_path = copy(tfrecord if fmt == "tfrecord" else array_record)
    os.remove(os.path.join(data_path, "shards.json"))
    code, out = _verify(data_dir, capsys)
    assert code == verify_cli.EXIT_NOT_VERIFIED == 3, out
    assert f"NOT VERIFIED {DATASET}" in out and "there is no shards.json" in out and "OK " not in out, out
    info = json.load(open(os.path.join(data_path, "dataset_info.json"), encoding="utf-8"))
    total = sum(int(x) for s in info["splits"] for x in s["shardLengths"])
    assert f"{total} records read, counted and parsed" in out, out


def _append_record(path: str) -> None:
    """One more valid TFRecord record (a copy of the first) at the end of a shard file."""
    data = open(path, "rb").read()
    length = int.from_bytes(data[:8], "little")
    with open(path, "ab") as f:
        f.write(data[: 12 + length + 4])


def _train_shard(data_path: str, fmt: str) -> str:
    return sorted(os.path.join(data_path, n) for n in os.listdir(data_path) if f"train.{fmt}-" in n)[0]


def test_a_tfrecord_shard_with_more_records_than_recorded_is_flagged_and_refused(tfrecord, copy, capsys):
    data_dir, data_path = copy(tfrecord)
    shard = _train_shard(data_path, "tfrecord")
    _append_record(shard)
    code, out = _verify(data_dir, capsys)
    assert code == 1 and f"BROKEN {shard}: " in out and "it holds more than the build wrote" in out, out
    with pytest.raises(ValueError, match=f"shard file {shard} holds more than the build wrote"):
        vidvol.load(DATASET, "train", 2, data_dir=data_dir, training=False)
    with pytest.raises(ValueError, match=f"shard file {shard} holds more than the build wrote"):
        vidvol.load_labels(DATASET, "train", data_dir=data_dir)
    os.remove(os.path.join(data_path, "shards.json"))  # no recorded sizes: load still counts every file's records
    with pytest.raises(ValueError, match=f"shard file {shard} holds more than the build wrote into it \\(.* records\\)"):
        vidvol.load(DATASET, "train", 2, data_dir=data_dir, training=False)


def test_an_array_record_shard_with_more_records_than_recorded_is_flagged_and_refused(array_record, copy, capsys):
    from array_record.python import array_record_module

    data_dir, data_path = copy(array_record)
    shard = _train_shard(data_path, "array_record")
    reader = array_record_module.ArrayRecordReader(shard)
    records = list(reader.read_all())
    reader.close()
    writer = array_record_module.ArrayRecordWriter(shard, "group_size:1")
    for record in records + records[:1]:
        writer.write(record)
    writer.close()
    code, out = _verify(data_dir, capsys)
    assert code == 1 and f"BROKEN {shard}: {len(records) + 1} records, {len(records)} expected" in out, out
    with pytest.raises(ValueError, match=f"shard file {shard} holds more than the build wrote"):
        vidvol.data_source(DATASET, "train", data_dir=data_dir)


def test_a_split_dropped_from_dataset_info_fails_naming_its_shard(tfrecord, copy, capsys):
    """A shard shards.json records but dataset_info.json no longer lists is never read: exit 1, not a note."""
    data_dir, data_path = copy(tfrecord)
    path = os.path.join(data_path, "dataset_info.json")
    with open(path, encoding="utf-8") as f:
        info = json.load(f)
    dropped = [s for s in info["splits"] if s["name"] == "validation"]
    assert dropped, [s["name"] for s in info["splits"]]
    info["splits"] = [s for s in info["splits"] if s["name"] != "validation"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f)
    code, out = _verify(data_dir, capsys)
    assert code == 1, out
    assert "BROKEN" in out and "mri_volumes-validation.tfrecord-00000-of-" in out and "OK " not in out, out
    # The dropped shard is a shard file too: counted among the broken and among those looked at.
    listed = sum(len(s["shardLengths"]) for s in info["splits"])
    broken = sum(len(s["shardLengths"]) for s in dropped)
    assert out.splitlines()[-2].startswith(f"{broken} of {listed + broken} shard files of {DATASET} in "), out


def test_bytes_after_the_last_record_are_a_truncated_record(tfrecord, copy, capsys):
    """A few bytes past the last record (too few for a record header): TensorFlow's reader stops there without a
    word; verify's walk (core.tfrecord) names a truncated record at that offset, also with no checksum to compare."""
    data_dir, data_path = copy(tfrecord)
    os.remove(os.path.join(data_path, "shards.json"))
    shard = _train_shard(data_path, "tfrecord")
    end = os.path.getsize(shard)
    with open(shard, "ab") as f:
        f.write(b"\x01\x02\x03\x04\x05")
    code, out = _verify(data_dir, capsys)
    assert code == 1, out
    assert f"at byte offset {end}: DataLossError: truncated record at {end}: a record header cut short" in out, out
