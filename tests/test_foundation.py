"""Foundation: registration, the tfds CLI, no shadowing top-level packages, offline runner defaults."""

import os
import pathlib
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

import vidvol
from vidvol.beam_jobs import runners
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder

REPO = pathlib.Path(vidvol.__file__).resolve().parent
BIN = pathlib.Path(sys.executable).parent


def test_import_registers_our_builders():
    assert tfds.builder_cls("hmdb51") is hmdb51_dataset_builder.Builder
    registered = set(tfds.list_builders(with_community_datasets=False))
    assert "hmdb51" in registered
    for name in ("fire_hrr", "mri_volumes", "video_folder"):
        if (REPO / "datasets" / name / f"{name}_dataset_builder.py").exists():
            assert name in registered


@pytest.mark.slow
def test_tfds_cli_starts():
    proc = subprocess.run([str(BIN / "tfds"), "build", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--manual_dir" in proc.stdout and "--beam_pipeline_options" in proc.stdout


@pytest.mark.slow
def test_no_top_level_datasets_or_builders_package(tmp_path):
    code = (
        "import importlib.util, sys; "
        "print([n for n in ('datasets', 'builders', 'beam_jobs', 'readers', 'core', 'benchmarks') if importlib.util.find_spec(n)]); "
        "import vidvol.builders, vidvol.datasets; print(vidvol.builders.__name__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == "[]"
    site = [p for p in sys.path if p.endswith("site-packages")]
    for folder in site:
        names = set(os.listdir(folder))
        assert not {"datasets", "builders"} & names, folder


def test_default_runner_is_offline_fnapi_multiprocess():
    runner, options = runners.resolve(None, None)
    assert isinstance(runner, FnApiRunner)
    direct = options.view_as(DirectOptions)
    assert direct.direct_running_mode == "multi_processing"
    assert direct.direct_num_workers == runners.default_num_workers()
    runner, options = runners.resolve(None, PipelineOptions(["--runner=DirectRunner", "--direct_num_workers=1"]))
    assert isinstance(runner, FnApiRunner) and options.view_as(DirectOptions).direct_num_workers == 1
    runner, options = runners.resolve(None, PipelineOptions(["--runner=PortableRunner", "--job_endpoint=localhost:1"]))
    assert runner is None and options.get_all_options()["runner"] == "PortableRunner"


@pytest.mark.slow
def test_tfds_build_by_dataset_folder(tmp_path, tfds_build):
    """`tfds build datasets/hmdb51` (no --imports) loads the builder from the folder."""
    out = tmp_path / "data"
    cmd = [
        str(BIN / "tfds"), "build", str(REPO / "datasets" / "hmdb51"), "--config", "split1_20x64x64",
        "--manual_dir", str(REPO / "datasets" / "hmdb51" / "dummy_data"), "--data_dir", str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ds = tfds.load("hmdb51/split1_20x64x64", split="test", data_dir=str(out), download=False)
    assert len(list(ds)) == 3
