"""The same command grows a dataset: a build over a manual_dir that gained, changed or lost sources decodes only those.

Each dataset is built once (in process, real Beam, real files), its manual_dir changed, and the same build run
again: the grown dataset holds, split for split, the same examples as a clean build of the changed collection;
its unchanged shards are hard links to the previous ones; the kept sources were never opened (their atime, set
days back, did not move); the summary counts kept, added, changed and removed sources.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil

import numpy as np
import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders.writer import grow as grow_lib
from vidvol.builders.writer import sources_manifest
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
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
    # A second grow: the generation before the live one goes, the live one stays for its readers.
    samples.write_mri_volumes(str(extra), num_subjects=15, shape=(20, 24, 18), seed=2)
    last = [r for r in _rows(extra / "labels.csv")[1:] if "sub-015" in r[0]]
    shutil.copy(extra / last[0][0], manual / last[0][0])
    _write_rows(manual / "labels.csv", _rows(manual / "labels.csv") + last)
    build_in_process(mri.Builder, manual, out, config="small_32", num_shards=4)
    names = os.listdir(old_dir)
    assert not [n for n in names if grow_lib.is_shard_file(n, "mri_volumes") and "-g" not in n], names
    assert [n for n in names if "-g1-" in n] and [n for n in names if "-g2-" in n]


def test_no_grow_stops_as_before(tmp_path, build_in_process, monkeypatch):
    manual, out = tmp_path / "manual", tmp_path / "out"
    samples.write_mri_volumes(str(manual), num_subjects=5, shape=(16, 16, 16))
    header, *rows = _rows(manual / "labels.csv")
    _write_rows(manual / "labels.csv", [header, *rows[:4]])
    build_in_process(mri.Builder, manual, out, config="small_32")
    _write_rows(manual / "labels.csv", [header, *rows])
    monkeypatch.setenv(grow_lib.GROW_ENV, "0")
    with pytest.raises(sources_manifest.StaleDatasetError) as info:
        build_in_process(mri.Builder, manual, out, config="small_32")
    assert "1 added, 0 changed, 0 removed, 4 kept" in str(info.value) and "growing is off" in str(info.value)
