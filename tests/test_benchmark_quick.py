"""`python benchmarks/run.py --quick` smoke run, the benchmark's own parts on real files, and its packaging.

Never asserts a speed: only that every section is measured, counted right and finite. The
benchmarks are a repository tool run as scripts (`make bench`): never installed with vidvol, never
writing into a folder other than --out except a source checkout's own benchmarks/ on a full run.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import cv2
import nibabel as nib
import numpy as np
import pytest

from vidvol.testing import samples

pytestmark = pytest.mark.slow

from bench_modules import bench_module

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
READS = ("hmdb51", "hmdb51_uint8", "hmdb51_raw", "fire_hrr", "mri_volumes_32", "mri_volumes_32_float32", "mri_volumes_32_int16",
         "mri_volumes_32_augment", "mri_volumes_40x40x24")
DTYPE_ROWS = {"hmdb51_uint8": "hmdb51", "mri_volumes_32_float32": "mri_volumes_32",  # output_dtype row -> the row
              "mri_volumes_32_int16": "mri_volumes_32", "mri_volumes_32_augment": "mri_volumes_32"}  # whose baseline run it is compared with
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")




baselines = bench_module("common/baselines")
inputs = bench_module("common/inputs")
report = bench_module("common/report")
section = bench_module("common/section")


def _snapshot(folder: pathlib.Path) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file under folder, bytecode caches aside."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One real quick run (`make bench-quick`'s command, in a subprocess) into a temporary folder."""
    out = tmp_path_factory.mktemp("bench_out")
    before = _snapshot(BENCHMARKS)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, env=ENV, cwd=str(out))
    assert proc.returncode == 0, f"quick benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert _snapshot(BENCHMARKS) == before, "--quick wrote into the repository's benchmarks/ folder"
    return out, json.loads((out / "results.json").read_text()), proc.stdout


