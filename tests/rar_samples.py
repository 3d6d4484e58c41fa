"""Test helper: where rarfile's sample RAR archives are (real archives made by RAR software; `make venv` fetches them
from rarfile's source distribution on PyPI, so no test reaches the network)."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLES_ENV = "VIDVOL_RAR_SAMPLES"


def samples_dir() -> pathlib.Path:
    """Folder of rarfile's sample archives (its sdist's test/files/), which `make venv` fetches.

    Where: $VIDVOL_RAR_SAMPLES if set, else `rar-samples/rarfile-<version>/test/files` in the
    running virtual environment (sys.prefix: `make venv` fills $(VENV)/rar-samples wherever VENV
    is), else in the repository's .venv. A missing folder FAILS every test that needs it, never
    skips: these are the only tests on archives compressed by real RAR software, and a skip would
    hide that they did not run. A VIDVOL_RAR_SAMPLES that points nowhere fails too (a wrong setting).
    """
    version = importlib.metadata.version("rarfile")
    if os.environ.get(SAMPLES_ENV):
        candidates = [pathlib.Path(os.environ[SAMPLES_ENV])]
    else:
        candidates = [pathlib.Path(root) / "rar-samples" / f"rarfile-{version}" / "test" / "files"
                      for root in (sys.prefix, REPO / ".venv")]
    for folder in candidates:
        if (folder / "rar3-subdirs.rar").is_file():
            return folder
    pytest.fail(
        f"rarfile {version}'s sample RAR archives are missing (looked in "
        f"{', '.join(map(str, candidates))}): run `make venv`, which downloads rarfile's source "
        f"distribution into $(VENV)/rar-samples, or set {SAMPLES_ENV} to its test/files folder",
        pytrace=False)
