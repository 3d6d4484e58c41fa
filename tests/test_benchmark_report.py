"""`benchmarks/common/report.py` regenerates RESULTS.md from results.json and keeps its hand-kept studies block.

RESULTS.md is rewritten on every full `make bench`; the figures of the one-off study scripts live in
it between `<!-- studies -->` and `<!-- /studies -->`, so regenerating must carry that block over
verbatim. Rendered from the committed `benchmarks/results.json` into a temporary folder (the
committed files are only read).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from bench_modules import bench_module

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"

report = bench_module("common/report")


@pytest.fixture(scope="module")
def results():
    return json.loads((BENCHMARKS / "results.json").read_text(encoding="utf-8"))


def test_committed_results_hold_one_closed_studies_block():
    block = report.studies_block((BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8"))
    assert block is not None and block.startswith(report.STUDIES_BEGIN) and block.endswith(report.STUDIES_END)
    assert "## Studies" in block and "float_ceiling.py" in block


def test_regenerating_keeps_the_studies_block(tmp_path, results):
    """The default source is the committed RESULTS.md: its block comes back verbatim, and the rest is the generator's."""
    committed = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    out = tmp_path / "RESULTS.md"
    report.write_markdown(results, str(out))
    text = out.read_text(encoding="utf-8")
    assert report.studies_block(text) == report.studies_block(committed)
    assert text.count(report.STUDIES_BEGIN) == 1


@pytest.mark.slow  # run.py imports TensorFlow and Beam (its sections' renderers)
def test_report_only_renders_exactly_the_committed_results_md(tmp_path):
    """Outside the block the committed file is exactly what `run.py --report-only` renders from results.json,
    the registered sections' documents (cluster, resume, peers, ...) included."""
    shutil.copy(BENCHMARKS / "results.json", tmp_path / "results.json")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--out", str(tmp_path), "--report-only",
                           "--no-publish"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    committed = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    assert text == committed


def test_the_block_comes_from_the_file_not_from_the_code(tmp_path, results):
    kept = tmp_path / "kept.md"
    kept.write_text(f"# old\n\n{report.STUDIES_BEGIN}\n## Studies\n\nA figure, 2030-01-01.\n{report.STUDIES_END}\n")
    out = tmp_path / "RESULTS.md"
    report.write_markdown(results, str(out), keep_from=[str(tmp_path / "absent.md"), str(kept)])
    text = out.read_text(encoding="utf-8")
    assert text.endswith(f"{report.STUDIES_BEGIN}\n## Studies\n\nA figure, 2030-01-01.\n{report.STUDIES_END}\n")
    assert "# old" not in text and text.startswith("# vidvol benchmark results")
    # Rendering again over its own output (no committed copy) keeps it too: the target file is the fallback.
    report.write_markdown(results, str(out), keep_from=[str(tmp_path / "absent.md"), str(out)])
    assert out.read_text(encoding="utf-8") == text
    # No block anywhere: none is made up.
    report.write_markdown(results, str(out), keep_from=[str(tmp_path / "absent.md")])
    assert report.STUDIES_BEGIN not in out.read_text(encoding="utf-8")


def test_an_open_or_second_block_is_an_error_not_a_loss(tmp_path, results):
    with pytest.raises(ValueError, match="without"):
        report.studies_block(f"x\n{report.STUDIES_BEGIN}\nfigures\n")
    two = f"{report.STUDIES_BEGIN}\na\n{report.STUDIES_END}\n{report.STUDIES_BEGIN}\nb\n{report.STUDIES_END}\n"
    with pytest.raises(ValueError, match="more than one"):
        report.studies_block(two)
    bad = tmp_path / "bad.md"
    bad.write_text(f"{report.STUDIES_BEGIN}\nfigures\n")
    with pytest.raises(ValueError, match="bad.md"):
        report.write_markdown(results, str(tmp_path / "RESULTS.md"), keep_from=[str(bad)])