@pytest.mark.long  # the whole quick benchmark run (6 min here): `make test-long`, or `make bench-quick` itself
def test_quick_run_writes_every_section(quick):
    out, results, stdout = quick
    assert results["mode"] == "quick"
    assert report.finite_numbers(results) == []
    assert set(results["read"]) == set(READS)
    ra = results["random_access"]  # ArrayRecord build, by-index reads and Grain vs vidvol.load on the same data
    assert set(ra["results"]) == {"sequential", "single_index", "batch_reads", "grain_threads", "grain_processes"}
    assert all(r["examples_per_s"] > 0 and r["of_sequential"] > 0 for r in ra["results"].values())
    assert len(ra["targets"]) == 2 and "Random access (ArrayRecord)" in (out / "RESULTS.md").read_text()
    rs = results["resume"]  # checkpoint size and restore cost on the run's builds, shuffle quality old vs new
    assert {r["label"] for r in rs["restore"]} == {"hmdb51", "fire_hrr", "mri_volumes"}
    assert all(0 < p["checkpoint_bytes"] < 64 << 10 for r in rs["restore"] for p in r["positions"].values())
    assert all(q["new"]["shard_tv"] > 0 for q in rs["quality"]) and "Stopping and resuming" in (out / "RESULTS.md").read_text()
    vm = results["volume_memory"]  # MRI build peak RSS against source size, a header bomb beside every source
    assert [r["size_mib"] for r in vm["rows"]] == [1, 4] and not vm["isolated"]
    assert all(r["exit_code"] == 0 and r["examples"] == 1 and len(r["skipped"]) == 1 for r in vm["rows"])
    assert all("16000000000352" in r["skipped"][0]["reason"] and "1376" in r["skipped"][0]["reason"] for r in vm["rows"])
    assert len(vm["targets"]) == 2 and "MRI build memory against source size" in (out / "RESULTS.md").read_text()
    va = results["video_augment"]  # vidvol.load with VideoAugment on vs off, paired rounds
    assert set(va["results"]) == {"off", "random_resized_crop", "random_crop", "random_resized_crop_stored_size",
                                  "eval_multi_crop"}
    assert all(r["examples_per_s"] > 0 for r in va["results"].values()) and va["results"]["off"]["cost"] == 0
    assert len(va["targets"]) == 2 and "Video augmentation" in (out / "RESULTS.md").read_text()
    assert results["peers"]["vidvol"]["augmented"]["batch_size"] == va["batch_size"]  # the peers' augmented row
    for name, r in results["read"].items():
        for key in ("loader", "baseline") if name not in DTYPE_ROWS else ("loader",):
            assert r[key]["examples_per_s"] > 0 and len(r[key]["examples_per_s_runs"]) == results["settings"]["runs"]
            assert r[key]["peak_rss_mib"] >= r[key]["rss_before_mib"] > 0
        baseline = results["read"][DTYPE_ROWS.get(name, name)]["baseline"]  # output_dtype rows: their float32 row's
        assert math.isclose(r["x_baseline"], r["loader"]["examples_per_s"] / baseline["examples_per_s"])
    assert results["read"]["hmdb51_uint8"]["loader"]["output_dtype"] == "uint8"
    assert results["read"]["mri_volumes_32_int16"]["loader"]["mask_dtype"] is None
    assert results["read"]["mri_volumes_32_augment"]["loader"]["augment"]["patch_size"] == [24, 24, 24]  # 3/4 side
    raw = results["read"]["hmdb51_raw"]  # the stored-raw twin: JPEG limit of the same clips, same baseline run
    assert raw["config"] == "split1_20x64x64_raw" and raw["baseline"] == results["read"]["hmdb51"]["baseline"]
    disk = raw["disk"]["configs"]
    assert disk["split1_20x64x64_raw"]["bytes_per_clip"] >= 20 * 64 * 64 * 3 > disk["split1_20x64x64"]["bytes_per_clip"]
    assert disk["split1_20x64x64_raw"]["examples"] == results["builds_for_reads"]["hmdb51_raw"]["examples"]
    assert "Disk cost of the configs" in (out / "RESULTS.md").read_text()
    for name in ("hmdb51", "hmdb51_uint8", "hmdb51_raw", "fire_hrr", "mri_volumes_32", "mri_volumes_32_float32", "mri_volumes_32_int16",
                 "mri_volumes_32_augment"):
        limit = results["read"][name]["limit"]
        assert limit["frames_per_s_one_core"] > 0 and limit["cores"] == len(os.sched_getaffinity(0))
        assert 0 < results["read"][name]["of_limit"]
    assert results["read"]["mri_volumes_32"]["limit"]["kind"].startswith("bytes")
    assert results["read"]["mri_volumes_32"]["limit"]["mean_stored_frame_bytes"] == 2 * 32**3  # int16 32^3
    for w in (1, 2):
        assert results["build_scaling"][f"workers_{w}"]["examples_per_s"] > 0
    assert set(results["build_memory"]["results"]) == {"1", "2"}
    for name in ("hmdb51", "fire_hrr"):  # builds against the tight-loop limit of their own work
        e = results["build_limit"][name]
        assert e["stages"]["source_frames"] > 0 and e["limit_frames_per_s"] > 0 and 0 < e["write_share"]
        assert 0 < e["serialized_share"] <= e["example_fn_share"] * 1.2
    nc = results["no_config"]
    assert nc["config"] == "split1_20x64x64" and nc["ratio"] > 0
    paths = results["hmdb51_paths"]  # tfds.load and seeded/unseeded vidvol.load per batch size, each vs its limit
    assert {(r["pipeline"], r["batch_size"], r["seed"]) for r in paths["rows"]} == {
        (p, b, seed) for b in (2, 4) for p, seed in (("tfds.load", None), ("vidvol.load", None), ("vidvol.load", 0))}
    assert all(r["examples_per_s"] > 0 and 0 < r["of_limit"] and r["x_baseline"] > 0 for r in paths["rows"])
    assert "every read path, batch size and seed" in (out / "RESULTS.md").read_text()
    assert results["inputs"]["hmdb51"]["stored_frame_kib"] > 0 and results["inputs"]["hmdb51"]["decode_frames_per_s_per_core"] > 0
    names = [t["name"] for t in results["targets"]]
    fz = results["fuzz"]  # the fuzz lane's budget: every target, no bad outcome
    assert len(fz["rows"]) == 11 and all(r["inputs"] == 20 for r in fz["rows"]) and fz["bad"] == 0, fz["targets"]
    assert "## Fuzzing" in (out / "RESULTS.md").read_text()
    im = results["imports"]  # start-up: every command timed in its own interpreter, paired with import tensorflow_datasets
    assert set(im["results"]) == {"tfds", "vidvol", "builder", "help", "verify_help", "tensorflow"} and len(im["targets"]) == 3
    assert all(r["wall_s"] > 0 and r["peak_rss_mib"] > 0 for r in im["results"].values()) and im["results"]["tfds"]["ratio"] == 1
    assert "tensorflow" in im["results"]["tensorflow"]["imports"] and "## Imports" in (out / "RESULTS.md").read_text()
    assert len(names) == len(set(names)) >= 28 and any("augmentation cost" in n for n in names) and all(isinstance(t["pass"], bool) for t in results["targets"])
    assert results["machine"]["cores"] >= 1 and results["machine"]["cpu_model"]
    assert {"tensorflow", "apache-beam", "opencv", "nibabel"} <= set(results["versions"])
    assert stdout.count("[bench] PASS") + stdout.count("[bench] MISS") == len(names)


