"""The same command grows a dataset: a build over a manual_dir that gained, changed or lost sources decodes only those.

Each dataset is built once (in process, real Beam, real files), its manual_dir changed, and the same build run
again: the grown dataset holds, split for split, the same examples as a clean build of the changed collection;
its unchanged shards are hard links to the previous ones; the kept sources were never opened (their atime, set
days back, did not move); the summary counts kept, added, changed and removed sources.
"""

from __future__ import annotations

import csv
import json
import hashlib
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow_datasets as tfds

import vidvol  # registers the datasets; its readers check the grown dataset
from vidvol.builders.writer import grow as grow_lib
from vidvol.builders.writer import sources_manifest
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb
from vidvol.testing import samples

DAY = 86400


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _write_rows(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def _digest(value) -> str:
    """A stable digest of one decoded feature value (arrays by dtype, shape and bytes)."""
    if isinstance(value, dict):
        return hashlib.sha256("".join(f"{k}={_digest(v)};" for k, v in sorted(value.items())).encode()).hexdigest()
    a = np.asarray(value)
    return hashlib.sha256(f"{a.dtype}{a.shape}".encode() + a.tobytes()).hexdigest()


def _examples(data_dir, name) -> dict[str, set[str]]:
    """{split: set of each example's digest over every decoded feature} of a prepared dataset."""
    builder = tfds.builder(name, data_dir=str(data_dir))
    return {split: {_digest(ex) for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False))}
            for split in builder.info.splits}


def _age(paths) -> dict[str, int]:
    """Sets each file's atime two days back (relatime then moves it on any read); returns the atimes set."""
    out = {}
    for p in paths:
        st = os.stat(p)
        atime = st.st_mtime_ns - 2 * DAY * 10**9
        os.utime(p, ns=(atime, st.st_mtime_ns))
        out[str(p)] = atime
    return out


def _unopened(aged: dict[str, int]) -> None:
    moved = [p for p, atime in aged.items() if os.stat(p).st_atime_ns != atime]
    assert not moved, f"kept sources were opened by the grow: {moved}"


def _version_dir(data_dir, name) -> str:
    return os.fspath(tfds.builder(name, data_dir=str(data_dir)).data_path)


def _inodes(folder) -> dict[int, str]:
    return {os.stat(os.path.join(folder, f)).st_ino: f for f in os.listdir(folder) if "-of-" in f}


def _check_grown(grown_dir, clean_dir, name, old_inodes, *, linked_at_least=1):
    grown = _examples(grown_dir, name)
    assert grown == _examples(clean_dir, name)
    now = _inodes(_version_dir(grown_dir, name))
    live = [f for f in os.listdir(_version_dir(grown_dir, name)) if "-g1-" in f]
    assert live, "the grown dataset's shards carry their generation tag"
    linked = [f for ino, f in now.items() if ino in old_inodes and "-g1-" in f]
    assert len(linked) >= linked_at_least, (linked, sorted(now.values()))
    return grown


