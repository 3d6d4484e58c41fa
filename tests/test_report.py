"""`python -m vidvol report`: each dataset's page built from a real build (with a skip) and opened in real chromium.

The browser is Debian's chromium driven by Playwright (no browser download); every request but the page's own
file is blocked and fails the test. Without chromium or Playwright the browser tests skip, saying why.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
import tensorflow_datasets as tfds

import vidvol
from vidvol.builders.writer import build_record, skip_report
from vidvol.cli import report
from vidvol.cli.report_parts import gather, page
from vidvol.datasets.fire_hrr import make_dummy_data as fire_dummy
from vidvol.datasets.hmdb51 import make_dummy_data as hmdb_dummy
from vidvol.datasets.mri_volumes import make_dummy_data as mri_dummy
from vidvol.datasets.video_folder import make_dummy_data as folder_dummy

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _hmdb51_inputs(root: str) -> None:
    shutil.copytree(hmdb_dummy.DUMMY_DIR, root)
    with open(os.path.join(root, "hmdb51_org", "catch", "catch_clip0_u_nm_np1_fr_med_0.avi"), "w") as f:
        f.write("this is not a video\n" * 20)  # a train video of split 1: one skipped input


def _mri_inputs(root: str) -> None:
    shutil.copytree(mri_dummy.DUMMY_DIR, root)
    with open(os.path.join(root, "labels.csv"), "a") as f:
        f.write("volumes/sub-99_missing.nii.gz,1,sub-99\n")  # listed, not there: one skipped input


def _video_folder_inputs(root: str) -> None:
    shutil.copytree(os.path.join(folder_dummy.DUMMY_DIR, "folders"), root)
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    with open(os.path.join(root, classes[0], "unreadable_clip.avi"), "w") as f:
        f.write("not a video either\n" * 20)


DATASETS = {  # NAME/CONFIG -> writes its manual_dir
    "hmdb51/split1_20x64x64": _hmdb51_inputs,
    "fire_hrr/161x135x240": lambda root: shutil.copytree(fire_dummy.DUMMY_DIR, root),  # its skips: masked frames
    "mri_volumes/small_32": _mri_inputs,
    "video_folder/20x64x64": _video_folder_inputs,
}
FILE_FORMATS = {"mri_volumes/small_32": "array_record"}  # one page read from ArrayRecord shards, the others TFRecord


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each dataset built once in this process (FnApiRunner, in memory), its page written beside its shards."""
    from conftest import in_process_config

    root = tmp_path_factory.mktemp("report")
    data_dir = str(root / "data")
    out = {}
    for full, write_inputs in DATASETS.items():
        manual = str(root / "inputs" / full.split("/")[0])
        write_inputs(manual)
        extra = {"file_format": FILE_FORMATS[full]} if full in FILE_FORMATS else {}
        builder = tfds.builder(full, data_dir=data_dir, **extra)
        builder.download_and_prepare(download_config=in_process_config(manual_dir=manual))
        path = report.write_report(full, data_dir=data_dir)
        out[full] = (builder, path)
    return data_dir, out, root


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium under Playwright, or a skip naming what is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.skip(f"playwright is not installed ({e}): pip install playwright (the test extra)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run installs it when missing)")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except Exception as e:  # a chromium that does not start here: say why, never pass
            pytest.skip(f"chromium at {CHROMIUM} could not be launched: {str(e).splitlines()[0]}")
        yield b
        b.close()


@pytest.mark.slow
@pytest.mark.parametrize("full", list(DATASETS))
def test_the_page_opens_offline_in_chromium_with_every_count_image_and_skip(full, built, browser, tmp_path_factory):
    _, pages, root = built
    builder, path = pages[full]
    skipped = skip_report.read_skip_report(builder.data_dir)["skipped"]
    assert skipped, f"{full}: the test build should have skipped something"
    ctx = browser.new_context(viewport={"width": 1200, "height": 900}, java_script_enabled=True)
    pg = ctx.new_page()
    problems, requests = [], []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("requestfailed", lambda r: problems.append(f"request failed: {r.url[:100]}"))
    page_url = "file://" + os.path.abspath(path)

    def route(r):
        if r.request.url == page_url:
            r.continue_()
        else:  # anything else the page asks for is a failure: the page must be self-contained
            requests.append(r.request.url[:100])
            r.abort()

    ctx.route("**/*", route)
    pg.goto(page_url)
    pg.wait_for_load_state("load")
    images = pg.evaluate("[...document.images].map(i => [i.complete && i.naturalWidth > 0, i.alt])")
    assert images and all(ok for ok, _ in images), images
    assert all(alt.strip() for _, alt in images), "every image has alt text"
    text = pg.inner_text("body")
    rows = pg.evaluate("[...document.querySelectorAll('#splits ~ table tbody tr')]"
                       ".map(r => [...r.cells].map(c => c.innerText))")
    for split, info in builder.info.splits.items():
        assert [split, str(info.num_examples), str(info.num_shards)] in [r[:3] for r in rows], (split, rows)
    for s in skipped:
        assert s["source"] in text, s
    headings = pg.evaluate("[...document.querySelectorAll('h2')].map(h => h.innerText)")
    assert {"Card", "Splits", "Previews", "Skipped inputs", "Shard check", "What this page samples"} <= set(headings)
    assert "Verdict: OK" in text
    shot = root / "screenshots" / (full.replace("/", "_") + ".png")
    shot.parent.mkdir(exist_ok=True)
    pg.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    ctx.close()
    assert not problems and not requests, (problems, requests)