@pytest.mark.long  # the whole quick benchmark run (6 min here): `make test-long`, or `make bench-quick` itself
def test_quick_run_counts_match_the_inputs(quick):
    out, results, _ = quick
    root = str(out / "inputs_quick" / "hmdb51")
    train = inputs.hmdb51_split_videos(root, 1, "train")
    test = inputs.hmdb51_split_videos(root, 1, "test")
    assert results["builds_for_reads"]["hmdb51"]["examples"] == len(train) + len(test) and train and test
    assert results["read"]["hmdb51"]["examples"] == len(train)
    for count, r in results["build_memory"]["results"].items():
        assert r["examples"] == int(count) and r["skipped"] == 0  # one 161-frame window per experiment
    for tag, n in (("32", 2), ("40x40x24", 2)):
        assert results["builds_for_reads"][f"mri_{tag}"]["examples"] == n
    # The decode limit decoded exactly the frames stored in the hmdb51 shards.
    stored = baselines.stored_jpeg_frames(
        baselines.shard_files(str(out / "data" / "hmdb51"), "hmdb51", "split1_20x64x64", "train"))
    assert len(stored) == results["read"]["hmdb51"]["limit"]["frames_sampled"] == 20 * len(train)
    assert cv2.imdecode(np.frombuffer(stored[0], np.uint8), cv2.IMREAD_COLOR).shape == (64, 64, 3)


