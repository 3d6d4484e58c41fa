"""Never silently stale: with growing off (`VIDVOL_GROW=0`), a rebuild over a manual_dir that gained, changed or
lost sources says so and stops (tests/datasets/test_grow.py grows instead, the default).

Each dataset is built once (in process, real Beam, real files); the same build again reuses it; after the
manual_dir changes, the build stops with a StaleDatasetError counting the sources added, changed and removed, and
the prepared dataset is left as it was. Reordering a labels CSV's rows changes no source.
"""

from __future__ import annotations

import csv
import os
import shutil
import time

import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders.writer import sources_manifest
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb
from vidvol.testing import samples


@pytest.fixture(autouse=True)
def _growing_off(monkeypatch):
    """Growing off, here and in the CLIs these tests start: the build stops as it did before growing existed."""
    monkeypatch.setenv("VIDVOL_GROW", "0")


def _stale(build, cls, manual, out, config=None) -> str:
    with pytest.raises(sources_manifest.StaleDatasetError) as info:
        build(cls, manual, out, config=config)
    return str(info.value)


def _examples(builder) -> int:
    return sum(builder.info.splits[s].num_examples for s in builder.info.splits)


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _write_rows(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def _touch_later(path):
    """Moves a file's mtime a minute on (a file rewritten with new bytes of the same size)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 60 * 10**9))


def test_mri_volumes_grown_csv_is_never_reused_silently(tmp_path, build_in_process):
    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=4, shape=(20, 24, 18))
    built = build_in_process(mri.Builder, manual, out, config="small_32")
    assert _examples(built) == 4
    doc = sources_manifest.read(os.fspath(built.data_path))
    assert doc is not None and sum(len(v) for v in doc["splits"].values()) == 4
    assert "<manual_dir>" not in str(doc) and str(manual) not in str(doc)  # ids and digests only

    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *reversed(rows)])  # reordered rows: the same sources
    again = build_in_process(mri.Builder, manual, out, config="small_32")  # reused, as before
    assert _examples(again) == 4

    extra = tmp_path / "extra"
    samples.write_mri_volumes(str(extra), num_subjects=6, shape=(20, 24, 18), seed=1)
    for name in ("sub-005_scan-0.nii.gz", "sub-006_scan-0.nii.gz"):
        shutil.copy(extra / "volumes" / name, manual / "volumes" / name)
    grown = [header, *rows, ["volumes/sub-005_scan-0.nii.gz", "0", "sub-005"], ["volumes/sub-006_scan-0.nii.gz", "1", "sub-006"]]
    grown[1][1] = "1" if grown[1][1] == "0" else "0"  # a kept source's label changed
    del grown[2]  # a source removed
    _write_rows(manual / "labels.csv", grown)
    message = _stale(build_in_process, mri.Builder, manual, out, config="small_32")
    assert "2 added, 1 changed, 1 removed, 2 kept sources" in message, message
    assert "sub-005" in message and "--overwrite" in message and "out of date" in message
    # The prepared dataset is untouched and still reads.
    kept = tfds.builder("mri_volumes/small_32", data_dir=str(out))
    assert _examples(kept) == 4 and len(list(kept.as_dataset(split="train"))) == kept.info.splits["train"].num_examples


@pytest.mark.slow
def test_hmdb51_new_changed_and_removed_clips_are_counted(tmp_path, build_in_process):
    manual, out = tmp_path / "manual", tmp_path / "out"
    expected = samples.write_hmdb51_layout(str(manual), videos_per_class=2, num_frames=(8, 10), height=48, width=64,
                                           splits=(1,))
    built = build_in_process(hmdb.Builder, manual, out)
    before = _examples(built)
    assert before == sum(len(v) for v in expected[1].values())
    assert _examples(build_in_process(hmdb.Builder, manual, out)) == before  # nothing changed: reused

    klass = samples.HMDB51_CLASSES[0]
    videos = manual / "hmdb51_org" / klass
    samples.write_video(str(videos / "new_clip.avi"), 9, height=48, width=64)
    split_file = manual / "testTrainMulti_7030_splits" / f"{klass}_test_split1.txt"
    with open(split_file, "a", encoding="utf-8") as f:
        f.write("new_clip.avi 1 \n")
    listed = [line.split()[0] for line in split_file.read_text().splitlines() if line.split()[1] != "0"]
    _touch_later(videos / listed[0])  # its bytes changed (mtime)
    message = _stale(build_in_process, hmdb.Builder, manual, out)
    assert f"1 added, 1 changed, 0 removed, {before - 1} kept sources" in message, message
    assert "new_clip.avi" in message


@pytest.mark.slow
def test_fire_hrr_new_experiment_is_counted(tmp_path, build_in_process):
    manual, out = tmp_path / "manual", tmp_path / "out"
    config = fire.FireHrrConfig(name="w8_32x48", max_len=8, height=32, width=48, description="test windows")
    samples.write_fire_hrr_frames(str(manual), experiments=[("exp_a", 6), ("exp_b", 5), ("exp_c", 4)], height=32, width=48)
    built = build_in_process(fire.Builder, manual, out, config=config)
    assert _examples(built) == 3
    more = tmp_path / "more"
    samples.write_fire_hrr_frames(str(more), experiments=[("exp_a", 6), ("exp_b", 5), ("exp_c", 4), ("exp_d", 5)],
                                  height=32, width=48, seed=3)
    shutil.copytree(more / "frames" / "exp_d", manual / "frames" / "exp_d")
    header, *rows = _rows(manual / "labels.csv")
    new_rows = [r for r in _rows(more / "labels.csv")[1:] if r[0] == "exp_d"]
    _write_rows(manual / "labels.csv", [header, *[r for r in rows if r[0] != "exp_b"], *new_rows])
    message = _stale(build_in_process, fire.Builder, manual, out, config=config)
    assert "1 added, 0 changed, 1 removed, 2 kept sources" in message, message
    assert "exp_d" in message and "exp_b" in message


@pytest.mark.slow
def test_video_folder_class_folders_grow(tmp_path, build_in_process):
    manual, out = tmp_path / "manual", tmp_path / "out"
    for klass, n in (("jump", 3), ("wave", 3)):
        for i in range(n):
            samples.write_video(str(manual / klass / f"{klass}_{i}.avi"), 8, height=48, width=64, seed=i)
    built = build_in_process(vfb.Builder, manual, out)
    before = _examples(built)
    assert before == 6
    time.sleep(0.01)
    samples.write_video(str(manual / "wave" / "wave_new.avi"), 8, height=48, width=64, seed=9)
    os.remove(manual / "jump" / "jump_0.avi")
    message = _stale(build_in_process, vfb.Builder, manual, out)
    assert "1 added, 0 changed, 1 removed, 5 kept sources" in message, message


def test_the_manifest_compares_per_split_and_counts_moves_as_changes():
    old = {"format": 1, "splits": {"train": {"a": "1", "b": "2", "c": "3"}, "test": {"d": "4"}}}
    new = {"format": 1, "splits": {"train": {"a": "1", "b": "9", "e": "5"}, "test": {"d": "4", "c": "3"}}}
    changes = sources_manifest.compare(old, new)
    assert changes.added == {"train": ["e"]} and changes.removed == {}
    assert changes.changed == {"train": ["b"], "test": ["c"]}
    assert changes.counts() == "1 added, 2 changed, 0 removed, 2 kept"
    assert not sources_manifest.compare(old, old).any


@pytest.mark.slow
def test_tfds_build_and_vidvol_build_stop_on_a_grown_csv(tmp_path, tfds_build):
    """The user's report: `tfds build mri_volumes` again after 4 scans were appended must not say it reused 16."""
    import subprocess
    import sys

    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=6, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])  # 4 of the 6 scans listed
    tfds_build("mri_volumes/small_32", manual, out)
    _write_rows(manual / "labels.csv", [header, *rows])  # 2 appended
    with pytest.raises(AssertionError) as info:
        tfds_build("mri_volumes/small_32", manual, out)
    assert "2 added, 0 changed, 0 removed, 4 kept sources" in str(info.value)
    proc = subprocess.run([sys.executable, "-m", "vidvol", "build", "mri_volumes/small_32", "--manual_dir", str(manual),
                           "--data_dir", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "2 added, 0 changed, 0 removed, 4 kept sources" in proc.stderr, proc.stderr[-3000:]
    assert tfds.builder("mri_volumes/small_32", data_dir=str(out)).info.splits.total_num_examples == 4


@pytest.mark.slow
def test_a_bucket_dataset_is_never_reused_stale(tmp_path):
    """The same check on a dataset published in a bucket (a real S3 server): its sources.json is read there."""
    import subprocess
    import sys

    from services import SeaweedS3

    manual = tmp_path / "manual"
    samples.write_mri_volumes(str(manual), num_subjects=5, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])
    with SeaweedS3(buckets=("vidvol-stale",)) as server:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(tmp_path), **server.env())
        cmd = [sys.executable, "-m", "vidvol", "build", "mri_volumes/small_32", "--manual_dir", str(manual),
               "--data_dir", "s3://vidvol-stale/tfds"]
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert again.returncode == 0 and "already prepared" in again.stdout + again.stderr, again.stderr[-3000:]
        _write_rows(manual / "labels.csv", [header, *rows])
        grown = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert grown.returncode != 0, grown.stdout + grown.stderr[-3000:]
        assert "1 added, 0 changed, 0 removed, 4 kept sources" in grown.stderr, grown.stderr[-3000:]
        for key in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
            assert server.env()[key] not in grown.stderr + grown.stdout
