"""The peers section (`benchmarks/sections/peers.py`): its figures from a stored document, its venv, and real peers.

Without the peers venv (what `make test` and CI have): the frame indices the peers decode are
vidvol's own, the `bench` extra parses and a venv is judged usable or not with the reason, and
`peers.py --resummarize` turns a stored document into the right ratios, winners, targets and
Markdown. With the venv (OUT/peers_venv of a `make bench` run: `bench_out/peers_venv` in this
checkout, or $VIDVOL_PEERS_VENV): every peer decodes the right frames of real XVID files and the
volumes nibabel reads, and a quick benchmark run measures the whole section with it. Nothing is mocked.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys

import nibabel as nib
import numpy as np
import pytest

from vidvol.builders.transforms import video
from vidvol.testing import samples

from bench_modules import bench_module

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")




peer_jobs = bench_module("peers/jobs")
peers_env = bench_module("peers/env")
jobs = bench_module("common/jobs")


def _peers_venv() -> str | None:
    """The peers venv to test with, or None: $VIDVOL_PEERS_VENV, else this checkout's bench_out/peers_venv."""
    venv = os.environ.get("VIDVOL_PEERS_VENV") or str(REPO / "bench_out" / "peers_venv")
    return venv if peers_env.missing(venv, peers_env.bench_requirements()) is None else None


VENV = _peers_venv()
needs_venv = pytest.mark.skipif(VENV is None, reason="no peers venv (make bench makes bench_out/peers_venv from "
                                "setup.cfg's 'bench' extra; or set VIDVOL_PEERS_VENV)")


# --------------------------------------------------------------------------------------------
# Without the venv


def test_peers_decode_the_frames_vidvol_samples():
    for n in list(range(0, 70)) + [89, 90, 123, 299, 1000]:
        for s in (1, 16, 20, 32):
            assert peer_jobs.uniform_indices(n, s) == video.uniform_indices(n, s).tolist(), (n, s)


def test_bench_extra_and_venv_states(tmp_path):
    reqs = peers_env.bench_requirements()
    names = {r.split("=")[0].split(">")[0].split("<")[0] for r in reqs}
    assert "torch==2.13.0" in reqs and "decord==0.6.0" in reqs  # the CPU wheel on disk; decord's last release
    assert {"av", "torchcodec", "monai", "torchio", "nibabel", "opencv-python-headless", "numpy"} <= names
    assert not any(r.startswith(("tensorflow", "vidvol")) for r in reqs), "the peers venv holds no vidvol/TF"
    venv = tmp_path / "venv"
    assert "no peers venv" in peers_env.missing(str(venv), reqs)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert peers_env.STAMP in peers_env.missing(str(venv), reqs)
    (venv / peers_env.STAMP).write_text("\n".join(reqs[:-1]) + "\n")
    assert "other requirements" in peers_env.missing(str(venv), reqs)
    (venv / peers_env.STAMP).write_text("\n".join(reqs) + "\n")
    assert peers_env.missing(str(venv), reqs) is None
    with pytest.raises(peers_env.PeersUnavailable, match="no peers venv"):
        peers_env.ensure(str(tmp_path / "absent"), create=False, log_path=str(tmp_path / "log"))
    assert not (tmp_path / "absent").exists(), "quick mode must never make the venv"
    cfg = tmp_path / "setup.cfg"
    cfg.write_text("[options.extras_require]\nbench =\n    # comment\n    torch==2.13.0  # why\n    av\n")
    assert peers_env.bench_requirements(str(cfg)) == ["torch==2.13.0", "av"]
    with pytest.raises(KeyError, match="no 'nope'"):
        peers_env.bench_requirements(str(cfg), "nope")


def _rate(eps: float, cpu: float, batch: int, **extra) -> dict:
    return {"examples_per_s": eps, "examples_per_s_runs": [eps], "cpu_examples_per_s": cpu, "cores_used": 1.0,
            "other_cores_busy": 0.1, "peak_rss_mib": 900.0, "batch_size": batch, **extra}


def _peer(pipeline: str, eps: float, cpu: float, batch: int, ok: bool = True, **extra) -> dict:
    return {"pipeline": pipeline, **_rate(eps, cpu, batch, **extra),
            "first_batch": {"shape": [batch], "dtype": "float32", "path": "a.avi", "sample": "x.npy"},
            "check": {"ok": ok, "corr": 0.99 if ok else 0.2, "shifted_corr": 0.8}}