def test_mri_volumes_grows_changes_and_removes(tmp_path, build_in_process, caplog):
    manual, out, clean = tmp_path / "manual", tmp_path / "out", tmp_path / "clean"
    samples.write_mri_volumes(str(manual), num_subjects=12, shape=(20, 24, 18))
    built = build_in_process(mri.Builder, manual, out, config="small_32", num_shards=4)
    before = sum(s.num_examples for s in built.info.splits.values())
    assert before == 12
    old_dir = os.fspath(built.data_path)
    old_inodes = _inodes(old_dir)
    doc = sources_manifest.read(old_dir)
    assert doc["format"] == 2 and doc["generation"] == 0 and all(doc["shards"][s] for s in doc["shards"] if doc["splits"][s])

    header, *rows = _rows(manual / "labels.csv")
    extra = tmp_path / "extra"
    samples.write_mri_volumes(str(extra), num_subjects=14, shape=(20, 24, 18), seed=1)
    added = [r for r in _rows(extra / "labels.csv")[1:] if r[0].split("/")[-1].startswith(("sub-013", "sub-014"))]
    for r in added:
        shutil.copy(extra / r[0], manual / r[0])
    changed, kept = rows[0], rows[2:]  # rows[1] removed
    changed = [changed[0], "1" if changed[1] == "0" else "0", *changed[2:]]  # a kept scan's label changed
    _write_rows(manual / "labels.csv", [header, *reversed(kept), changed, *added])  # rows reordered too
    aged = _age(manual / r[0] for r in kept)
    caplog.set_level("INFO")
    grown = build_in_process(mri.Builder, manual, out, config="small_32", num_shards=4)
    _unopened(aged)
    assert sum(s.num_examples for s in grown.info.splits.values()) == 12 - 1 + 2
    assert "2 added, 1 changed, 1 removed, 10 kept" in caplog.text, caplog.text[-3000:]
    assert "grown:" in caplog.text and "shards kept (hard links)" in caplog.text

    build_in_process(mri.Builder, manual, clean, config="small_32", num_shards=4)
    _check_grown(out, clean, "mri_volumes/small_32", old_inodes)
    new_doc = sources_manifest.read(old_dir)
    assert new_doc["generation"] == 1
    # vidvol's own reader finds the generation-tagged shards through dataset_info.json.
    labels = vidvol.load_labels("mri_volumes/small_32", "train", data_dir=str(out))
    assert sorted(labels.tolist()) == sorted(vidvol.load_labels("mri_volumes/small_32", "train", data_dir=str(clean)).tolist())
    batches = list(vidvol.load("mri_volumes/small_32", "train", 2, data_dir=str(out), training=False))
    assert sum(len(b[1]) for b in batches) == len(labels)
    # A second grow: the generation before the live one goes, the live one stays for its readers.
    samples.write_mri_volumes(str(extra), num_subjects=15, shape=(20, 24, 18), seed=2)
    last = [r for r in _rows(extra / "labels.csv")[1:] if "sub-015" in r[0]]
    shutil.copy(extra / last[0][0], manual / last[0][0])
    _write_rows(manual / "labels.csv", _rows(manual / "labels.csv") + last)
    build_in_process(mri.Builder, manual, out, config="small_32", num_shards=4)
    names = os.listdir(old_dir)
    assert not [n for n in names if grow_lib.is_shard_file(n, "mri_volumes") and "-g" not in n], names
    assert [n for n in names if "-g1-" in n] and [n for n in names if "-g2-" in n]


def _built_then_one_more_scan(tmp_path, build_in_process):
    """An mri_volumes dataset built from 4 of 5 scans, then its labels CSV given the 5th: (manual_dir, data_dir)."""
    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=5, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])
    build_in_process(mri.Builder, manual, out, config="small_32")
    _write_rows(manual / "labels.csv", [header, *rows])
    return manual, out


def test_no_grow_stops_as_before(tmp_path, build_in_process, monkeypatch):
    manual, out = _built_then_one_more_scan(tmp_path, build_in_process)
    monkeypatch.setenv(grow_lib.GROW_ENV, "0")
    with pytest.raises(sources_manifest.StaleDatasetError) as info:
        build_in_process(mri.Builder, manual, out, config="small_32")
    assert "1 added, 0 changed, 0 removed, 4 kept" in str(info.value) and "growing is off" in str(info.value)


def test_the_builder_that_grew_a_dataset_finds_it_up_to_date_next(tmp_path, build_in_process, caplog):
    """The same builder object built again over the same manual_dir compares afresh: it does not grow again from the
    comparison it made before its grow (that comparison's manifest is the prepared one of before)."""
    from conftest import in_process_config

    manual, out = _built_then_one_more_scan(tmp_path, build_in_process)
    builder = mri.Builder(data_dir=str(out), config="small_32")
    config = in_process_config(manual_dir=str(manual))
    caplog.set_level("INFO")
    builder.download_and_prepare(download_config=config)
    assert "1 added, 0 changed, 0 removed, 4 kept" in caplog.text
    caplog.clear()
    builder.download_and_prepare(download_config=config)
    assert "is up to date with" in caplog.text and "grown:" not in caplog.text, caplog.text[-2000:]
    assert sources_manifest.read(os.fspath(builder.data_path))["generation"] == 1
    assert sum(s.num_examples for s in builder.info.splits.values()) == 5


