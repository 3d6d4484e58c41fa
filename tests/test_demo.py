"""`make demo` (`python -m vidvol demo`): every registered dataset built, read back and previewed; a failure exits 1."""

from __future__ import annotations

import os
import subprocess
import sys

import cv2
import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.cli import demo


def test_the_demo_has_every_registered_dataset_and_its_configs_exist():
    assert sorted(ds.name for ds in demo.DATASETS) == demo.registered_datasets()
    assert len(demo.registered_datasets()) == 4
    for ds in demo.DATASETS:
        assert tfds.builder_cls(ds.name).builder_config_cls is not None
        builder = tfds.builder(f"{ds.name}/{ds.config}", data_dir="/nonexistent")  # a config TFDS can resolve
        assert builder.builder_config.name == ds.config


def _broken_mri_inputs(root: str) -> None:
    """A labels.csv whose every volume is missing: each input a skip, so the build has nothing to prepare."""
    with open(os.path.join(root, "labels.csv"), "w") as f:
        f.write("path,label\n" + "".join(f"missing_{i}.nii.gz,{i % 2}\n" for i in range(3)))


def test_a_dataset_that_cannot_be_built_fails_the_demo_naming_it(tmp_path, monkeypatch, capsys):
    good = next(ds for ds in demo.DATASETS if ds.name == "mri_volumes")
    broken = demo.DemoDataset("mri_volumes", "small_32", _broken_mri_inputs)
    results, failures = demo.run(str(tmp_path / "one"), datasets=[broken])
    assert results == {} and list(failures) == ["mri_volumes/small_32"]
    assert "no split has an example" in failures["mri_volumes/small_32"]
    monkeypatch.setattr(demo, "DATASETS", (broken, good))  # same config: the broken one must go first
    assert demo.main(["--out", str(tmp_path / "two")]) == 1
    err = capsys.readouterr().err
    assert "demo FAILED for mri_volumes/small_32" in err and "missing_0.nii.gz" in err
    with pytest.raises(ValueError, match="no demo dataset named"):
        demo.run(str(tmp_path / "three"), names=["hmdb"])


@pytest.mark.slow
def test_make_demo_builds_reads_back_and_previews_every_dataset(tmp_path):
    out = tmp_path / "demo_out"
    proc = subprocess.run([sys.executable, "-m", "vidvol", "demo", "--out", str(out)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "demo done: 4 datasets built and read back" in proc.stdout
    for ds in demo.DATASETS:
        builder = tfds.builder(f"{ds.name}/{ds.config}", data_dir=str(out / "data"))
        assert builder.is_prepared()
        splits = builder.info.splits
        assert sum(s.num_examples for s in splits.values()) > 0
        for split, info in splits.items():
            assert f"{info.num_examples} examples read" in proc.stdout, (ds.name, split)
        page = os.path.join(builder.data_dir, "report.html")  # make demo writes each dataset's page and says where
        assert os.path.getsize(page) > 10_000 and os.path.abspath(page) in proc.stdout, page
        png = out / f"preview_{ds.name}.png"
        image = cv2.imread(str(png))
        assert image is not None and image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 10, png
