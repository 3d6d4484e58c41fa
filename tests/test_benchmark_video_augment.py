"""The video augmentation section (`benchmarks/sections/video_augment.py`): its costs, targets and Markdown from a stored document.

The section measures `vidvol.load` with and without `VideoAugment` in alternating rounds; here a
stored document (as `measure` writes it) is re-derived by `video_augment.py --resummarize`: each
cost pairs a pipeline's run with the unaugmented run of the same round. A real measurement runs in
`make bench` (and `make bench-quick`, through `tests/test_benchmark_quick.py`).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _run(eps: float, cpu: float) -> dict:
    return {"examples_per_s": eps, "cpu_examples_per_s": cpu, "cores_used": 1.9, "other_cores_busy": 0.05,
            "examples": int(eps * 2)}


def _summary(runs: list[dict]) -> dict:
    eps = sorted(r["examples_per_s"] for r in runs)
    cpu = sorted(r["cpu_examples_per_s"] for r in runs)
    return {"examples_per_s": eps[len(eps) // 2], "examples_per_s_runs": [r["examples_per_s"] for r in runs],
            "cpu_examples_per_s": cpu[len(cpu) // 2], "cores_used": 1.9, "other_cores_busy": 0.05}


def _resummarized(out_dir: pathlib.Path, runs: dict, **fields) -> dict:
    """A stored section document of `runs` (as `measure` writes it), re-derived by `video_augment.py --resummarize`."""
    doc = {"mode": "full", "dataset": "hmdb51/split1_20x64x64", "split": "train", "examples": 80, "batch_size": 32,
           "crop_size": 64, "small_crop": 56, "cores": 2, "runs": runs,
           "results": {p: _summary(r) for p, r in runs.items()}, "duration_s": 60.0,
           "augments": {p: f"VideoAugment({p})" for p in runs}, **fields}
    (out_dir / "video_augment.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sections" / "video_augment.py"), "--resummarize", "--out", str(out_dir)],
                          capture_output=True, text=True, timeout=300, cwd=str(out_dir),
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out_dir / "video_augment.json").read_text())


def test_costs_pair_each_round_and_targets_hold_training_augmentation_to_ten_percent(tmp_path):
    runs = {"off": [_run(1000, 1100), _run(800, 1000), _run(1200, 1200)],  # the machine drifts between rounds
            "random_resized_crop": [_run(950, 1000), _run(700, 900), _run(1100, 1080)],
            "random_crop": [_run(1020, 1150), _run(820, 1040), _run(1230, 1260)],
            "random_resized_crop_stored_size": [_run(850, 900), _run(650, 800), _run(1000, 1000)],
            "eval_multi_crop": [_run(600, 700), _run(500, 600), _run(700, 800)]}
    out = _resummarized(tmp_path, runs, rounds=3)
    r = out["results"]
    assert r["random_resized_crop"]["cost"] == pytest.approx(1 - 1100 / 1200, abs=1e-4)  # median of 5, 12.5, 8.3 %
    assert r["random_crop"]["cost"] == pytest.approx(-0.025, abs=1e-4)  # faster: the float pass converts less
    assert r["random_resized_crop"]["cost_cpu"] == pytest.approx(0.1, abs=1e-4)  # median of 9.1, 10, 10 %
    assert r["off"]["cost"] == 0
    names = [t["name"] for t in out["targets"]]
    assert names == [
        "hmdb51 (batch 32): vidvol.load with VideoAugment(56): random resized crop + flip costs vs without",
        "hmdb51 (batch 32): vidvol.load with VideoAugment(56, training_crop='random_short_side_scale'): random crop "
        "+ flip costs vs without"]
    assert all(t["target"] == 0.1 and t["op"] == "<=" and t["pass"] for t in out["targets"])
    text = (tmp_path / "VIDEO_AUGMENT.md").read_text()
    assert r["random_resized_crop_stored_size"]["cost"] == pytest.approx(1 - 1000 / 1200, abs=1e-4)  # no target: the peers' row
    assert "## Video augmentation" in text and "3 crops per clip" in text and all(n in text for n in names)
    assert "VideoAugment(64): random resized crop to the stored size + flip | 850 |" in text


def test_the_augmentation_step_table_shows_what_each_step_adds_to_the_float_conversion(tmp_path):
    runs = {p: [_run(1000, 1000)] for p in ("off", "random_resized_crop", "random_crop",
                                            "random_resized_crop_stored_size", "eval_multi_crop")}
    step = {"off": {"crop_ms": 0.0, "crop_ms_runs": [], "float_ms": 3.0, "float_ms_runs": [3.0, 3.2, 2.9]},
            "random_resized_crop": {"crop_ms": 5.5, "crop_ms_runs": [5.5] * 3, "float_ms": 2.25, "float_ms_runs": [2.25] * 3},
            "random_crop": {"crop_ms": 0.75, "crop_ms_runs": [0.75] * 3, "float_ms": 2.25, "float_ms_runs": [2.25] * 3},
            "random_resized_crop_stored_size": {"crop_ms": 6.0, "crop_ms_runs": [6.0] * 3, "float_ms": 3.0,
                                                "float_ms_runs": [3.0] * 3},
            "eval_multi_crop": {"crop_ms": 2.0, "crop_ms_runs": [2.0] * 3, "float_ms": 7.0, "float_ms_runs": [7.0] * 3}}
    _resummarized(tmp_path, runs, rounds=1, step=step)
    text = (tmp_path / "VIDEO_AUGMENT.md").read_text()
    assert "The augmentation step alone: CPU ms per batch of 32 clips" in text and "medians of 3 alternating rounds" in text
    assert "| VideoAugment(56): random resized crop + flip | 5.50 | 2.25 | +4.75 |" in text  # 5.5 + 2.25 - 3.0
    assert "| VideoAugment(56, training_crop='random_short_side_scale'): random crop + flip | 0.75 | 2.25 | +0.00 |" in text
    assert "| VideoAugment(56, multi_crop=True), training=False: 3 crops per clip | 2.00 | 7.00 | +6.00 |" in text
    assert "| vidvol.load (no augmentation) |  | 3.00 |  |" in text
