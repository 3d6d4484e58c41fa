"""Fixtures shared by the read-side tests."""

from __future__ import annotations

import csv
import os

import nibabel as nib
import numpy as np
import pytest

from in_process_build import build  # tests/in_process_build.py (tests/ is on sys.path via tests/conftest.py)
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.hmdb51 import make_dummy_data as hmdb_dummy
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples


@pytest.fixture(scope="session")
def hmdb_small(tmp_path_factory):
    """hmdb51/split1_20x64x64 built by the real Beam pipeline from 6 small real AVI files (2 classes, 8-16 frames)."""
    root = tmp_path_factory.mktemp("hmdb_out")
    samples.write_hmdb51_layout(str(root / "manual"), classes=("clap", "run"), videos_per_class=3,
                                num_frames=(8, 16), height=40, width=48, splits=(1,), seed=5)
    return build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data")


@pytest.fixture(scope="session")
def hmdb_dummy_builds(tmp_path_factory):
    """hmdb51's default config (20 frames of 64x64) built from its dummy data as TFRecord and as ArrayRecord:
    {'tfrecord': data_dir, 'array_record': data_dir} (the random-access readers' and augmentation tests')."""
    from conftest import in_process_config  # tests/conftest.py

    dirs = {}
    for fmt in ("tfrecord", "array_record"):
        dirs[fmt] = str(tmp_path_factory.mktemp(f"hmdb_{fmt}"))
        builder = hmdb.Builder(data_dir=dirs[fmt], file_format=fmt)
        builder.download_and_prepare(download_config=in_process_config(manual_dir=hmdb_dummy.DUMMY_DIR))
    return dirs


@pytest.fixture(scope="session")
def mri_small(tmp_path_factory):
    """mri_volumes/small_32 over 4 sample subjects (3 train, 1 test)."""
    root = tmp_path_factory.mktemp("mri")
    samples.write_mri_volumes(str(root / "manual"), num_subjects=4, with_split=True)
    return build(mri.Builder, "small_32", root / "manual", root / "data")


def write_int16_scans(root, *, num: int = 6, shape=(28, 40, 24), seed: int = 0) -> None:
    """`num` int16 NIfTI scans (slope 1, values 1..2000: stored as int16, so read directly) and labels.csv (the last
    third of the subjects in test)."""
    gen = np.random.default_rng(seed)
    rows = []
    for i in range(num):
        rel = f"volumes/sub-{i:02d}.nii.gz"
        os.makedirs(os.path.join(root, "volumes"), exist_ok=True)
        image = nib.Nifti1Image(gen.integers(1, 2000, shape).astype(np.int16), np.diag([1.0, 1.0, 1.2, 1.0]))
        image.set_data_dtype(np.int16)
        nib.save(image, os.path.join(root, rel))
        rows.append([rel, str(i % 2), f"sub-{i:02d}", "test" if i >= num - num // 3 else "train"])
    with open(os.path.join(root, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["path", "label", "subject", "split"]] + rows)


@pytest.fixture(scope="session")
def mri_padded(tmp_path_factory):
    """mri_volumes/small_32 from int16 (28, 40, 24) scans (padded along D and W, cropped along H), built as TFRecord
    and as ArrayRecord: {"tfrecord": builder, "array_record": builder}."""
    from conftest import in_process_config  # tests/conftest.py

    root = tmp_path_factory.mktemp("mri_padded")
    write_int16_scans(str(root / "manual"))
    out = {"tfrecord": build(mri.Builder, "small_32", root / "manual", root / "tfrecord")}
    builder = mri.Builder(data_dir=str(root / "array_record"), config="small_32", file_format="array_record")
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(root / "manual")))
    out["array_record"] = builder
    return out