def test_vidvol_build_plans_a_grown_manual_dir_once_for_the_check(tmp_path, monkeypatch):
    """`python -m vidvol build` (its in-process entry) compares the manual_dir with sources.json, then grows through the
    same builder: the sources are planned once for the comparison and once by the grow's build, not again between."""
    from vidvol.beam_jobs import build

    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=5, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])
    build.build("mri_volumes/small_32", manual_dir=str(manual), data_dir=str(out), num_shards=2)
    _write_rows(manual / "labels.csv", [header, *rows])
    plans, plan = [], mri.Builder._split_generators

    def counted(self, dl_manager):
        plans.append(type(self).__name__)
        return plan(self, dl_manager)

    monkeypatch.setattr(mri.Builder, "_split_generators", counted)
    result = build.build("mri_volumes/small_32", manual_dir=str(manual), data_dir=str(out), num_shards=2)
    assert result.grown and "1 added, 0 changed, 0 removed, 4 kept" in result.grown, result
    assert len(plans) == 2, plans
    assert sum(s["examples"] for s in result.splits.values()) == 5


@pytest.mark.slow
def test_hmdb51_grows_from_its_split_lists(tmp_path, build_in_process, caplog):
    manual, out, clean = tmp_path / "manual", tmp_path / "out", tmp_path / "clean"
    samples.write_hmdb51_layout(str(manual), videos_per_class=3, num_frames=(8, 10), height=48, width=64, splits=(1,))
    built = build_in_process(hmdb.Builder, manual, out)
    old_inodes = _inodes(os.fspath(built.data_path))
    before = sum(s.num_examples for s in built.info.splits.values())
    klass = samples.HMDB51_CLASSES[0]
    videos = manual / "hmdb51_org" / klass
    samples.write_video(str(videos / "new_clip.avi"), 9, height=48, width=64, seed=5)
    split_file = manual / "testTrainMulti_7030_splits" / f"{klass}_test_split1.txt"
    lines = split_file.read_text().splitlines()
    listed = [line.split()[0] for line in lines if line.split()[1] != "0"]
    changed, removed = listed[0], listed[1]
    samples.write_video(str(videos / changed), 10, height=48, width=64, seed=7)  # new bytes
    split_file.write_text("\n".join([line for line in lines if not line.startswith(removed)] + ["new_clip.avi 1 "]) + "\n")
    kept = [p for p in (manual / "hmdb51_org").rglob("*.avi") if p.name not in (changed, removed, "new_clip.avi")]
    aged = _age(kept)
    caplog.set_level("INFO")
    build_in_process(hmdb.Builder, manual, out)
    _unopened(aged)
    assert f"1 added, 1 changed, 1 removed, {before - 2} kept" in caplog.text, caplog.text[-3000:]
    build_in_process(hmdb.Builder, manual, clean)
    grown = _check_grown(out, clean, "hmdb51", old_inodes)
    assert sum(len(v) for v in grown.values()) == before


