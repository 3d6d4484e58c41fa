"""A build that died is resumed by the next one: whole shards kept, the rest decoded, the result byte for byte the same."""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import resume_toy
from resume_toy import NAME, GATE
from vidvol.builders.writer import fingerprint
from vidvol.builders.writer import plan
from vidvol.builders.writer import resume

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINTS = {"planning": "planning", "between_shards": "source:11", "mid_shard": "source:13", "published": "published"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted toy build, with a copy of its incomplete folder taken at each point of `POINTS`."""
    root = tmp_path_factory.mktemp("resume")
    manual = str(root / "manual")
    resume_toy.write_inputs(manual)
    snaps = {point: str(root / "snapshots" / point) for point in POINTS}
    GATE["snapshots"] = {gate: snaps[point] for point, gate in POINTS.items()}
    try:
        builder = resume_toy.build(str(root / "ref"), manual)
    finally:
        GATE["snapshots"] = {}
    return {"manual": manual, "files": resume_toy.files(os.fspath(builder.data_path)), "snapshots": snaps,
            "num_inputs": GATE["count"], "shards": builder.info.splits["train"].num_shards}


def _left_by_dead_build(snapshot: str, data_dir: str) -> str:
    """Puts a dead build's folder (a snapshot) into a fresh data_dir, as a SIGKILL would have left it."""
    folder = os.path.join(data_dir, NAME, "incomplete.SNAP00_1.0.0")
    shutil.copytree(snapshot, folder)
    return folder


def _whole(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "*.partial.info.json")))