def stored_document() -> dict:
    """A peers document's records as `Peers.measure` writes them (figures chosen to pass some targets, miss others)."""
    video = []
    for batch, rates in ((8, {"opencv": (20, 40), "decord": (25, 35), "pyav": (15, 50), "torchcodec": (30, 45)}),
                         (32, {"opencv": (22, 44), "decord": (26, 30), "pyav": (16, 52), "torchcodec": (28, 60)})):
        video += [_peer(p, eps, cpu, batch) for p, (eps, cpu) in rates.items()]
        video.append(_peer("tfds_video", 300, 700, batch, build_s=10.0))
    video.append(_peer("decord", 500, 900, 32, ok=False))  # fastest, but decoded the wrong frames: never the best
    volume = [_peer(p, eps, cpu, 4, augment=aug) for aug, rates in (
        (False, {"monai_dataset": (20, 30), "monai_persistent": (100, 150), "monai_cache": (90, 200), "torchio": (18, 25)}),
        (True, {"monai_dataset": (15, 20), "monai_persistent": (80, 120), "monai_cache": (85, 110), "torchio": (10, 15)}))
        for p, (eps, cpu) in rates.items()]
    return {"mode": "full", "cores": 2, "venv": "/x/peers_venv", "hmdb51_config": "split1_20x64x64",
            "mri": {"key": "mri_volumes_128", "config": "128", "size": 128}, "clips": 80, "volumes": 10,
            "vidvol": {"video": [_rate(600, 900, 8, pipeline="vidvol.load", config="split1_20x64x64", seed=0),
                                 _rate(280, 600, 32, pipeline="vidvol.load", config="split1_20x64x64", seed=0)],
                       "raw": _rate(1500, 2000, 32, pipeline="vidvol.load", config="split1_20x64x64_raw", seed=None),
                       "float32": _rate(450, 500, 4, pipeline="vidvol.load", config="128", output_dtype="float32"),
                       "int16": _rate(700, 1000, 4, pipeline="vidvol.load", config="128", output_dtype="int16"),
                       "augment": _rate(300, 450, 4, pipeline="vidvol.load", config="128", output_dtype="float32",
                                        augment={"patch_size": [96] * 3})},
            "video": video, "volume": volume, "duration_s": 600.0,
            "failed": [{"pipeline": "pyav", "batch_size": 64, "augment": False, "log": "/x/pyav_b64.log",
                        "error": "peer_jobs.py job pyav_b64 failed (1):\nTraceback ...\nav.error.InvalidDataError: boom"}],
            "versions": {"tensorflow-datasets": "4.9.10", "peers_venv": {"torch": "2.13.0+cpu", "decord": "0.6.0"},
                         "ffmpeg": {"torchcodec": "libavcodec 59.37.100 (system)"}}}


def _resummarize(tmp_path, doc: dict) -> tuple[dict, str]:
    """`python benchmarks/sections/peers.py --resummarize --out tmp` on the document; (its peers.json, PEERS.md)."""
    (tmp_path / "peers.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sections" / "peers.py"), "--resummarize", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=ENV, cwd=str(tmp_path))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads((tmp_path / "peers.json").read_text()), (tmp_path / "PEERS.md").read_text()


