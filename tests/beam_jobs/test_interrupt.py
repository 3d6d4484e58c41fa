"""kill -9 mid-build leaves no dataset; running the same command again resumes it, byte for byte an uninterrupted build."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import cv2
import numpy as np
import psutil
import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.beam_jobs import build
from vidvol.testing import samples

import resume_toy

pytestmark = pytest.mark.slow  # subprocess builds/CLIs: `make test` runs them, `make test-fast` does not

DATASET = "hmdb51/split1_20x64x64"


def write_slow_video(path: str, *, num_frames: int = 300, height: int = 240, width: int = 320) -> None:
    """An MJPG video of scrolling noise: large frames that take a few tenths of a second to decode."""
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (width, height))
    assert writer.isOpened(), path
    base = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    for i in range(num_frames):
        writer.write(np.roll(base, 3 * i, axis=1))
    writer.release()


@pytest.fixture(scope="module")
def manual_dir(tmp_path_factory) -> tuple[str, dict[str, list[str]]]:
    """An HMDB51 layout of 3 classes x 10 videos, every video a hard link to one slow-to-decode video."""
    root = str(tmp_path_factory.mktemp("hmdb51_slow"))
    expected = samples.write_hmdb51_layout(root, videos_per_class=10, num_frames=(2, 2), height=32, width=32,
                                           splits=(1,))[1]
    slow = os.path.join(root, "slow.avi")
    write_slow_video(slow)
    videos = glob.glob(os.path.join(root, "hmdb51_org", "*", "*.avi"))
    assert len(videos) == 30
    for path in videos:
        os.remove(path)
        os.link(slow, path)
    return root, expected


def _cli(manual: str, data_dir: str) -> list[str]:
    return [sys.executable, "-m", "vidvol.beam_jobs.build", DATASET, "--manual_dir", manual, "--data_dir", data_dir,
            "--num_shards", "10", "--direct_num_workers=2"]


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _kill_mid_build(manual: str, data_dir: str, env: dict[str, str], log_path: str) -> None:
    """Runs the CLI build on 2 SDK workers and SIGKILLs driver and workers once a shard (not all) is written."""
    config_dir = os.path.join(data_dir, "hmdb51", "split1_20x64x64")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_cli(manual, data_dir), stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        # Wait until workers have finished at least one shard (its sidecar .info.json exists) but not all.
        deadline = time.monotonic() + 240
        done_shards: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            done_shards = glob.glob(os.path.join(config_dir, "incomplete.*_1.0.0", "*.partial.info.json"))
            if done_shards:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the build ended ({proc.returncode}) before it could be interrupted:\n" + open(log_path).read()[-3000:]
        assert done_shards, "no shard finished in time:\n" + open(log_path).read()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while _group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_members(proc.pid) == []  # driver and SDK workers all gone
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.long
def test_kill_9_mid_build_then_rebuild(manual_dir, tmp_path):
    manual, expected = manual_dir
    data_dir = str(tmp_path / "data")
    config_dir = os.path.join(data_dir, "hmdb51", "split1_20x64x64")
    final_dir = os.path.join(config_dir, "1.0.0")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    log_path = str(tmp_path / "killed.log")
    _kill_mid_build(manual, data_dir, env, log_path)

    # No dataset: only TFDS's incomplete folder, holding some of the shards.
    assert not os.path.exists(final_dir)
    (leftover,) = glob.glob(os.path.join(config_dir, "incomplete.*_1.0.0"))
    assert glob.glob(os.path.join(leftover, "*.partial"))
    assert not os.path.exists(os.path.join(leftover, "dataset_info.json"))
    assert not tfds.builder(DATASET, data_dir=data_dir).is_prepared()
    with pytest.raises(AssertionError, match="could not find data"):
        tfds.load(DATASET, split="train", data_dir=data_dir, download=False)

    # The same command again resumes: the finished shards kept, the others built; the leftover is gone.
    kept = len(glob.glob(os.path.join(leftover, "*.partial.info.json")))
    rerun = subprocess.run(_cli(manual, data_dir), capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-5000:]
    assert f"resuming: {kept} of 20 shards kept, {20 - kept} to build" in rerun.stderr  # 10 per split
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["built"] and {s: v["examples"] for s, v in summary["splits"].items()} == {
        s: len(v) for s, v in expected.items()}
    assert tfds.builder(DATASET, data_dir=data_dir).is_prepared()
    for split, videos in expected.items():
        ds = tfds.load(DATASET, split=split, data_dir=data_dir, download=False)
        assert sorted(ex["video_id"].decode() for ex in tfds.as_numpy(ds)) == videos
    assert build.incomplete_dirs(build.make_builder(DATASET, data_dir)) == []
    # Byte for byte what an uninterrupted build gives (here on one in-memory worker, not two SDK workers).
    fresh = build.build(DATASET, manual_dir=manual, data_dir=str(tmp_path / "fresh"), num_shards=10,
                        beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert resume_toy.files(final_dir) == resume_toy.files(fresh.data_path)


@pytest.mark.long
def test_kill_9_then_resume_on_dask(manual_dir, tmp_path):
    """Killed on the direct runner's SDK workers, resumed on a local Dask cluster: the uninterrupted build's bytes."""
    manual, _ = manual_dir
    data_dir = str(tmp_path / "data")
    _kill_mid_build(manual, data_dir, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), str(tmp_path / "killed.log"))
    (leftover,) = glob.glob(os.path.join(data_dir, "hmdb51", "split1_20x64x64", "incomplete.*_1.0.0"))
    kept = len(glob.glob(os.path.join(leftover, "*.partial.info.json")))
    resumed = build.build(DATASET, manual_dir=manual, data_dir=data_dir, runner="dask", local_services=True, num_shards=10)
    fresh = build.build(DATASET, manual_dir=manual, data_dir=str(tmp_path / "fresh"), num_shards=10,
                        beam_flags=["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert resume_toy.files(resumed.data_path) == resume_toy.files(fresh.data_path)
    assert not os.path.exists(leftover) and kept > 0
