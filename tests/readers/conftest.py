"""Fixtures shared by the read-side tests."""

from __future__ import annotations

import pytest

from in_process_build import build  # tests/in_process_build.py (tests/ is on sys.path via tests/conftest.py)
from vidvol import samples
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri


@pytest.fixture(scope="session")
def hmdb_small(tmp_path_factory):
    """hmdb51/split1_20x64x64 built by the real Beam pipeline from 6 small real AVI files (2 classes, 8-16 frames)."""
    root = tmp_path_factory.mktemp("hmdb_out")
    samples.write_hmdb51_layout(str(root / "manual"), classes=("clap", "run"), videos_per_class=3,
                                num_frames=(8, 16), height=40, width=48, splits=(1,), seed=5)
    return build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data")


@pytest.fixture(scope="session")
def mri_small(tmp_path_factory):
    """mri_volumes/small_32 over 4 sample subjects (3 train, 1 test)."""
    root = tmp_path_factory.mktemp("mri")
    samples.write_mri_volumes(str(root / "manual"), num_subjects=4, with_split=True)
    return build(mri.Builder, "small_32", root / "manual", root / "data")
