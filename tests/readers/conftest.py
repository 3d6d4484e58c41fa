"""Fixtures shared by the read-side tests."""

from __future__ import annotations

import pytest

from in_process_build import build  # tests/in_process_build.py (tests/ is on sys.path via tests/conftest.py)
from vidvol import samples
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb


@pytest.fixture(scope="session")
def hmdb_small(tmp_path_factory):
    """hmdb51/split1_20x64x64 built by the real Beam pipeline from 6 small real AVI files (2 classes, 8-16 frames)."""
    root = tmp_path_factory.mktemp("hmdb_out")
    samples.write_hmdb51_layout(str(root / "manual"), classes=("clap", "run"), videos_per_class=3,
                                num_frames=(8, 16), height=40, width=48, splits=(1,), seed=5)
    return build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data")