@pytest.mark.slow
def test_each_page_is_self_contained_small_and_shows_what_the_build_recorded(built):
    data_dir, pages, _ = built
    for full, (builder, path) in pages.items():
        assert path == os.path.join(builder.data_dir, report.REPORT_NAME)  # beside the shards
        html = open(path, encoding="utf-8").read()
        assert os.path.getsize(path) < 2 << 20, (full, os.path.getsize(path))
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html), full  # nothing to fetch
        assert "<script" not in html  # readable without JavaScript: there is none
        record = build_record.read(builder.data_dir)
        assert record["runner"] == "FnApiRunner" and record["vidvol_version"] == vidvol.__version__, record
        assert record["seconds"] > 0 and record["dataset"] == full
        assert f"{record['started']}" in html and "FnApiRunner" in html and builder.info.citation[:20] in html
        for key, feature in builder.info.features.items():
            assert f"<td>{key}</td><td>{type(feature).__name__}</td>" in html, (full, key)
    fire = open(pages["fire_hrr/161x135x240"][1], encoding="utf-8").read()
    assert "HRR distribution" in fire and "masked frames" in fire and "<polyline" in fire
    mri = open(pages["mri_volumes/small_32"][1], encoding="utf-8").read()
    assert "Intensity histograms" in mri and "mask outlined" in mri and "image/png" in mri and "array_record" in mri
    hmdb = open(pages["hmdb51/split1_20x64x64"][1], encoding="utf-8").read()
    from IPython.display import HTML

    assert HTML(filename=pages["hmdb51/split1_20x64x64"][1]).data == hmdb  # what a notebook shows
    assert hmdb.count('src="data:image/webp') >= 3 and "examples per class and split" in hmdb


@pytest.mark.slow
def test_a_capped_page_reads_a_sample_and_says_so(built, tmp_path):
    data_dir, pages, _ = built
    builder, _ = pages["hmdb51/split1_20x64x64"]
    limits = gather.Limits(read_bytes=1, max_previews=1, verify_bytes=0)
    path = vidvol.report("hmdb51/split1_20x64x64", data_dir=data_dir, out=str(tmp_path / "capped.html"), limits=limits)
    html = open(path, encoding="utf-8").read()
    train = builder.info.splits["train"]
    assert f"1 of {train.num_shards} shards" in html  # one shard per split read: the splits table says so
    assert html.count('src="data:image/webp') == 1
    assert "SIZES MATCH" in html and "python -m vidvol verify" in html


@pytest.mark.slow
def test_a_damaged_shard_shows_broken_and_the_cli_writes_where_asked(built, tmp_path, capsys):
    data_dir, pages, _ = built
    for full in ("hmdb51/split1_20x64x64", "mri_volumes/small_32"):  # a TFRecord and an ArrayRecord shard cut short
        builder, _ = pages[full]
        name = full.split("/")[0]
        copy = tmp_path / name
        shutil.copytree(os.path.dirname(os.path.dirname(builder.data_dir)), copy / name)
        data_path = copy / name / full.split("/")[1] / str(builder.version)
        shard = sorted(p for p in data_path.iterdir() if "-train." in p.name and "-of-" in p.name)[0]
        shard.write_bytes(shard.read_bytes()[:-10])
        out = tmp_path / f"{name}.html"
        assert report.main([full, "--data_dir", str(copy), "--out", str(out), "--max_previews", "1"]) == 0
        assert f"wrote {out}" in capsys.readouterr().out
        html = out.read_text(encoding="utf-8")
        assert '<span class="bad">BROKEN</span>' in html, full
        assert shard.name in html or "the check stopped" in html, full
        assert "could not be read" in html, full  # the split of the damaged shard says so; the page is still written
    assert report.main(["mri_volumes/small_32", "--data_dir", str(tmp_path / "nothing")]) == 1
    assert "no prepared" in capsys.readouterr().err


def test_a_long_skip_report_is_grouped_by_reason_and_names_every_input():
    skips = [{"source": f"videos/clip_{i:03d}.avi", "split": "train", "reason": f"reason {i % 3}"} for i in range(60)]
    skips.append({"source": "frames/exp/0001.jpg", "split": "test", "reason": "NaN hrr", "example": "exp/w000"})
    html = page.skips_html(skips, {"validation": "no input listed"})
    for s in skips:
        assert s["source"] in html
    assert html.count("<h3") == 4 and "reason 0 (20)" in html and "in exp/w000" in html and "no input listed" in html
    short = page.skips_html(skips[:3], {})
    assert short.count("<tr>") == 4 and "<h3" not in short  # a table: header and one row each


def test_shards_are_sampled_evenly_within_the_budget():
    assert gather.choose_shards([10] * 8, 1000) == list(range(8))
    assert gather.choose_shards([10] * 8, 40) == [0, 2, 5, 7]
    assert gather.choose_shards([10] * 8, 1) == [0]
    assert gather.choose_shards([], 1) == []
    assert report._ranges([3, 4, 5, 9, 11, 12]) == "3-5, 9, 11-12"