@pytest.mark.slow
def test_fire_hrr_grows_by_experiment(tmp_path, build_in_process, caplog):
    manual, out, clean, more = tmp_path / "manual", tmp_path / "out", tmp_path / "clean", tmp_path / "more"
    config = fire.FireHrrConfig(name="w8_32x48", max_len=8, height=32, width=48, description="test windows")
    experiments = [(f"exp_{c}", 5) for c in "abcdefgh"]
    samples.write_fire_hrr_frames(str(manual), experiments=experiments, height=32, width=48)
    built = build_in_process(fire.Builder, manual, out, config=config, num_shards=4)
    old_inodes = _inodes(os.fspath(built.data_path))
    samples.write_fire_hrr_frames(str(more), experiments=[*experiments, ("exp_new", 6)], height=32, width=48, seed=3)
    shutil.copytree(more / "frames" / "exp_new", manual / "frames" / "exp_new")
    header, *rows = _rows(manual / "labels.csv")
    new_rows = [r for r in _rows(more / "labels.csv")[1:] if r[0] == "exp_new"]
    rows = [r for r in rows if r[0] != "exp_b"]  # an experiment removed
    rows = [[*r[:2], "0.5", *r[3:]] if r[0] == "exp_c" and r[1].endswith("0002.jpg") else r for r in rows]  # relabelled
    _write_rows(manual / "labels.csv", [header, *rows, *new_rows])
    aged = _age(p for p in (manual / "frames").rglob("*.jpg") if p.parent.name not in ("exp_b", "exp_c", "exp_new"))
    caplog.set_level("INFO")
    build_in_process(fire.Builder, manual, out, config=config, num_shards=4)
    _unopened(aged)
    assert "1 added, 1 changed, 1 removed, 6 kept" in caplog.text, caplog.text[-3000:]
    build_in_process(fire.Builder, manual, clean, config=config, num_shards=4)
    _check_grown(out, clean, "fire_hrr/w8_32x48", old_inodes)


@pytest.mark.slow
def test_video_folder_grows_and_skips_a_new_unreadable_clip(tmp_path, build_in_process, caplog):
    manual, out, clean = tmp_path / "manual", tmp_path / "out", tmp_path / "clean"
    for klass in ("jump", "wave"):
        for i in range(6):
            samples.write_video(str(manual / klass / f"{klass}_{i}.avi"), 8, height=48, width=64, seed=i)
    built = build_in_process(vfb.Builder, manual, out, num_shards=4)
    old_dir = os.fspath(built.data_path)
    old_inodes = _inodes(old_dir)
    old = _examples(out, "video_folder")
    # A reader that opened the dataset before the grow: files opened lazily, one at a time.
    reader = tfds.builder("video_folder", data_dir=str(out)).as_dataset(
        split="train", shuffle_files=False, read_config=tfds.ReadConfig(interleave_cycle_length=1))
    live = iter(tfds.as_numpy(reader))
    first = [_digest(next(live))]
    time.sleep(0.01)
    samples.write_video(str(manual / "wave" / "wave_new.avi"), 8, height=48, width=64, seed=9)
    (manual / "jump" / "jump_bad.avi").write_bytes(b"RIFF not a video at all")
    os.remove(manual / "jump" / "jump_0.avi")
    samples.write_video(str(manual / "wave" / "wave_1.avi"), 9, height=48, width=64, seed=11)
    aged = _age(p for p in manual.rglob("*.avi") if p.name not in ("wave_new.avi", "jump_bad.avi", "wave_1.avi"))
    caplog.set_level("INFO")
    build_in_process(vfb.Builder, manual, out, num_shards=4)
    _unopened(aged)
    assert "2 added, 1 changed, 1 removed, 10 kept" in caplog.text, caplog.text[-3000:]
    assert set(old_inodes.values()) <= set(os.listdir(old_dir))  # the previous dataset's shards stay for its readers
    drained = first + [_digest(ex) for ex in live]
    assert set(drained) == old["train"] and len(drained) == len(old["train"])  # the previous dataset, whole
    report = json.loads((tmp_path / "out" / os.path.relpath(old_dir, out) / "skip_report.json").read_text())
    assert [s["source"] for s in report["skipped"]] == ["jump/jump_bad.avi"], report["skipped"]
    build_in_process(vfb.Builder, manual, clean, num_shards=4)
    _check_grown(out, clean, "video_folder", old_inodes)
    for data_dir in (out, clean):
        proc = subprocess.run([sys.executable, "-m", "vidvol", "verify", "video_folder", "--data_dir", str(data_dir)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_new_class_decodes_everything_again(tmp_path, build_in_process, caplog):
    """A new class folder renumbers the labels: no shard can be kept, and the grow says so."""
    manual, out, clean = tmp_path / "manual", tmp_path / "out", tmp_path / "clean"
    for klass in ("jump", "wave"):
        for i in range(2):
            samples.write_video(str(manual / klass / f"{klass}_{i}.avi"), 8, height=48, width=64, seed=i)
    build_in_process(vfb.Builder, manual, out)
    samples.write_video(str(manual / "clap" / "clap_0.avi"), 8, height=48, width=64, seed=4)
    caplog.set_level("INFO")
    build_in_process(vfb.Builder, manual, out)
    assert "no shard is kept, every source is decoded again" in caplog.text
    build_in_process(vfb.Builder, manual, clean)
    assert _examples(out, "video_folder") == _examples(clean, "video_folder")


@pytest.mark.slow
def test_a_format_1_manifest_cannot_grow(tmp_path, build_in_process):
    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=5, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])
    built = build_in_process(mri.Builder, manual, out, config="small_32")
    path = os.path.join(os.fspath(built.data_path), sources_manifest.MANIFEST_NAME)
    with open(path) as f:
        doc = json.load(f)
    doc = {"format": 1, "inputs": doc["inputs"], "splits": doc["splits"]}
    with open(path, "w") as f:
        json.dump(doc, f)
    _write_rows(manual / "labels.csv", [header, *rows])
    with pytest.raises(sources_manifest.StaleDatasetError) as info:
        build_in_process(mri.Builder, manual, out, config="small_32")
    assert "1 added, 0 changed, 0 removed, 4 kept" in str(info.value)
    assert "format 1" in str(info.value) and "--overwrite" in str(info.value)


