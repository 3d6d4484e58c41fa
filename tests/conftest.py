"""Shared test helpers: in-process Beam builds and the real `tfds build` CLI in a subprocess."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))  # test-only helpers such as rar_writer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def in_process_config(**kwargs):
    """DownloadConfig for a fast single-process Beam build (FnApiRunner, in memory)."""
    import tensorflow_datasets as tfds
    from apache_beam.options.pipeline_options import PipelineOptions

    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    return tfds.download.DownloadConfig(beam_options=opts, manual_dir=kwargs.pop("manual_dir", None), **kwargs)


@pytest.fixture
def build_in_process():
    """Builds `builder_cls(config=...)` over manual_dir into data_dir in this process; returns the builder."""

    def build(builder_cls, manual_dir, data_dir, config=None, download_dir=None, **kwargs):
        builder = builder_cls(data_dir=str(data_dir), config=config)
        builder.download_and_prepare(
            download_dir=download_dir, download_config=in_process_config(manual_dir=str(manual_dir), **kwargs)
        )
        return builder

    return build


def run_tfds_build(dataset: str, manual_dir, data_dir, *extra: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs the real `tfds build DATASET --imports vidvol` CLI (multi-process Beam by default)."""
    cmd = [
        sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", dataset,
        "--imports", "vidvol", "--manual_dir", str(manual_dir), "--data_dir", str(data_dir), *extra,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"tfds build failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


@pytest.fixture
def tfds_build():
    """The real CLI build, as a fixture."""
    return run_tfds_build


@pytest.fixture(scope="session")
def distributions(tmp_path_factory):
    """{"sdist": path, "wheel": path} of vidvol, built once per session from a clean copy of the checkout."""
    import installed

    return installed.build_distributions(tmp_path_factory.mktemp("distributions"))


@pytest.fixture(scope="session")
def wheel_env(distributions, tmp_path_factory):
    """A fresh venv with vidvol installed from the wheel (`installed.InstalledEnv`), not seeing the checkout."""
    import installed

    return installed.InstalledEnv.create(tmp_path_factory.mktemp("wheel_env"), distributions["wheel"])


@pytest.fixture(scope="session")
def sdist_env(distributions, tmp_path_factory):
    """The same from the sdist (pip builds it into a wheel first, as `pip install vidvol-X.tar.gz` does)."""
    import installed

    return installed.InstalledEnv.create(tmp_path_factory.mktemp("sdist_env"), distributions["sdist"])