def test_ratios_winners_and_targets_from_a_stored_document(tmp_path):
    doc, text = _resummarize(tmp_path, stored_document())
    best = doc["best_video_peer"]
    assert best["8"]["pipeline"] == "torchcodec" and best["32"]["pipeline"] == "torchcodec"  # not the failed decord
    r = doc["ratios"]
    assert r["video_b8"]["value"] == pytest.approx(600 / 30) and r["video_b8"]["cpu"] == pytest.approx(900 / 45)
    assert r["video_b32"]["value"] == pytest.approx(280 / 28) and r["raw"]["value"] == pytest.approx(1500 / 28)
    assert r["mri_float32"]["value"] == pytest.approx(4.5) and r["mri_int16"]["value"] == pytest.approx(7.0)
    assert r["mri_float32"]["against"] == "monai_persistent"
    assert r["mri_augment"]["value"] == pytest.approx(300 / 80) and r["mri_augment"]["cpu"] == pytest.approx(450 / 120)
    aug_row = next(x for x in doc["volume"] if x["pipeline"] == "monai_cache" and x["augment"])
    assert aug_row["vidvol_x"] == pytest.approx(300 / 85)  # augmented peers against vidvol's augmented row
    assert doc["best_volume_peer"] == {
        "plain": {"pipeline": "monai_persistent", "examples_per_s": 100, "cpu_examples_per_s": 150},
        "augmented": {"pipeline": "monai_cache", "examples_per_s": 85, "cpu_examples_per_s": 110}}
    verdicts = {t["name"]: (t["value"], t["target"], t["pass"]) for t in doc["targets"]}
    assert list(verdicts) == [
        "hmdb51: vidvol.load float32 (batch 8, seed=0) vs best read-time video peer (TorchCodec (exact seek))",
        "hmdb51: vidvol.load float32 (batch 32, seed=0) vs best read-time video peer (TorchCodec (exact seek))",
        "hmdb51 raw (split1_20x64x64_raw, batch 32, unseeded): vidvol.load vs best read-time video peer "
        "(TorchCodec (exact seek))",
        "mri_volumes_128: vidvol.load float32 + mask (batch 4) vs MONAI PersistentDataset",
        "mri_volumes_128: vidvol.load(output_dtype='int16', mask_dtype=None) (batch 4) vs MONAI PersistentDataset",
        "mri_volumes_128: vidvol.load float32 + mask with augmentation (patches, flip, rot90, scale, shift) (batch 4) "
        "vs MONAI PersistentDataset with its Rand* augmentation"]
    assert [v[1:] for v in verdicts.values()] == [(15, True), (15, False), (30, True), (4, True), (8, False),
                                                  (3.5, True)]
    tfds_row = next(x for x in doc["video"] if x["pipeline"] == "tfds_video" and x["batch_size"] == 8)
    assert tfds_row["vidvol_x"] == pytest.approx(2.0)
    assert any("batch 8" in w and "cpu-normalized, PyAV" in w for w in doc["winners"])  # PyAV leads per CPU-second
    assert any("failed the first-batch check" in n and "decord" in n for n in doc["notes"])
    assert any("PyAV (decode in order) (batch 64) did not run: av.error.InvalidDataError: boom" in n for n in doc["notes"])
    for heading in ("## Peers", "### Video", "### Volumes", "Versions: torch 2.13.0+cpu",
                    "vidvol.load float32 + mask + augmentation", "the same Rand* set on both sides"):
        assert heading in text
    for t in doc["targets"]:
        assert t["name"] in text


def test_the_augmented_vidvol_row_is_held_against_the_best_video_peer(tmp_path):
    doc = stored_document()
    doc["vidvol"]["augmented"] = _rate(250, 540, 32, pipeline="vidvol.load", config="split1_20x64x64", seed=0,
                                       augment="VideoAugment(64): random resized crop to the stored size + flip")
    out, text = _resummarize(tmp_path, doc)
    x = out["ratios"]["video_augmented"]
    assert x["against"] == "torchcodec" and x["value"] == pytest.approx(250 / 28) and x["cpu"] == pytest.approx(540 / 60)
    row = next(t for t in out["targets"] if "with augmentation" in t["name"])
    assert row["name"] == ("hmdb51: vidvol.load float32 with augmentation (batch 32, seed=0, random resized crop + flip) "
                           "vs best read-time video peer (TorchCodec (exact seek))")
    assert (row["target"], row["pass"]) == (12, False) and len(out["targets"]) == 7  # and mri_augment
    assert "(`split1_20x64x64`, seed=0), VideoAugment(64): random resized crop to the stored size + flip |" in text
    assert row["name"] in text


def test_a_document_without_the_peers_has_no_targets(tmp_path):
    doc = stored_document()
    doc["video"] = [x for x in doc["video"] if x["pipeline"] == "tfds_video"]
    doc["volume"] = []
    for key in ("float32", "int16", "augment"):
        del doc["vidvol"][key]
    doc["skipped"] = "read-time peers not measured: no peers venv at /x/peers_venv"
    out, text = _resummarize(tmp_path, copy.deepcopy(doc))
    assert out["targets"] == [] and out["ratios"] == {} and out["best_video_peer"] == {}
    assert doc["skipped"] in text and "No target rows" in text and "### Volumes" not in text


# --------------------------------------------------------------------------------------------
# With the venv: real peers