@pytest.mark.slow
def test_tfds_build_and_vidvol_build_grow(tmp_path, tfds_build):
    """The user's report: `tfds build mri_volumes` after scans were appended grows the dataset; so does vidvol build."""
    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=8, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:5]])
    tfds_build("mri_volumes/small_32", manual, out)
    _write_rows(manual / "labels.csv", [header, *rows[:7]])
    proc = tfds_build("mri_volumes/small_32", manual, out)
    assert "2 added, 0 changed, 0 removed, 5 kept sources" in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert tfds.builder("mri_volumes/small_32", data_dir=str(out)).info.splits.total_num_examples == 7
    _write_rows(manual / "labels.csv", [header, *rows])
    cmd = [sys.executable, "-m", "vidvol", "build", "mri_volumes/small_32", "--manual_dir", str(manual),
           "--data_dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "1 added, 0 changed, 0 removed, 7 kept sources" in proc.stderr, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["built"] is True
    assert tfds.builder("mri_volumes/small_32", data_dir=str(out)).info.splits.total_num_examples == 8
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "already prepared" in again.stdout + again.stderr, again.stderr[-3000:]


@pytest.mark.slow
def test_a_bucket_dataset_grows_by_server_side_copies(tmp_path):
    """A grow into a bucket (a real S3 server): kept shards are server-side copies, the kept scans never opened."""
    from services import SeaweedS3

    manual, clean = tmp_path / "manual", tmp_path / "clean"
    samples.write_mri_volumes(str(manual), num_subjects=8, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:6]])
    with SeaweedS3(buckets=("vidvol-grow",)) as server:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(tmp_path), **server.env())
        cmd = [sys.executable, "-m", "vidvol", "build", "mri_volumes/small_32", "--manual_dir", str(manual),
               "--num_shards", "3"]
        first = subprocess.run([*cmd, "--data_dir", "s3://vidvol-grow/tfds"], capture_output=True, text=True,
                               timeout=600, env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        _write_rows(manual / "labels.csv", [header, *rows[1:]])  # 2 appended, 1 removed
        aged = _age(manual / r[0] for r in rows[1:6])
        grown = subprocess.run([*cmd, "--data_dir", "s3://vidvol-grow/tfds"], capture_output=True, text=True,
                               timeout=600, env=env)
        assert grown.returncode == 0, grown.stdout + grown.stderr[-3000:]
        _unopened(aged)
        assert "2 added, 0 changed, 1 removed, 5 kept sources" in grown.stderr, grown.stderr[-3000:]
        assert "shards kept" in grown.stderr
        result = json.loads(grown.stdout.strip().splitlines()[-1])
        assert sum(s["examples"] for s in result["splits"].values()) == 7, result
        check = subprocess.run([sys.executable, "-m", "vidvol", "verify", "mri_volumes/small_32", "--data_dir",
                                "s3://vidvol-grow/tfds"], capture_output=True, text=True, timeout=600, env=env)
        assert check.returncode == 0, check.stdout + check.stderr[-3000:]
        clean_run = subprocess.run([*cmd, "--data_dir", str(clean)], capture_output=True, text=True, timeout=600, env=env)
        assert clean_run.returncode == 0, clean_run.stderr[-3000:]
        assert json.loads(clean_run.stdout.strip().splitlines()[-1])["splits"] == result["splits"] or all(
            result["splits"][s]["examples"] == v["examples"]
            for s, v in json.loads(clean_run.stdout.strip().splitlines()[-1])["splits"].items())
        for key in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
            assert server.env()[key] not in grown.stderr + grown.stdout


def test_carried_shards_are_whole_or_their_kept_records():
    shards = [{"file": "a", "sources": [["s1", 2, 10], ["s2", 1, 5]]},
              {"file": "b", "sources": [["s3", 1, 4], ["s4", 0, 0], ["s5", 2, 8]]},
              {"file": "c", "sources": [["s6", 1, 3]]}]
    carried = grow_lib.carried_shards(shards, {"s1", "s2", "s3", "s5"})
    assert [(c.file, c.whole, c.records, c.total) for c in carried] == [("a", True, [0, 1, 2], 3),
                                                                         ("b", True, [0, 1, 2], 3)]
    carried = grow_lib.carried_shards(shards, {"s2", "s5", "s4"})
    assert [(c.file, c.whole, c.records, [s[0] for s in c.sources]) for c in carried] == [
        ("a", False, [2], ["s2"]), ("b", False, [1, 2], ["s4", "s5"])]
    assert grow_lib.template(0) == grow_lib.DEFAULT_TEMPLATE and "-g3-" in grow_lib.template(3)
    assert grow_lib.is_shard_file("mri_volumes-train.tfrecord-g3-00001-of-00009", "mri_volumes")
    assert grow_lib.is_shard_file("mri_volumes-train.array_record-00001-of-00009", "mri_volumes")
    assert not grow_lib.is_shard_file("mri_volumes-train.tfrecord-00001-of-00009.partial", "mri_volumes")


@pytest.mark.slow
def test_array_record_shards_grow_by_copying_records(tmp_path):
    from conftest import in_process_config

    manual, out, clean = tmp_path / "manual", tmp_path / "out", tmp_path / "clean"
    for klass in ("jump", "wave"):
        for i in range(4):
            samples.write_video(str(manual / klass / f"{klass}_{i}.avi"), 8, height=48, width=64, seed=i)

    def build(data_dir):
        builder = vfb.Builder(data_dir=str(data_dir), file_format="array_record")
        builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual), num_shards=1))
        return builder

    build(out)
    os.remove(manual / "jump" / "jump_1.avi")
    samples.write_video(str(manual / "wave" / "wave_9.avi"), 8, height=48, width=64, seed=9)
    line = build(out)._grow_line  # jump_1 shares the validation shard with a kept clip: that shard is rewritten
    assert line.endswith("1 added, 0 changed, 1 removed, 7 kept sources; 1 shards kept (hard links), 1 rewritten from "
                         "their kept records, 1 decoded"), line
    build(clean)
    for data_dir in (out, clean):
        proc = subprocess.run([sys.executable, "-m", "vidvol", "verify", "video_folder", "--data_dir", str(data_dir)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    grown, fresh = (tfds.builder("video_folder", data_dir=str(d)) for d in (out, clean))
    for split in fresh.info.splits:
        a, b = (sorted(_digest(x) for x in bld.as_data_source(split=split)) for bld in (grown, fresh))
        assert a == b and a
    assert any("-g1-" in f for f in os.listdir(grown.data_path))
