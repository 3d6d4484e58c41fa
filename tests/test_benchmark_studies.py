"""The kept one-off studies of `benchmarks/studies/`: each still runs, on tiny inputs (see benchmarks/README.md).

`studies/stock_writer.py` (TFDS's stock Beam writer for vidvol's builders, the build-memory comparison in
RESULTS.md): it writes the same examples and skips as the streaming writer, and as a script it is a
drop-in for the `tfds` CLI.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import dataset_builder
from vidvol.builders.writer import skip_report

pytestmark = pytest.mark.slow

from bench_modules import bench_module

REPO = pathlib.Path(__file__).resolve().parents[1]
STUDIES = REPO / "benchmarks" / "studies"
MRI_DUMMY = REPO / "datasets" / "mri_volumes" / "dummy_data"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

stock_writer = bench_module("studies/stock_writer")


def _mri_builder(data_dir, manual_dir=MRI_DUMMY):
    builder = tfds.builder("mri_volumes/small_32", data_dir=str(data_dir))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=str(manual_dir),
        beam_options=PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])))
    return builder


def _keys(builder, split):
    return sorted(ex["path"] for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def test_stock_writer_writes_the_same_examples_and_skips(tmp_path, monkeypatch):
    manual = tmp_path / "manual"
    shutil.copytree(MRI_DUMMY, manual)
    (manual / "volumes" / "broken.nii.gz").write_bytes(b"not a gzip stream")  # one input to skip
    with open(manual / "labels.csv", "a", encoding="utf-8") as f:
        f.write("volumes/broken.nii.gz,0,sub-99\n")
    streaming = _mri_builder(tmp_path / "streaming", manual)
    monkeypatch.setattr(dataset_builder.StreamingBeamBuilder, "_download_and_prepare", stock_writer._download_and_prepare)
    stock = _mri_builder(tmp_path / "stock", manual)
    expected = skip_report.read_skip_report(streaming.data_dir)
    got = skip_report.read_skip_report(stock.data_dir)
    assert [s["source"] for s in expected["skipped"]] == ["volumes/broken.nii.gz"]
    key = lambda s: (s["split"], s["source"], s["reason"])
    assert sorted(got["skipped"], key=key) == sorted(expected["skipped"], key=key)
    assert set(got["splits"]) == set(expected["splits"]) == set(stock.info.splits)
    for split, counts in expected["splits"].items():
        assert got["splits"][split]["examples"] == counts["examples"] == stock.info.splits[split].num_examples
        assert got["splits"][split]["shards"] == stock.info.splits[split].num_shards
        assert _keys(stock, split) == _keys(streaming, split)
    assert not [f for f in os.listdir(stock.data_dir) if f.startswith("skips-")]
    assert "_split_generators" not in vars(stock)


def test_stock_writer_is_a_drop_in_tfds_cli(tmp_path):
    data_dir = tmp_path / "data"
    proc = subprocess.run([sys.executable, str(STUDIES / "stock_writer.py"), "build", "mri_volumes/small_32",
                           "--imports", "vidvol", "--manual_dir", str(MRI_DUMMY), "--data_dir", str(data_dir),
                           "--beam_pipeline_options=direct_num_workers=1,direct_running_mode=in_memory"],
                          capture_output=True, text=True, timeout=900, env=ENV, cwd=str(tmp_path))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "[stock_writer.py]" in proc.stdout + proc.stderr, "the summary must come from the stock writer's path"
    builder = tfds.builder("mri_volumes/small_32", data_dir=str(data_dir))
    report_ = skip_report.read_skip_report(builder.data_dir)
    assert sum(s["examples"] for s in report_["splits"].values()) == sum(
        s.num_examples for s in builder.info.splits.values()) > 0