def _run_peer(tmp_path, **job) -> dict:
    job = dict(work=str(tmp_path / job["peer"]), runs=1, min_seconds=0.2, warmup_batches=1, rounds=1, **job)
    paths = {x: tmp_path / f"{job['peer']}{'_aug' if job.get('augment') else ''}.{x}" for x in ("json", "result", "log")}
    paths["json"].write_text(json.dumps(job))
    status, _, _ = jobs.run_command([peers_env.python_of(VENV), str(BENCHMARKS / "peers" / "jobs.py"), str(paths["json"]),
                                     str(paths["result"])], str(paths["log"]), 300)
    assert status == 0, jobs.tail(str(paths["log"]))
    result = json.loads(paths["result"].read_text())
    assert result["examples_per_s"] > 0 and result["cpu_examples_per_s"] > 0 and result["peak_rss_mib"] > 0
    return result


@pytest.mark.slow
@needs_venv
def test_every_video_peer_decodes_the_evenly_spaced_frames(tmp_path):
    clips = [samples.write_video(str(tmp_path / f"clip{i}.avi"), n, height=120, width=160) for i, n in enumerate((90, 61))]
    for peer in peer_jobs.VIDEO_PEERS:
        r = _run_peer(tmp_path, peer=peer, paths=clips, labels=[0, 1], batch_size=2)
        first = r["first_batch"]
        assert first["shape"] == [2, 20, 64, 64, 3] and first["dtype"] == "float32"
        assert 0 <= first["min"] <= first["max"] <= 1
        clip = np.load(first["sample"])
        n = 90 if first["path"] == clips[0] else 61
        got = [samples.decode_frame_index(np.rint(frame * 255).astype(np.uint8)) for frame in clip]
        assert got == video.uniform_indices(n, 20).tolist(), peer
        assert samples.colour_key_ok(np.rint(clip[0] * 255)), f"{peer}: frames must be RGB like vidvol's"
        assert r["versions"]["torch"].startswith("2.13.0") and r["ffmpeg"].startswith("libavcodec")


@pytest.mark.slow
@needs_venv
def test_every_volume_peer_returns_what_nibabel_reads(tmp_path):
    inputs = bench_module("common/inputs")
    inputs.write_inputs([inputs.mri_plan(str(tmp_path / "mri"), num=2, shape=(32, 32, 32))])
    paths = inputs.mri_paths(str(tmp_path / "mri"))
    for peer in peer_jobs.VOLUME_PEERS:
        r = _run_peer(tmp_path, peer=peer, paths=paths, labels=[0, 1], batch_size=2, size=32)
        first = r["first_batch"]
        assert first["shape"] == [2, 1, 32, 32, 32] and first["dtype"] == "float32", peer
        expected = nib.load(first["path"]).get_fdata(dtype=np.float32)  # already RAS at the grid: unchanged
        np.testing.assert_allclose(np.load(first["sample"])[0], expected, err_msg=peer)
    r = _run_peer(tmp_path, peer="monai_persistent", paths=paths, labels=[0, 1], batch_size=2, size=32, augment=True,
                  crop=24)
    assert r["first_batch"]["shape"] == [2, 1, 24, 24, 24] and r["cache_mib"] > 0 and r["augment"]


@pytest.mark.slow
@needs_venv
def test_quick_benchmark_measures_the_section_with_the_venv(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "peers_venv").symlink_to(VENV)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--out", str(out), "--no-cluster",
                           "--no-random-access"], capture_output=True, text=True, timeout=900, env=ENV, cwd=str(out))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    doc = json.loads((out / "results.json").read_text())["peers"]
    assert "skipped" not in doc
    assert {r["pipeline"] for r in doc["video"]} == {"tfds_video", *peer_jobs.VIDEO_PEERS}
    assert {(r["pipeline"], r["augment"]) for r in doc["volume"]} == {
        (p, a) for p in peer_jobs.VOLUME_PEERS for a in (False, True)}
    assert all(r["check"]["ok"] for r in doc["video"] + doc["volume"]), [r["check"] for r in doc["video"] + doc["volume"]]
    assert len(doc["targets"]) == 6 and all(t["value"] > 0 for t in doc["targets"])  # video float32, raw, augmented; MRI float32 + mask, int16, augmented
    assert doc["versions"]["peers_venv"]["torchcodec"] and doc["vidvol"]["float32"]["batch_size"] == 4
    assert "## Peers" in (out / "RESULTS.md").read_text()
    assert proc.stdout.count("[bench] peers: ") == 6