def _inputs_of(folder: str, manual: str) -> int:
    """How many inputs the shards with a sidecar in `folder` were planned with."""
    sources = [(n, (n, os.path.join(manual, n))) for n in sorted(os.listdir(manual))]
    tasks = plan.plan_shards("train", sources, resume_toy.SHARDS, lambda i, n: f"{NAME}-train.tfrecord-{i:05d}-of-{n:05d}.partial")
    done = {os.path.basename(p)[: -len(".info.json")] for p in _whole(folder)}
    return sum(len(t.sources) for t in tasks if t.path in done)


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(POINTS))
def test_a_dead_build_is_resumed_and_the_result_equals_an_uninterrupted_build(reference, point, tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    folder = _left_by_dead_build(reference["snapshots"][point], data_dir)
    whole = len(_whole(folder))
    kept_inputs = _inputs_of(folder, reference["manual"])
    with caplog.at_level(logging.INFO):
        builder = resume_toy.build(data_dir, reference["manual"])
    # Every shard and metadata file is the uninterrupted build's, byte for byte; the fingerprint is gone.
    assert resume_toy.files(os.fspath(builder.data_path)) == reference["files"]
    assert resume.FINGERPRINT_NAME not in reference["files"]
    assert not os.path.exists(folder)  # the dead build's folder went once its shards were moved
    # Only the other shards' inputs were decoded.
    assert GATE["count"] == reference["num_inputs"] - kept_inputs
    if point == "planning":
        assert whole == 0 and builder.resumed is None
        return
    assert {"mid_shard": 2, "between_shards": 2, "published": 6}[point] == whole
    assert (builder.resumed.kept, builder.resumed.total) == (whole, reference["shards"])
    line = f"resuming: {whole} of {reference['shards']} shards kept, {reference['shards'] - whole} to build"
    assert line in caplog.text
    log = glob.glob(os.path.join(data_dir, NAME, "build-1.0.0-*.log"))
    assert log and line in open(log[0], encoding="utf-8").read()  # the build log has it too


@pytest.mark.slow
def test_damaged_and_half_written_shards_are_rebuilt(reference, tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    folder = _left_by_dead_build(reference["snapshots"]["published"], data_dir)
    shards = sorted(p for p in glob.glob(os.path.join(folder, "*.partial")))
    with open(shards[1], "r+b") as f:  # one byte flipped: same size, other bytes
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(shards[4], "r+b") as f:  # cut short
        f.truncate(10)
    os.remove(shards[2] + ".info.json")  # renamed into place, its sidecar never written
    with caplog.at_level(logging.INFO):
        builder = resume_toy.build(data_dir, reference["manual"])
    assert resume_toy.files(os.fspath(builder.data_path)) == reference["files"]
    assert builder.resumed.kept == reference["shards"] - 3
    assert sorted(d.split(" (")[0] for d in builder.resumed.damaged) == ["train shard 1", "train shard 4"]
    assert all("do not match its SHA-256" in d for d in builder.resumed.damaged)
    assert "not keeping train shard 1" in caplog.text
    assert GATE["count"] == 15  # the three shards' inputs, 5 each


@pytest.mark.slow
def test_a_changed_input_or_no_resume_builds_afresh_saying_why(reference, tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    folder = _left_by_dead_build(reference["snapshots"]["published"], data_dir)
    # --no_resume: every input decoded, the dead build's folder left as it is.
    builder = resume_toy.build(data_dir, reference["manual"], resume=False)
    assert builder.resumed is None and GATE["count"] == reference["num_inputs"]
    assert resume_toy.files(os.fspath(builder.data_path)) == reference["files"]
    assert len(_whole(folder)) == reference["shards"]

    # An input modified (same size, another mtime): not resumed, and the warning says what changed.
    data_dir = str(tmp_path / "data2")
    folder = _left_by_dead_build(reference["snapshots"]["published"], data_dir)
    path = os.path.join(reference["manual"], "in005.txt")
    st = os.stat(path)
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write("36")  # was 35
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        with caplog.at_level(logging.WARNING):
            builder = resume_toy.build(data_dir, reference["manual"])
        values = {ex["name"].decode(): int(ex["x"][0]) for ex in builder.as_dataset(split="train").as_numpy_iterator()}
    finally:
        with open(path, "w", encoding="ascii") as f:
            f.write("35")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert builder.resumed is None and GATE["count"] == reference["num_inputs"]
    assert values["in005.txt"] == 36 and values["in004.txt"] == 28
    assert f"not resuming from {folder}" in caplog.text
    assert "split train: input files changed size or modification time (the inputs of shard" in caplog.text
    assert os.path.isdir(folder)  # left for --remove_incomplete


# A real SIGKILL needs a child build (~50 s on a loaded 2-core machine, its imports mostly): the long lane. The
# folder states it leaves are the snapshots above, which the CI lane resumes.
@pytest.mark.long
def test_sigkill_mid_shard_then_the_same_build_resumes(reference, tmp_path):
    data_dir, marker = str(tmp_path / "data"), str(tmp_path / "stopped")
    folder = _killed(data_dir, reference["manual"], POINTS["mid_shard"], marker)
    assert len(_whole(folder)) == 2
    kept_inputs = _inputs_of(folder, reference["manual"])
    builder = resume_toy.build(data_dir, reference["manual"])  # takes the dead build's stale lock over
    assert resume_toy.files(os.fspath(builder.data_path)) == reference["files"]
    assert builder.resumed.kept == 2 and GATE["count"] == reference["num_inputs"] - kept_inputs
    assert glob.glob(os.path.join(data_dir, NAME, "incomplete.*")) == []


def _killed(data_dir: str, manual: str, point: str, marker: str) -> str:
    """Runs the toy build in a child, SIGKILLs it at `point`; the incomplete folder it left."""
    env = dict(os.environ, RESUME_TOY_STOP_AT=point, RESUME_TOY_MARKER=marker, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, os.path.join(TESTS, "resume_toy.py"), data_dir, manual], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(marker) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), proc.stderr.read().decode()[-3000:] if proc.poll() is not None else "timed out"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    (folder,) = glob.glob(os.path.join(data_dir, NAME, "incomplete.*_1.0.0"))
    assert os.path.exists(os.path.join(data_dir, NAME, "build_1.0.0.lock"))  # the dead build's lock stays
    return folder


@pytest.mark.long
@pytest.mark.parametrize("point", ["planning", "between_shards", "published"])
def test_sigkill_at_each_point_then_the_same_build_resumes(reference, point, tmp_path):
    data_dir, marker = str(tmp_path / "data"), str(tmp_path / "stopped")
    folder = _killed(data_dir, reference["manual"], POINTS[point], marker)
    whole = len(_whole(folder))
    assert whole == {"planning": 0, "between_shards": 2, "published": 6}[point]
    builder = resume_toy.build(data_dir, reference["manual"])
    assert resume_toy.files(os.fspath(builder.data_path)) == reference["files"]
    assert (builder.resumed.kept if builder.resumed else 0) == whole
    assert glob.glob(os.path.join(data_dir, NAME, "incomplete.*")) == []


# The fingerprint alone (no build).

def _doc(tasks, **changes):
    kwargs = dict(dataset="toy/c", version="1.0.0", vidvol_version="0.2.0", tfds_version="4.9.10", file_format="tfrecord",
                  config={"name": "'c'", "frames": "16"}, features="{}", options={"num_shards": None}, tasks={"train": tasks})
    kwargs.update(changes)
    return resume.fingerprint(**kwargs)


def test_the_fingerprint_sees_what_decides_the_output(tmp_path):
    paths = []
    for i in range(8):
        p = tmp_path / f"v{i}.bin"
        p.write_bytes(bytes([i]) * 100)
        paths.append(str(p))
    sources = [(f"v{i}", (f"v{i}", p, i % 2)) for i, p in enumerate(paths)]
    tasks = plan.plan_shards("train", sources, 4, lambda i, n: f"/out/s-{i}-of-{n}")
    base = _doc(tasks)
    assert resume.differences(base, _doc(tasks)) == [] and resume.canonical(base) == resume.canonical(_doc(tasks))
    assert resume.differences(base, _doc(tasks, vidvol_version="0.3.0")) == ["the vidvol version: 0.2.0 before, 0.3.0 now"]
    assert resume.differences(base, _doc(tasks, file_format="array_record")) == [
        "the file format: tfrecord before, array_record now"]
    assert resume.differences(base, _doc(tasks, config={"name": "'c'", "frames": "32"})) == [
        "config field frames: 16 before, 32 now"]
    assert resume.differences(base, _doc(tasks, options={"num_shards": 8})) == ["option num_shards: None before, 8 now"]
    fewer = plan.plan_shards("train", sources[:-1], 4, lambda i, n: f"/out/s-{i}-of-{n}")
    assert resume.differences(base, _doc(fewer)) == ["split train: 8 inputs before, 7 now (inputs added or removed)"]
    relabelled = plan.plan_shards("train", [(k, (k, p, 5)) for k, (_, p, _) in sources], 4, lambda i, n: f"/out/s-{i}-of-{n}")
    assert resume.differences(base, _doc(relabelled))[0].startswith("split train: the inputs' records changed")

    # A file rewritten with the same size and its mtime put back: sizes and mtimes miss it, content hashes do not.
    moved = tasks[2].sources[0][1][1]
    st = os.stat(moved)
    with open(moved, "rb") as f:
        first = f.read(1)
    with open(moved, "r+b") as f:
        f.write(b"\xff")
    assert resume.differences(base, _doc(tasks)) == [
        "split train: input files changed size or modification time (the inputs of shard 2 of 4)"]
    os.utime(moved, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert resume.differences(base, _doc(tasks)) == []
    hashed = _doc(tasks, content=True)
    with open(moved, "r+b") as f:
        f.write(first)  # as it was
    os.utime(moved, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert resume.differences(hashed, _doc(tasks, content=True)) == [
        "split train: input files changed content (the inputs of shard 2 of 4)"]
    assert resume.differences(base, hashed) == ["how inputs are fingerprinted: size+mtime before, content now"]


def test_an_array_in_a_record_counts_by_its_bytes_not_its_shortened_repr():
    import numpy as np

    series = np.arange(5000, dtype=np.float32)
    changed = series.copy()
    changed[2500] = -1  # repr shows neither value: it prints the ends only
    assert repr(series) == repr(changed)
    tasks = [plan.ShardTask("train", 0, "/out/s", (("e0", {"times": series}),))]
    other = [plan.ShardTask("train", 0, "/out/s", (("e0", {"times": changed}),))]
    assert resume.differences(_doc(tasks), _doc(other))[0].startswith("split train: the inputs' records changed")


def test_cli_flags_reach_the_build():
    from vidvol.beam_jobs import build

    args, _ = build.parse_args(["toy/c", "--data_dir", "/d", "--no_resume", "--hash_inputs"])
    assert args.no_resume and args.hash_inputs
    args, _ = build.parse_args(["toy/c", "--data_dir", "/d"])
    assert not args.no_resume and not args.hash_inputs


def test_records_of_one_class_are_hashed_by_columns_and_stat_by_a_child_alike(tmp_path, monkeypatch):
    """A plan of dataclass records: the stat child (from `_CHILD_MIN` sources) gives the in-process fingerprint,
    and each change (a field of one record, an mtime, a relative path whose file exists) is seen where it is."""
    from vidvol.builders.transforms import clips

    def plan_of(records):
        sources = [(r.key, r) for r in records]
        return plan.plan_shards("train", sources, 4, lambda i, n: f"/out/s-{i}-of-{n}")

    paths = []
    for i in range(12):
        p = tmp_path / f"c{i % 3}" / f"v{i}.avi"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(bytes([i]) * 10)
        paths.append(str(p))
    records = [clips.ClipSource(path=p, key=f"k{i % 3}/v{i}.avi", features={"label": i % 2, "video_id": f"v{i}"},
                                origin=None if i % 2 else f"a.csv line {i}") for i, p in enumerate(paths)]
    tasks = plan_of(records)
    monkeypatch.setattr(fingerprint, "_CHILD_MIN", 10**9)
    inline = _doc(tasks)
    monkeypatch.setattr(fingerprint, "_CHILD_MIN", 1)
    child = _doc(tasks)
    assert resume.canonical(inline) == resume.canonical(child)
    relabelled = plan_of([dataclasses.replace(r, features={**r.features, "label": 7}) if r is records[5] else r
                          for r in records])
    where = next(t.index for t in tasks if any(s[1] is records[5] for s in t.sources))
    assert resume.differences(child, _doc(relabelled)) == [
        f"split train: the inputs' records changed (labels, paths, times; shard {where} of 4)"]
    st = os.stat(paths[5])
    os.utime(paths[5], ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert resume.differences(child, _doc(tasks)) == [
        f"split train: input files changed size or modification time (the inputs of shard {where} of 4)"]
    # Relative paths (a manual_dir given as one) count once the first of their column exist here.
    monkeypatch.chdir(tmp_path)
    rel = plan_of([dataclasses.replace(r, path=os.path.relpath(r.path)) for r in records])
    before = _doc(rel)
    os.utime(paths[5], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert resume.differences(before, _doc(rel)) == [
        f"split train: input files changed size or modification time (the inputs of shard {where} of 4)"]
