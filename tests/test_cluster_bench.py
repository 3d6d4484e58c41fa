"""`benchmarks/sections/cluster.py`: the driver-scale measurement at a tiny size, and the parts its numbers rest on.

The benchmark is a repository tool run as a script; here it runs as `make bench` runs it (a
subprocess, each size in its own job process). Never asserts a speed: only that every phase is
measured, finite, and that the counts read back from the workers' sidecars equal the sources.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import time

import pytest

from vidvol.builders.writer import plan

pytestmark = pytest.mark.slow

from bench_modules import bench_module

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
SIZE = 2000




dask_builds = bench_module("common/dask_builds")
dask_driver = bench_module("common/dask_driver")


@pytest.fixture(scope="module")
def driver_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster_bench")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sections" / "cluster.py"), "--only", "driver", "--sizes", str(SIZE),
                           "--out", str(out)], capture_output=True, text=True, timeout=120, env=ENV, cwd=str(out))
    assert proc.returncode == 0, f"cluster.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return out, json.loads((out / "cluster.json").read_text()), time.monotonic() - start


def test_driver_scale_counts_read_back_equal_the_sources(driver_run):
    out, section, _ = driver_run
    (row,) = section["driver"]["rows"]
    expected_shards = plan.num_shards_for(SIZE, dask_driver.KINETICS_EXAMPLE_BYTES,
                                                 max_shard_size=dask_driver.KINETICS_MAX_SHARD)
    assert row["entries"] == SIZE
    assert row["examples_read_back"] == SIZE and row["keys_match"] is True
    assert row["shards"] == row["shards_read_back"] == expected_shards
    assert row["leftover_files"] == 0  # collect_split removed every sidecar and renamed every .partial
    assert not (out / "cluster" / "driver" / f"shards_{SIZE}").exists()


def test_driver_scale_output_structure(driver_run):
    out, section, elapsed = driver_run
    (row,) = section["driver"]["rows"]
    phases = ["sources", "plan", "plan_file", "submit.beam_construct", "submit.to_runner_api", "submit.from_runner_api",
              "submit.dask_translate", "submit.graph_serialize", "collect"]
    assert row["driver_phases"] == phases
    times = row["times_s"]
    assert set(phases) | {"pickle.beam_pickler", "pickle.cloudpickle", "workers_write_sidecars"} <= set(times)
    assert all(isinstance(t, float) and math.isfinite(t) and t >= 0 for t in times.values())
    assert math.isclose(row["driver_total_s"], sum(times[k] for k in phases), abs_tol=0.01)
    assert row["driver_total_s"] > 0 and row["process_wall_s"] >= row["driver_total_s"]
    assert row["peak_rss_mib"] >= row["rss_after_imports_mib"] > 0
    assert list(row["maxrss_after_mib"]) == ["imports"] + phases + ["pickle"]
    assert row["peak_rss_mib"] == row["maxrss_after_mib"]["collect"]
    assert row["pickled_mib"]["cloudpickle"] >= 0 and row["npartitions"] == row["shards"]
    assert section["driver"]["growth_exponents"] == []  # one size: no curve
    assert [t["name"] for t in section["targets"]] == [f"driver time, {SIZE:,} sources (no decoding)",
                                                       f"driver peak RSS, {SIZE:,} sources"]
    assert all(isinstance(t["pass"], bool) for t in section["targets"])
    assert section["driver_notes"] and "scaling" not in section and "memory" not in section
    text = (out / "CLUSTER.md").read_text()
    assert "### Driver at scale" in text and f"{SIZE:,}" in text
    assert row["plan_file_mib"] > 0  # the sources went to the plan file, not into the pipeline


def test_attempt_watch_follows_attempts_through_the_rename(tmp_path):
    shard = tmp_path / "fire_hrr-train.tfrecord-00000-of-00002.partial"
    watch = dask_builds.AttemptWatch(str(tmp_path))
    attempt = tmp_path / (shard.name + ".0123456789ab.tmp")
    attempt.write_bytes(b"x")
    watch.poll()
    os.utime(attempt, (time.time() + 2, time.time() + 2))
    watch.poll()
    attempt.rename(shard)
    for other in (".info.json", ".info.json.0123456789ab.tmp", ".progress"):  # sidecars, progress records
        (tmp_path / (shard.name + other)).write_text("{}")
    watch.poll()
    assert list(watch.opened) == [str(shard)]
    first = watch.first_open
    assert watch.written[str(shard)] >= first + 1.5
    assert 0.9 < watch.shards_in_flight(watch.written[str(shard)]) <= 1.0


def test_scaling_summary_speedups():
    def run(workers, write_s, wall_s):
        steps = {"cluster_start": 1.0, "writing_phase": write_s}
        return {"examples": 8, "shards": 4, "examples_per_s": 8 / write_s, "build_examples_per_s": 8 / (write_s + 2),
                "e2e_examples_per_s": 8 / wall_s, "write_s": write_s, "wall_s": wall_s, "build_s": write_s + 2,
                "shards_in_flight": float(workers), "cores_used": 1.0, "other_cores_busy": 0.0, "worker_peak_mib": 500.0,
                "steps_s": steps, "worker_cpu_s": {"scheduler": 1.0, "worker-0": 4.0 * workers},
                "shard_opens_after_submit_s": []}

    s = dask_builds.summarize_scaling("fire_hrr/x", {1: [run(1, 8.0, 20.0), run(1, 10.0, 22.0)],
                                                        2: [run(2, 4.0, 16.0), run(2, 6.0, 18.0)]})
    assert math.isclose(s["speedup"], statistics_median([8 / 4, 8 / 6]) / statistics_median([1.0, 0.8]))
    assert [p["speedup"] for p in s["pairs"]] == [2.0, round((8 / 6) / 0.8, 3)]
    assert s["overhead_s"] == {"1": 12.0, "2": 12.0}
    assert s["workers_1"]["worker_cpu_s_per_example"] == 0.5 and s["workers_2"]["worker_cpu_s_per_example"] == 1.0
    assert s["quietest_pair"] == s["pairs"][0] and len(s["notes"]) == 2
    assert s["workers_2"]["steps_s"]["writing_phase"] == 5.0


def statistics_median(values):
    import statistics

    return statistics.median(values)