@pytest.mark.long  # the whole quick benchmark run (6 min here): `make test-long`, or `make bench-quick` itself
def test_quick_run_report_and_chart(quick):
    out, results, _ = quick
    text = (out / "RESULTS.md").read_text()
    for heading in ("## Headline", "## Machine", "## Inputs", "## Read throughput", "## Build throughput",
                    "## Build memory", "## Read memory", "## Method"):
        assert heading in text
    for t in results["targets"]:
        assert t["name"] in text
    png = (out / "results.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape[0] > 500 and image.shape[1] > 800 and image.std() > 10  # a drawn chart, not a blank canvas


def test_seek_baseline_reads_the_evenly_spaced_frames(tmp_path):
    path = samples.write_video(str(tmp_path / "clip.avi"), 90, height=120, width=160, fourcc="MJPG")
    clip = baselines.read_clip_by_seeking(path)
    assert clip.shape == (20, 64, 64, 3) and clip.dtype == np.float32 and 0 <= clip.min() and clip.max() <= 1
    expected = np.linspace(0, 89, 20).round().astype(int)
    got = [samples.decode_frame_index(np.rint(frame * 255).astype(np.uint8)) for frame in clip]
    assert got == expected.tolist()
    assert samples.colour_key_ok(np.rint(clip[0] * 255)), "baseline frames must be RGB like the loader's"


def test_get_img_and_fdata_baselines(tmp_path):
    rgb = samples.make_frame(5, height=54, width=96)
    path = tmp_path / "f.png"
    cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    frame = baselines.get_img(str(path).encode())
    np.testing.assert_allclose(frame * 255, rgb, atol=1e-3)
    with pytest.raises(FileNotFoundError, match="missing.jpg"):
        baselines.get_img(str(tmp_path / "missing.jpg").encode())
    volumes = baselines.mri_get_fdata_dataset([], [], shape=(4, 4, 4), batch_size=2)
    assert volumes.element_spec[0].shape.as_list() == [None, 4, 4, 4]


def test_decode_rate_counts_real_decodes():
    frames = [cv2.imencode(".jpg", samples.make_frame(i, height=64, width=64))[1].tobytes() for i in range(4)]
    rate = baselines.decode_rate(frames, min_seconds=0.05)
    assert rate["frames"] % 4 == 0 and rate["frames"] >= 4
    assert rate["frames_per_s"] > 0 and rate["cpu_frames_per_s"] > 0
    with pytest.raises(ValueError, match="imdecode failed"):
        baselines.decode_rate([b"not a jpeg"], min_seconds=0.01)


def test_mri_inputs_compress_like_scans(tmp_path):
    plan = inputs.mri_plan(str(tmp_path / "mri"), num=1, shape=(64, 64, 48))
    assert inputs.write_inputs([plan]) == [True]
    assert inputs.write_inputs([plan]) == [False]  # reused, not rewritten
    image = nib.load(inputs.mri_paths(str(tmp_path / "mri"))[0])
    data = np.asarray(image.dataobj)
    assert data.dtype == np.int16 and image.shape == (64, 64, 48)
    assert 0 <= data.min() and 500 < data.max() < 2000  # scanner-like intensities, slope 1
    ratio = inputs.describe_mri(str(tmp_path / "mri"))["gzip_ratio"]
    assert 1.5 < ratio < 5, f"gzip ratio {ratio}: expected a real scan's 2-4x, not noise (~1x) or flat (~100x)"


def test_fire_inputs_and_labels(tmp_path):
    plan = inputs.fire_plan(str(tmp_path / "fire"), experiments=2, frames=5, height=54, width=96)
    inputs.write_inputs([plan])
    rows = inputs.fire_frame_rows(str(tmp_path / "fire" / "labels.csv"))
    assert [r[0] for r in rows] == ["exp_000"] * 5 + ["exp_001"] * 5
    first = cv2.imread(rows[0][1])
    assert first.shape == (54, 96, 3) and first.std() > 5  # textured, not a flat colour
    assert all(h > 0 for _, _, h in rows)
    (tmp_path / "bad.csv").write_text("experiment,frame,hrr\nexp,a.jpg,1.0\nexp,b.jpg,not-a-number\n")
    with pytest.raises(ValueError, match=r"bad.csv:3"):
        inputs.fire_frame_rows(str(tmp_path / "bad.csv"))
    assert inputs.subset_labels(str(tmp_path / "fire" / "labels.csv"), str(tmp_path / "one"), 1) == 5
    one = inputs.fire_frame_rows(str(tmp_path / "one" / "labels.csv"))
    assert one == rows[:5]  # the first experiment, its frame paths made absolute
    assert inputs.repeat_experiments(str(tmp_path / "one" / "labels.csv"), str(tmp_path / "twice"), 2) == 10
    twice = inputs.fire_frame_rows(str(tmp_path / "twice" / "labels.csv"))
    assert [r[0] for r in twice] == ["exp_000_r0"] * 5 + ["exp_000_r1"] * 5 and [r[1] for r in twice] == [r[1] for r in one] * 2
    with pytest.raises(ValueError, match="asked for 3 experiments, found 2"):
        inputs.subset_labels(str(tmp_path / "fire" / "labels.csv"), str(tmp_path / "three"), 3)


def test_target_rows():
    assert section.target("a", 60, 50)["pass"] and not section.target("a", 40, 50)["pass"]
    growth = section.target("g", 0.12, 0.10, op="<=", unit="%")
    assert not growth["pass"] and growth["score"] < 1
    assert section.target("m", 1.5, 2.0, op="<=", unit="GiB")["pass"]
    assert not section.target("nan", float("nan"), 1.0)["pass"]
    with pytest.raises(ValueError, match="op must be"):
        section.target("x", 1.0, 1.0, op=">")
    row = section.target("c", 0.9, 0.8, unit="%", cpu_value=0.95, note="why")
    assert list(row) == ["name", "value", "target", "op", "unit", "pass", "score", "note", "cpu_value"]
    assert section.verdict(row) == "PASS c: 0.9 (target >= 0.8)"
    assert report.finite_numbers({"a": [1.0, float("inf")], "b": {"c": float("nan")}}) == ["results.a[1]", "results.b.c"]


def test_wheel_has_no_benchmarks(tmp_path):
    """The built wheel (what `pip install vidvol` installs) holds the library, not the benchmark tool."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "bench_out", "demo_out"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "--disable-pip-version-check", "-w", str(tmp_path / "wheel"), str(src)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("vidvol-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "vidvol/__init__.py" in names and "vidvol/builders/dataset_builder.py" in names
    assert [n for n in names if n.startswith("vidvol/benchmarks/") or "stock_writer" in n] == []


@pytest.mark.parametrize("checkout", [False, True], ids=["copy", "checkout"])
def test_publish_only_into_a_source_checkout(tmp_path, checkout):
    """A full run's results go into benchmarks/ only where a .git sits beside it (never an installed copy)."""
    root = tmp_path / "tree"
    copy = root / "benchmarks"
    shutil.copytree(BENCHMARKS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if checkout:
        (root / ".git").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(BENCHMARKS / "results.json", out / "results.json")  # a full run's document
    for name in ("RESULTS.md", "results.png"):
        (copy / name).write_bytes(b"stale")
    proc = subprocess.run([sys.executable, str(copy / "run.py"), "--report-only", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, env=ENV, cwd=str(tmp_path))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for name in ("RESULTS.md", "results.png"):
        rendered = (out / name).read_bytes()
        assert rendered != b"stale" and len(rendered) > 1000
        assert ((copy / name).read_bytes() == rendered) is checkout
