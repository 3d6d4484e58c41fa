"""The cluster section's driver at scale: a build's driver-side work for 10k / 100k / 1M sources."""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MIB = 2**20
# hmdb51's `_estimated_example_bytes` for its 16x224x224 geometry (16 frames, 224x224 JPEG at ~10:1)
# and its config's 128 MiB shard cap: a Kinetics build at that geometry gets ~1,800 shards per 1M videos.
KINETICS_EXAMPLE_BYTES = 16 * 224 * 224 * 3 // 10
KINETICS_MAX_SHARD = 128 * MIB
KINETICS_CLASSES = 700


def synthetic_sources(n: int, root: str = "/data/kinetics700/train") -> list[tuple[str, Any]]:
    """n hmdb51-style (source id, ClipSource) pairs with Kinetics-like ids, 700 labels."""
    from vidvol.builders.transforms import clips

    out = []
    for i in range(n):
        label = f"label_{i % KINETICS_CLASSES:03d}"
        start = (i * 7) % 600
        video = f"{(i * 2654435761) % 16**11:011x}_{start:06d}_{start + 10:06d}"  # bijective for i < 2**44
        out.append((f"{label}/{video}", clips.ClipSource(
            path=f"{root}/{label}/{video}.mp4", key=f"{label}/{video}",
            features={"label": label, "video_id": video}, origin=f"train.csv:{i + 2}")))
    return out


def _shard_len(refs: Sequence[Any], index: int) -> int:
    return refs[index].num_sources


def beam_submit(refs: Sequence[Any], split_times: dict[str, float]) -> dict[str, Any]:
    """What `pipeline.run()` does on the driver on Beam's DaskRunner before a worker gets a task; times each step."""
    import apache_beam as beam
    import dask
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dask.dask_runner import DaskOptions
    from apache_beam.runners.dask.overrides import dask_overrides
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from distributed.protocol.serialize import serialize, to_serialize
    from vidvol.beam_jobs import dask_runner, runners
    from vidvol.builders.writer import shard_writer

    def step(name: str, start: float) -> float:
        split_times[name] = round(time.monotonic() - start, 3)
        _note_rss(split_times, name)
        return time.monotonic()

    t = time.monotonic()
    runner = dask_runner.DaskRunner()
    options = PipelineOptions([f"--runner={runners.DASK_RUNNER}", f"--dask_npartitions={len(refs)}"])
    pipeline = beam.Pipeline(runner=runner, options=options)
    shard_writer.shard_pipeline(pipeline, len(refs), beam.Map(functools.partial(_shard_len, tuple(refs))))
    t = step("submit.beam_construct", t)
    proto = pipeline.to_runner_api(use_fake_coders=True)  # pipeline.run(): a non-FnAPI runner gets a round trip
    proto_bytes = proto.ByteSize()
    t = step("submit.to_runner_api", t)
    pipeline = beam.Pipeline.from_runner_api(proto, runner, options)
    del proto
    t = step("submit.from_runner_api", t)
    pipeline.replace_all(dask_overrides())
    bag_kwargs = DaskOptions._extract_bag_kwargs(
        options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True))
    visitor = runner.to_dask_bag_visitor(bag_kwargs)
    pipeline.visit(visitor)
    graph = dask.optimize(list(visitor.bags.values())[-1])
    t = step("submit.dask_translate", t)
    expr = FinalizeCompute(collections_to_expr(list(graph), True)).optimize()
    header, frames = serialize(to_serialize(expr), on_error="raise")
    graph_bytes = sum(len(memoryview(f).cast("B")) for f in frames)
    step("submit.graph_serialize", t)
    return {"runner_api_proto_mib": round(proto_bytes / MIB, 1), "graph_mib": round(graph_bytes / MIB, 1),
            "npartitions": bag_kwargs.get("npartitions")}


