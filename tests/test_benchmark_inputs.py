"""The benchmark's replicated inputs (`inputs.hmdb51_replicated_plan`, `fire_replicated_plan`): hard links of
generated clips and frames under new names, with their split lines and labels rows, so a larger build decodes
real files without writing as many."""

from __future__ import annotations

import csv
import json
import os

from vidvol.testing import samples

from bench_modules import bench_module

inputs = bench_module("common/inputs")


def test_hmdb51_replicas_are_links_with_their_split_lines(tmp_path):
    source, root = str(tmp_path / "src"), str(tmp_path / "rep")
    samples.write_hmdb51_layout(source, classes=samples.HMDB51_CLASSES[:2], videos_per_class=3, num_frames=(4, 6),
                                height=32, width=48, splits=(1,))
    with open(os.path.join(source, inputs.STAMP), "w", encoding="utf-8") as f:  # as write_inputs stamps a set
        json.dump({"kind": "hmdb51", "test": 1}, f)
    plan = inputs.hmdb51_replicated_plan(root, source, times=3)
    assert inputs.write_inputs([plan]) == [True] and plan.cached
    for subset in ("train", "test"):
        want = inputs.hmdb51_split_videos(source, 1, subset)
        got = inputs.hmdb51_split_videos(root, 1, subset)
        assert len(got) == 3 * len(want) > 0
        by_name = {os.path.basename(p): p for p, _ in want}
        for path, class_name in got:
            name = os.path.basename(path)
            original = by_name[name.rsplit("_r", 1)[0] + ".avi"]
            assert os.path.samefile(path, original) and class_name in path
    assert inputs.write_inputs([inputs.hmdb51_replicated_plan(root, source, times=3)]) == [False]  # kept


def test_fire_replicas_take_the_experiments_in_turn(tmp_path):
    source, root = str(tmp_path / "src"), str(tmp_path / "rep")
    inputs.write_inputs([inputs.fire_plan(source, experiments=2, frames=3, height=24, width=40)])
    inputs.write_inputs([inputs.fire_replicated_plan(root, source, experiments=5)])
    with open(os.path.join(root, "labels.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["experiment"] for r in rows] == [f"exp_{e:03d}" for e in range(5) for _ in range(3)]
    originals = {(r["experiment"], r["frame"].rsplit("/", 1)[1]): r for r in csv.DictReader(
        open(os.path.join(source, "labels.csv"), newline="", encoding="utf-8"))}
    for r in rows:
        e = int(r["experiment"][4:])
        o = originals[(f"exp_{e % 2:03d}", r["frame"].rsplit("/", 1)[1])]
        assert (r["hrr"], r["time"]) == (o["hrr"], o["time"])
        assert os.path.samefile(os.path.join(root, r["frame"]), os.path.join(source, o["frame"]))