def _note_rss(times: dict[str, Any], phase: str) -> float:
    """Notes the peak RSS so far (VmHWM, `measure.peak_rss_mib`) after `phase` (MiB) and returns it."""
    from common import measure

    peak = times.setdefault("_maxrss", {})[phase] = round(measure.peak_rss_mib(), 1)
    return peak


def measure_driver(n: int, work: str) -> dict[str, Any]:
    """The driver's part of a build over n synthetic sources, phase by phase (run it in a fresh process)."""
    import cloudpickle
    import psutil
    from apache_beam.internal import pickler

    # shard_writer too: what the build's driver has imported before its first phase (rss_after_imports)
    from vidvol.builders.writer import plan, results, shard_writer  # noqa: F401

    rss_imports = psutil.Process().memory_info().rss
    times: dict[str, Any] = {}
    _note_rss(times, "imports")
    shard_dir = os.path.join(work, f"shards_{n}")
    shutil.rmtree(shard_dir, ignore_errors=True)
    os.makedirs(shard_dir)
    split = "train"

    t = time.monotonic()
    sources = synthetic_sources(n)
    times["sources"] = round(time.monotonic() - t, 3)
    _note_rss(times, "sources")

    t = time.monotonic()
    num_shards = plan.num_shards_for(len(sources), KINETICS_EXAMPLE_BYTES, max_shard_size=KINETICS_MAX_SHARD)
    planned = lambda i, k: os.path.join(shard_dir, f"kinetics-{split}.tfrecord-{i:05d}-of-{k:05d}.partial")
    tasks = plan.plan_shards(split, sources, num_shards, planned)
    times["plan"] = round(time.monotonic() - t, 3)
    _note_rss(times, "plan")

    # The driver writes every shard's sources to the build's plan file; the pipeline carries small refs.
    t = time.monotonic()
    plan_path = os.path.join(shard_dir, plan.PLAN_NAME)
    refs = plan.write_plan(tasks, plan_path)
    times["plan_file"] = round(time.monotonic() - t, 3)
    _note_rss(times, "plan_file")
    plan_mib = os.path.getsize(plan_path) / MIB
    loaded = refs[len(refs) // 2].load()  # what a worker reads back: its shard's sources, equal to the plan's
    assert loaded == tasks[len(refs) // 2], "the plan file did not give back the planned shard"

    submitted = beam_submit(refs, times)
    os.remove(plan_path)

    # The workers' side (not the driver's): one empty shard and one sidecar per task, as WriteShardFn leaves them.
    t = time.monotonic()
    for task in tasks:
        open(task.path, "wb").close()
        with open(task.path + ".info.json", "w", encoding="utf-8") as f:
            json.dump({"split": split, "index": task.index, "path": task.path, "keys": [str(s[0]) for s in task.sources],
                       "num_bytes": 0, "skips": []}, f, indent=1, sort_keys=True)
    times["workers_write_sidecars"] = round(time.monotonic() - t, 3)

    t = time.monotonic()
    final = lambda i, k: os.path.join(shard_dir, f"kinetics-{split}.tfrecord-{i:05d}-of-{k:05d}")
    result = results.collect_split(split, tasks, final)
    times["collect"] = round(time.monotonic() - t, 3)
    peak_driver = _note_rss(times, "collect")  # one reading: a second one could see a background thread's later growth

    # The elements pickled on their own (last, so that their buffers do not count in the driver's peak).
    t = time.monotonic()
    beam_pickled = len(pickler.dumps(refs))
    times["pickle.beam_pickler"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    cloud_pickled = len(cloudpickle.dumps(refs))
    times["pickle.cloudpickle"] = round(time.monotonic() - t, 3)
    _note_rss(times, "pickle")

    read_back = sum(result.shard_lengths)
    keys_match = sorted(result.keys) == sorted(s[0] for s in sources)
    leftover = [p for p in os.listdir(shard_dir) if p.endswith((".info.json", ".partial"))]
    maxrss = times.pop("_maxrss")
    driver_phases = ["sources", "plan", "plan_file"] + [k for k in times if k.startswith("submit.")] + ["collect"]
    out = {
        "entries": n,
        "shards": num_shards,
        "examples_read_back": read_back,
        "shards_read_back": len(result.shard_paths),
        "keys_match": keys_match,
        "leftover_files": len(leftover),
        "times_s": times,
        "driver_total_s": round(sum(times[k] for k in driver_phases), 3),
        "driver_phases": driver_phases,
        "pickled_mib": {"beam_pickler": round(beam_pickled / MIB, 1), "cloudpickle": round(cloud_pickled / MIB, 1)},
        "plan_file_mib": round(plan_mib, 1),
        **submitted,
        "rss_after_imports_mib": round(rss_imports / MIB, 1),
        "maxrss_after_mib": maxrss,
        "peak_rss_mib": round(peak_driver, 1),  # peak RSS once the driver's phases are done
    }
    shutil.rmtree(shard_dir, ignore_errors=True)
    return out


def run_driver(n: int, work: str, timeout: float) -> dict[str, Any]:
    """measure_driver(n) in a fresh process (this script as a job), so the peak RSS is this size's alone."""
    from common import jobs

    print(f"[cluster] driver scale: {n:,} sources", flush=True)
    r, cost = jobs.json_job(__file__, {"n": n, "work": work}, work, f"driver_{n}", timeout)
    others = cost["others"]  # cores other processes kept busy meanwhile (the job uses ~1)
    r.update(process_wall_s=round(cost["wall"], 1), cpu_s=round(cost["cpu"], 2), other_cores_busy=round(others, 2))
    t = r["times_s"]
    print(f"[cluster]   {n:,} sources, {r['shards']} shards: driver {r['driver_total_s']:.1f} s ("
          + ", ".join(f"{k} {t[k]:.2f}" for k in r["driver_phases"]) + f"), peak RSS {r['peak_rss_mib']:.0f} MiB "
          f"(after imports {r['rss_after_imports_mib']:.0f}); pickler {t['pickle.beam_pickler']:.2f} s, cloudpickle "
          f"{t['pickle.cloudpickle']:.2f} s; read back {r['examples_read_back']:,}; others {others:.2f} cores", flush=True)
    return r


def driver_curve(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The driver-scale rows and how each phase grows from one size to the next (exponent of n)."""
    growth = []
    for a, b in zip(rows, rows[1:]):
        ratio = b["entries"] / a["entries"]
        g = {"from": a["entries"], "to": b["entries"]}
        for k in a["driver_phases"] + ["driver_total_s"]:
            ta = a["times_s"].get(k, a.get(k)) if k != "driver_total_s" else a["driver_total_s"]
            tb = b["times_s"].get(k, b.get(k)) if k != "driver_total_s" else b["driver_total_s"]
            # exponent e in time ~ n^e (1 = linear); phases under 50 ms are noise
            g[k] = round(math.log(tb / ta) / math.log(ratio), 2) if ta >= 0.05 and tb > 0 else None
        growth.append(g)
    return {"example_bytes": KINETICS_EXAMPLE_BYTES, "max_shard_mib": KINETICS_MAX_SHARD // MIB,
            "rows": rows, "growth_exponents": growth}



# Why a driver phase costs what it does (the function that spends the time), for the report's notes.
PHASE_WHY = {
    "sources": "building one frozen `ClipSource` dataclass (and its features dict) per video in Python",
    "plan": "`plan.plan_shards` -> `stable_order`: one sha256 per source and a sort (n log n), plus a "
            "`collections.Counter` over the ids for the duplicate check",
    "plan_file": "`plan.write_plan`: every shard's sources cloudpickled into the build's plan file, one "
                 "record per shard, so that the pipeline carries one small `ShardRef` per shard instead of the sources",
    "submit.beam_construct": "`beam.Create(range(shards))` and the DoFn holding one `ShardRef` per shard: "
                             "`Create.expand` encodes the shard numbers, the DoFn is pickled once",
    "submit.to_runner_api": "`Pipeline.run()` on a non-FnAPI runner (DaskRunner.is_fnapi_compatible() is False) "
                            "round-trips the pipeline through the runner API: `Create.to_runner_api_pickled` and the "
                            "pickled DoFn of Create's `FlatMap(lambda _: serialized_values)` each carry every encoded "
                            "element, and `apache_beam.internal.pickler.dumps` compresses them with bz2 at level 9 "
                            "(`cloudpickle_pickler.dumps`): the bz2 compression is most of it",
    "submit.from_runner_api": "the round trip's way back: bz2 decompression and unpickling of both copies",
    "submit.dask_translate": "the DaskRunner's `Create` -> `dask.bag.from_sequence(items, npartitions)`, which calls "
                             "`dask.tokenize` on the whole sequence: a deterministic hash that walks every ShardTask, "
                             "every (id, ClipSource) pair and every features dict field by field "
                             "(`dask.tokenize._normalize_dataclass`)",
    "submit.graph_serialize": "distributed's `serialize(to_serialize(expr))` of the graph `Client.compute` sends to "
                              "the scheduler (the elements pickled once more)",
    "collect": "`results.collect_split`: one JSON read, remove and rename per shard, then the keys concatenated "
               "and checked for duplicates",
}


def driver_notes(d: dict[str, Any]) -> list[str]:
    """Where the driver's time goes at the largest size, with growth exponents and the functions responsible."""
    rows = d["rows"]
    big = max(rows, key=lambda r: r["entries"])
    t = big["times_s"]
    growth = d["growth_exponents"][-1] if d.get("growth_exponents") else {}
    lines = []
    total = big["driver_total_s"] or 1e-9
    for k in sorted(big["driver_phases"], key=lambda k: -t[k])[:4]:
        e = growth.get(k)
        shape = "" if e is None else f", growth exponent {e:.2f} ({'super-linear' if e > 1.15 else 'linear'})"
        lines.append(f"{big['entries']:,} sources: {k} {t[k]:.1f} s ({t[k] / total:.0%} of the driver{shape}): "
                     f"{PHASE_WHY.get(k, '')}.")
    lines.append(f"{big['entries']:,} sources: peak RSS {big['peak_rss_mib']:.0f} MiB ({big['rss_after_imports_mib']:.0f} "
                 "after imports); largest rises of the peak: "
                 + ", ".join(f"{name} +{rise:.0f} MiB" for rise, name in _rss_rises(big)) + ".")
    return lines


def _rss_rises(row: dict[str, Any], top: int = 3) -> list[tuple[float, str]]:
    """The driver phases that raised the peak RSS most: [(MiB, phase)], largest first."""
    steps = [(k, v) for k, v in row["maxrss_after_mib"].items() if k != "pickle"]  # stand-alone pickles: not the driver
    return sorted(((b[1] - a[1], b[0]) for a, b in zip(steps, steps[1:])), reverse=True)[:top]


def driver_rss_note(row: dict[str, Any]) -> str:
    """RSS after imports and the phases that raised the peak most, of a driver-scale row."""
    return (f"{row['rss_after_imports_mib']:.0f} MiB after imports; the peak rose most in "
            + ", ".join(f"{name} (+{rise:.0f} MiB)" for rise, name in _rss_rises(row)))


def driver_note(row: dict[str, Any]) -> str:
    """The two slowest driver phases of a driver-scale row."""
    t = row["times_s"]
    top = sorted(row["driver_phases"], key=lambda k: -t[k])[:3]
    return "slowest phases: " + ", ".join(f"{k} {t[k]:.1f} s" for k in top)


if __name__ == "__main__":  # `python benchmarks/common/dask_driver.py JOB.json RESULT.json` (started by `run_driver`)
    from common import jobs

    sys.exit(jobs.job_main(__file__, lambda job: measure_driver(job["n"], job["work"])))
