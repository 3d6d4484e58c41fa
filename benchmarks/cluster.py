"""Builds on Beam's DaskRunner: 1 vs 2 workers, worker peak RSS vs size, and the driver at Kinetics scale.

    python benchmarks/cluster.py --out DIR            # full: fire_hrr/full_161x540x960, 3 alternating runs, 10k/100k/1M
    python benchmarks/cluster.py --quick --out DIR    # tiny sizes, one run (smoke)
    python benchmarks/cluster.py --only driver --sizes 2000 --out DIR

`make bench` runs it as the "cluster" section of `run.py` (on the inputs and manual folders that
run.py's builds already wrote); standalone it writes its own fire_hrr inputs (`inputs.fire_plan`,
reused when `--inputs` points at a benchmark run's inputs folder) and DIR/cluster.json + DIR/CLUSTER.md.

1. Scaling: `fire_hrr/CONFIG` built with `vidvol.beam_jobs.build.build(runner="dask")` on a fresh
   `LocalDaskCluster` of 1, then 2 single-threaded worker processes, alternating, same inputs. Each
   build is its own Python process (`--job build`), so end to end counts what a user waits for:
   interpreter + imports, cluster start, the build, cluster stop. The writing phase is timed with a
   shard watch as in builds.py (first shard file opened -> last shard written), from the attempt
   files (`<shard>.partial.<id>.tmp`) the workers open; the build is also cut into driver-side
   steps by timestamps taken around the builder's `_plan` / `_run_pipeline` and the DaskRunner's
   `run_pipeline` (wrapped in the job process only; library code unchanged).
2. Worker memory: the RSS of every dask worker process (and of the scheduler and the driver) is
   polled with psutil (`fire_memory.TreeMonitor`) during builds of N and 4N experiments.
3. Driver scale (no decoding, no cluster): for 10k / 100k / 1M synthetic hmdb51-style
   `clips.ClipSource` records (Kinetics-700 is ~650k videos), each size in a fresh process: the
   source list, shard planning (`num_shards_for` + `plan_shards`), writing the shard plan file
   (`writer.plan.write_plan`: the sources go to a file, the pipeline carries one small ShardRef per
   shard; a worker reads its shard's byte range back), what `pipeline.run()` does on the driver before a
   Dask worker gets anything (Beam pipeline construction, Beam's runner-API round trip, the
   DaskRunner's translation to a dask bag, distributed's serialization of the graph) and reading
   the workers' counts back (`collect_split` over synthetic `.info.json` sidecars). Time per phase
   and the process's peak RSS (VmHWM) after each.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import json
import logging
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 2**20
GIB = 2**30
TARGET_SPEEDUP = 1.7
TARGET_WORKER_GIB = 2.0
TARGET_FLAT = 0.10
TARGET_DRIVER_S = 60.0
TARGET_DRIVER_GIB = 2.0
DRIVER_TARGET_SIZE = 1_000_000
# hmdb51's `_estimated_example_bytes` for its 16x224x224 geometry (16 frames, 224x224 JPEG at ~10:1)
# and its config's 128 MiB shard cap: a Kinetics build at that geometry gets ~1,800 shards per 1M videos.
KINETICS_EXAMPLE_BYTES = 16 * 224 * 224 * 3 // 10
KINETICS_MAX_SHARD = 128 * MIB
KINETICS_CLASSES = 700


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one mode of the cluster section."""

    mode: str
    fire_config: str
    fire: dict[str, Any]  # inputs.fire_plan arguments (standalone runs)
    runs: int  # 1-worker and 2-worker builds each (alternating)
    scaling_experiments: int  # experiments of the scaling inputs (the first ones of the fire inputs) ...
    scaling_repeat: int  # ... each listed this many times (same frames, new names)
    memory_counts: tuple[int, int]  # N and 4N experiments (4N may be the scaling inputs: N listed 4 times)
    driver_sizes: tuple[int, ...]
    interval: float = 0.1  # RSS polling period (s)
    job_timeout: float = 1800.0  # a build or driver measurement running longer is killed and reported


FULL = Settings(
    mode="full", fire_config="full_161x540x960", fire=dict(experiments=16, frames=161, height=540, width=960),
    # Memory at 16 and 64 experiments (64 = the scaling inputs): each worker past its first examples, so the
    # comparison is of dataset size, not of a worker's first example against its fourth (allocator warm-up).
    runs=3, scaling_experiments=16, scaling_repeat=4, memory_counts=(16, 64),
    driver_sizes=(10_000, 100_000, 1_000_000),
)
QUICK = Settings(
    mode="quick", fire_config="161x135x240", fire=dict(experiments=2, frames=161, height=135, width=240),
    runs=1, scaling_experiments=2, scaling_repeat=1, memory_counts=(1, 2), driver_sizes=(2_000,), job_timeout=600.0,
)

METHOD = [
    "Dask builds: `vidvol.beam_jobs.build.build(NAME/CONFIG, runner='dask', beam_flags=[--dask_client_address])` on a "
    "fresh `LocalDaskCluster(n_workers)` (scheduler + single-threaded worker processes on 127.0.0.1, no nanny), each "
    "build in its own Python process; 1- and 2-worker builds alternate. *Writing phase*: first shard attempt file "
    "opened -> last shard written (shard watch every 0.05 s); *end to end*: the build process's wall time "
    "(interpreter, imports, cluster start, build, cluster stop).",
    "Worker memory: psutil RSS of the driver, the scheduler and every dask worker process every 0.1 s "
    "(`fire_memory.TreeMonitor`).",
    "Driver scale: synthetic hmdb51-style `ClipSource` records (Kinetics-like paths, 700 labels), shards sized as "
    "hmdb51's 16x224x224 config (~235 KiB per example, 128 MiB shards); each size in a fresh process, peak RSS "
    "(VmHWM) after each phase. *submit* is what `pipeline.run()` does on the driver with the DaskRunner before any task "
    "runs: Beam pipeline construction (Create encodes the shard numbers, the DoFn holds one `ShardRef` per shard, "
    "the sources being in the plan file the driver writes first, *plan_file*), Beam's runner-API round trip (pickles, bz2 "
    "level 9), the DaskRunner's translation (`dask.bag.from_sequence` tokenizes every element), and distributed's "
    "serialization of the graph (`serialize(to_serialize(expr))`, as `Client.compute`). Shards are empty files; "
    "*collect* is `writer.results.collect_split` over one `.info.json` per shard, as the workers write them.",
]


# --------------------------------------------------------------------------------------------
# Shard watch (worker attempt files) and process monitor


class AttemptWatch(threading.Thread):
    """Polls data_dir for shard files: workers' attempts (`*.partial.<id>.tmp`) and renamed `*.partial`.

    Keyed by shard (the attempt suffix stripped): when each shard's first file appeared, when it last grew.
    The workers' other files next to a shard (`.partial.info.json` sidecars, `.partial.progress`
    records, their own `.<id>.tmp` attempts) are not shards and are left out.
    """

    _ATTEMPT = re.compile(r"\.[0-9a-f]{12}\.tmp$")

    def __init__(self, data_dir: str, interval: float = 0.05):
        super().__init__(daemon=True)
        self.data_dir = data_dir
        self.interval = interval
        self.opened: dict[str, float] = {}
        self.written: dict[str, float] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.poll()
            self._halt.wait(self.interval)
        self.poll()

    def poll(self) -> None:
        """Records new shard files and the latest write of each."""
        now = time.time()
        for path in glob.glob(os.path.join(self.data_dir, "**", "*.partial*"), recursive=True):
            shard = self._ATTEMPT.sub("", path)
            if not shard.endswith(".partial"):
                continue
            try:
                mtime = os.path.getmtime(path)
            except OSError:  # renamed meanwhile
                continue
            self.opened.setdefault(shard, now)
            self.written[shard] = max(self.written.get(shard, 0.0), mtime)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    @property
    def first_open(self) -> float | None:
        return min(self.opened.values(), default=None)

    def shards_in_flight(self, end: float) -> float | None:
        """Mean number of shards being written at once between the first opening and `end`."""
        first = self.first_open
        if first is None or end <= first:
            return None
        return sum(max(0.0, self.written.get(p, t) - t) for p, t in self.opened.items()) / (end - first)


class _Stamps:
    """Timestamps (time.time()) of driver-side steps of a build, taken by wrappers around library methods."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, before: str, after: str) -> None:
        original = getattr(owner, name)
        stamps = self.t

        def wrapped(*args, **kwargs):
            stamps.setdefault(before, time.time())
            try:
                return original(*args, **kwargs)
            finally:
                stamps[after] = time.time()

        setattr(owner, name, wrapped)


# --------------------------------------------------------------------------------------------
# One build on a fresh LocalDaskCluster (runs in its own process: `--job build`)


def _build_job(job: dict[str, Any]) -> dict[str, Any]:
    """Starts a cluster, builds `job['dataset']` on it under the RSS monitor and the shard watch; returns timings."""
    started = psutil_create_time()
    import fire_memory  # pylint: disable=g-import-not-at-top
    import psutil  # pylint: disable=g-import-not-at-top

    from vidvol.beam_jobs import build, dask_cluster, dask_runner  # pylint: disable=g-import-not-at-top
    from vidvol.builders import dataset_builder  # pylint: disable=g-import-not-at-top

    imported = time.time()
    # The workers get the driver's sys.path on their PYTHONPATH: keep this folder's scripts off it.
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != HERE]
    stamps = _Stamps()
    stamps.wrap(dataset_builder.StreamingBeamBuilder, "_plan", "plan_start", "plan_end")
    stamps.wrap(dataset_builder.StreamingBeamBuilder, "_run_pipeline", "pipeline_start", "pipeline_end")
    stamps.wrap(dask_runner.DaskRunner, "run_pipeline", "submit_start", "submitted")

    data_dir = job["data_dir"]
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    monitor = fire_memory.TreeMonitor(os.getpid(), job["interval"])
    monitor.start()
    watch = AttemptWatch(data_dir)
    watch.start()
    worker_cpu: dict[str, float | None] = {}
    try:
        t0 = time.time()
        with dask_cluster.LocalDaskCluster(n_workers=job["workers"], log_dir=job["log_dir"]) as cluster:
            up = time.time()
            pids = cluster.process_pids()
            result = build.build(job["dataset"], manual_dir=job["manual_dir"], data_dir=data_dir, runner="dask",
                                 beam_flags=[f"--dask_client_address={cluster.address}"], overwrite=True,
                                 num_shards=job.get("num_shards"))
            built = time.time()
            for name, pid in pids.items():
                try:
                    t = psutil.Process(pid).cpu_times()
                    worker_cpu[name] = round(t.user + t.system, 2)
                except psutil.NoSuchProcess:
                    worker_cpu[name] = None
        stopped = time.time()
    finally:
        watch.stop()
        monitor.stop()
    examples = sum(s["examples"] for s in result.splits.values())
    shards = glob.glob(os.path.join(result.data_path, "*.tfrecord-*"))
    last = max(os.path.getmtime(p) for p in shards)
    first = watch.first_open
    by_pid = {pid: name for name, pid in pids.items()}
    workers = {by_pid[pid]: p["peak_rss"] for pid, p in monitor.peaks.items() if by_pid.get(pid, "").startswith("worker")}
    scheduler = [p["peak_rss"] for pid, p in monitor.peaks.items() if by_pid.get(pid) == "scheduler"]
    driver = [p["peak_rss"] for p in monitor.peaks.values() if p["kind"] == "driver"]
    s = stamps.t
    rel = lambda a, b: round(b - a, 2) if a is not None and b is not None else None  # noqa: E731
    opens = sorted(watch.opened.values())
    return {
        "workers": job["workers"],
        "examples": examples,
        "shards": sum(x["shards"] for x in result.splits.values()),
        "skipped": sum(x["skipped_inputs"] for x in result.splits.values()),
        "dataset_mib": round(sum(x["num_bytes"] for x in result.splits.values()) / MIB, 2),
        "write_s": round(max(last - first, 1e-3), 2) if first else None,
        "shards_in_flight": round(watch.shards_in_flight(last), 2) if first else None,
        "build_s": round(built - up, 2),  # the build() call on a running cluster
        "steps_s": {  # where the time goes, in order (process start -> cluster stopped)
            "interpreter_and_imports": rel(started, imported),
            "cluster_start": rel(t0, up),
            "builder_and_split_generators": rel(up, s.get("plan_start")),
            "plan_shards": rel(s.get("plan_start"), s.get("plan_end")),
            "beam_pipeline_and_dask_graph": rel(s.get("pipeline_start"), s.get("submitted")),
            "dispatch_to_first_shard_open": rel(s.get("submitted"), first),
            "writing_phase": rel(first, last),
            "pipeline_end_after_last_write": rel(last, s.get("pipeline_end")),
            "collect_and_finish": rel(s.get("pipeline_end"), built),
            "cluster_stop": rel(built, stopped),
        },
        "shard_opens_after_submit_s": [rel(s.get("submitted"), t) for t in opens] if s.get("submitted") else [],
        "worker_cpu_s": worker_cpu,
        "worker_peaks_mib": {k: round(v / MIB, 1) for k, v in sorted(workers.items())},
        "worker_peak_mib": round(max(workers.values(), default=0) / MIB, 1),
        "scheduler_peak_mib": round(max(scheduler, default=0) / MIB, 1),
        "driver_peak_mib": round(max(driver, default=0) / MIB, 1),
        "polls": monitor.samples,
    }


def psutil_create_time() -> float:
    """When this process started (time.time() scale)."""
    import psutil  # pylint: disable=g-import-not-at-top

    return psutil.Process().create_time()


def run_build(dataset: str, manual_dir: str, work: str, tag: str, workers: int, *, interval: float = 0.1,
              num_shards: int | None = None, timeout: float = 1800.0) -> dict[str, Any]:
    """Runs one `--job build` process; returns its result plus end-to-end wall, CPU and other load."""
    from reads import busy_cpu_seconds  # pylint: disable=g-import-not-at-top

    os.makedirs(work, exist_ok=True)
    job = {"dataset": dataset, "manual_dir": os.path.abspath(manual_dir), "data_dir": os.path.join(work, f"data_{tag}"),
           "log_dir": os.path.join(work, f"dask_{tag}"), "workers": workers, "interval": interval, "num_shards": num_shards}
    shutil.rmtree(job["log_dir"], ignore_errors=True)
    job_path, result_path, log_path = (os.path.join(work, f"{tag}.{x}") for x in ("job.json", "result.json", "log"))
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    print(f"[cluster] build {dataset} from {manual_dir} on {workers} dask worker(s)", flush=True)
    busy0, start = busy_cpu_seconds(), time.monotonic()
    status, usage = _run_job(["--job", "build", job_path, result_path], log_path, timeout)
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    if status != 0:
        raise RuntimeError(f"dask build {tag} failed ({status}); log {log_path}:\n{_tail(log_path)}")
    with open(result_path, encoding="utf-8") as f:
        r = json.load(f)
    others = max(0.0, busy_cpu_seconds() - busy0 - cpu) / wall
    r.update({
        "wall_s": round(wall, 2),
        "examples_per_s": round(r["examples"] / r["write_s"], 3) if r["write_s"] else None,
        "build_examples_per_s": round(r["examples"] / r["build_s"], 3),
        "e2e_examples_per_s": round(r["examples"] / wall, 3),
        "cpu_s": round(cpu, 2), "cores_used": round(cpu / wall, 2), "other_cores_busy": round(others, 2),
    })
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(r, f, indent=1)
    st = r["steps_s"]
    print(f"[cluster]   {r['examples']} examples in {r['shards']} shards: writing {r['write_s']} s "
          f"({r['examples_per_s']} ex/s, {r['shards_in_flight']} shards in flight), build() {r['build_s']} s, end to end "
          f"{wall:.1f} s (imports {st['interpreter_and_imports']}, cluster start {st['cluster_start']}, to first shard "
          f"{st['dispatch_to_first_shard_open']} after submit, stop {st['cluster_stop']}); worker peaks "
          f"{r['worker_peaks_mib']} MiB, driver {r['driver_peak_mib']:.0f} MiB; others {others:.2f} cores", flush=True)
    return r


def _run_job(args: Sequence[str], log_path: str, timeout: float) -> tuple[int, Any]:
    """Runs this script with `args` in a fresh process (log to log_path); (exit status, rusage of its tree)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        timer = threading.Timer(timeout, _kill_tree, args=(proc.pid,))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # covers the job and the processes it reaped (scheduler, workers)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def _kill_tree(pid: int) -> None:
    """SIGKILLs a job process and every process under it (dask workers outlive a SIGTERMed driver mid-task)."""
    import psutil  # pylint: disable=g-import-not-at-top

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _tail(path: str, size: int = 4000) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-size:]
    except OSError as e:
        return f"<cannot read {path}: {e}>"


# --------------------------------------------------------------------------------------------
# 1. scaling, 2. worker memory


def _median(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize_scaling(dataset: str, runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per worker count, speed-ups (writing phase, build call, end to end), per pair, and step medians."""
    out: dict[str, Any] = {"dataset": dataset, "examples": runs[1][0]["examples"], "shards": runs[1][0]["shards"],
                           "runs_per_worker_count": len(runs[1]), "rate": "writing phase (shard watch)"}
    for w, rs in runs.items():
        steps = {k: _median([r["steps_s"] for r in rs], k) for k in rs[0]["steps_s"]}
        out[f"workers_{w}"] = {
            "examples_per_s": _median(rs, "examples_per_s"),
            "examples_per_s_runs": [r["examples_per_s"] for r in rs],
            "build_examples_per_s": _median(rs, "build_examples_per_s"),
            "e2e_examples_per_s": _median(rs, "e2e_examples_per_s"),
            "e2e_examples_per_s_runs": [r["e2e_examples_per_s"] for r in rs],
            "write_s_runs": [r["write_s"] for r in rs],
            "wall_s": _median(rs, "wall_s"),
            "build_s": _median(rs, "build_s"),
            "shards_in_flight": _median(rs, "shards_in_flight"),
            "cores_used": _median(rs, "cores_used"),
            "other_cores_busy": _median(rs, "other_cores_busy"),
            "worker_peak_mib": max(r["worker_peak_mib"] for r in rs),
            "steps_s": steps,
            "worker_cpu_s": [r["worker_cpu_s"] for r in rs],
            # CPU seconds of the worker processes (first-task imports included) per example written
            "worker_cpu_s_per_example": _median([{"v": _worker_cpu(r) / r["examples"]} for r in rs], "v"),
            "scheduler_cpu_s": _median([{"v": r["worker_cpu_s"].get("scheduler")} for r in rs], "v"),
            "shard_opens_after_submit_s": [r["shard_opens_after_submit_s"] for r in rs],
        }
    one, two = out["workers_1"], out["workers_2"]
    out["speedup"] = two["examples_per_s"] / one["examples_per_s"]
    out["build_speedup"] = two["build_examples_per_s"] / one["build_examples_per_s"]
    out["e2e_speedup"] = two["e2e_examples_per_s"] / one["e2e_examples_per_s"]
    out["pairs"] = [{"speedup": round(b["examples_per_s"] / a["examples_per_s"], 3),
                     "e2e_speedup": round(b["e2e_examples_per_s"] / a["e2e_examples_per_s"], 3),
                     "other_cores_busy": max(a["other_cores_busy"], b["other_cores_busy"])}
                    for a, b in zip(runs[1], runs[2])]
    out["quietest_pair"] = min(out["pairs"], key=lambda p: p["other_cores_busy"])
    # Fixed costs: the end-to-end time that is not the writing phase, per worker count (medians).
    out["overhead_s"] = {str(w): round(out[f"workers_{w}"]["wall_s"] - statistics.median(out[f"workers_{w}"]["write_s_runs"]), 2)
                         for w in (1, 2)}
    out["notes"] = scaling_notes(out)
    return out


def _worker_cpu(run: dict[str, Any]) -> float:
    """CPU seconds of a build's worker processes (not the scheduler)."""
    return sum(v or 0.0 for k, v in run["worker_cpu_s"].items() if k.startswith("worker"))


def scaling_notes(b: dict[str, Any]) -> list[str]:
    """Where the time of the 1- and 2-worker builds goes, from the medians."""
    one, two = b["workers_1"], b["workers_2"]

    def both(*keys: str) -> str:  # "1-worker value / 2-worker value" of the summed steps
        return " / ".join(f"{sum(st['steps_s'].get(k) or 0.0 for k in keys):.1f}" for st in (one, two))

    fixed = [sum(v or 0.0 for k, v in st["steps_s"].items() if k != "writing_phase") for st in (one, two)]
    cpu1, cpu2 = one["worker_cpu_s_per_example"] or 0.0, two["worker_cpu_s_per_example"] or 0.0
    return [
        f"Writing phase: {two['shards_in_flight'] or 0:.2f} of 2 shards in flight with 2 workers (1 worker: "
        f"{one['shards_in_flight'] or 0:.2f}), so the {b['shards']} shard tasks keep both workers busy; but the "
        f"workers spent {cpu1:.2f} CPU s per example with 1 worker and {cpu2:.2f} with 2 "
        f"({cpu2 / max(cpu1, 1e-9) - 1:+.0%}; each worker's first-task imports included): with both cores decoding "
        "and encoding JPEG, an example costs more CPU, and the scheduler (and the driver's pollers) take "
        f"{(two['scheduler_cpu_s'] or 0) / max(two['wall_s'], 1e-9):.2f}+ of a core from the two workers' cores.",
        "Outside the writing phase (medians, seconds, 1 / 2 workers): interpreter + imports "
        f"{both('interpreter_and_imports')}, cluster start {both('cluster_start')}, builder + planning + Beam pipeline "
        f"+ dask graph {both('builder_and_split_generators', 'plan_shards', 'beam_pipeline_and_dask_graph')}, graph "
        f"submitted -> first shard opened {both('dispatch_to_first_shard_open')} (the worker unpickling WriteShardFn "
        "imports vidvol and TensorFlow on its first task, then runs its setup), last write -> build() returns "
        f"{both('pipeline_end_after_last_write', 'collect_and_finish')}, cluster stop {both('cluster_stop')}: "
        f"{fixed[0]:.0f} / {fixed[1]:.0f} s that a second worker does not shorten, hence {b['e2e_speedup']:.2f}x end "
        f"to end against {b['speedup']:.2f}x in the writing phase.",
    ]


def scaling(dataset: str, manual_dir: str, work: str, runs: int, *, interval: float, timeout: float) -> dict[str, Any]:
    """1 and 2 worker builds, alternating, `runs` each."""
    results: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for i in range(runs):
        for w in (1, 2):
            results[w].append(run_build(dataset, manual_dir, work, f"scaling_w{w}_r{i}", w, interval=interval,
                                        timeout=timeout))
    out = summarize_scaling(dataset, results)
    out["runs"] = {str(w): rs for w, rs in results.items()}
    return out


def memory(dataset: str, manuals: dict[int, str], work: str, workers: int, *, interval: float,
           timeout: float) -> dict[str, Any]:
    """Builds over N and 4N experiments with `workers` workers; peak RSS of each worker, scheduler and driver."""
    import fire_memory  # pylint: disable=g-import-not-at-top

    results = {n: run_build(dataset, manual, work, f"memory_{n}", workers, interval=interval, timeout=timeout)
               for n, manual in sorted(manuals.items())}
    ok, text = fire_memory.verdict(results, max_worker_gib=TARGET_WORKER_GIB, flat_tolerance=TARGET_FLAT)
    return {"dataset": dataset, "workers": workers, "interval_s": interval, "verdict": text, "pass": ok,
            "results": {str(n): r for n, r in results.items()}}


# --------------------------------------------------------------------------------------------
# 3. Driver scale (runs in its own process: `--job driver`)


def synthetic_sources(n: int, root: str = "/data/kinetics700/train") -> list[tuple[str, Any]]:
    """n hmdb51-style (source id, ClipSource) pairs with Kinetics-like ids, 700 labels."""
    from vidvol.builders.transforms import clips  # pylint: disable=g-import-not-at-top

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
    """What `pipeline.run()` does on the driver on Beam's DaskRunner before a worker gets a task; times each step.

    The pipeline is `_run_pipeline`'s (`writer.shard_writer.shard_pipeline`: Create(shard refs) | Reshuffle |
    ParDo), with a trivial DoFn (the real one pickles the same whatever the size); options as
    `runners._dask_options` makes them (one partition per shard), without a scheduler: the steps up
    to `Client.compute` sending the graph.
    """
    import apache_beam as beam  # pylint: disable=g-import-not-at-top
    import dask  # pylint: disable=g-import-not-at-top
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=g-import-not-at-top
    from apache_beam.runners.dask.dask_runner import DaskOptions  # pylint: disable=g-import-not-at-top
    from apache_beam.runners.dask.overrides import dask_overrides  # pylint: disable=g-import-not-at-top
    from dask._expr import FinalizeCompute  # pylint: disable=g-import-not-at-top
    from dask.base import collections_to_expr  # pylint: disable=g-import-not-at-top
    from distributed.protocol.serialize import serialize, to_serialize  # pylint: disable=g-import-not-at-top

    from vidvol.beam_jobs import dask_runner, runners  # pylint: disable=g-import-not-at-top
    from vidvol.builders.writer import shard_writer  # pylint: disable=g-import-not-at-top

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
    bag_kwargs = DaskOptions._extract_bag_kwargs(  # pylint: disable=protected-access
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


def peak_rss_mib() -> float:
    """This process's peak RSS so far: VmHWM of /proc/self/status (ru_maxrss elsewhere).

    Not ru_maxrss on Linux: a process started from a big one (run.py, ~1 GiB) inherits the parent's
    high-water mark in ru_maxrss through fork + exec, VmHWM belongs to its own address space.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _note_rss(times: dict[str, Any], phase: str) -> None:
    times.setdefault("_maxrss", {})[phase] = round(peak_rss_mib(), 1)


def measure_driver(n: int, work: str, *, submit: bool = True) -> dict[str, Any]:
    """The driver's part of a build over n synthetic sources, phase by phase (run it in a fresh process)."""
    import cloudpickle  # pylint: disable=g-import-not-at-top
    import psutil  # pylint: disable=g-import-not-at-top
    from apache_beam.internal import pickler  # pylint: disable=g-import-not-at-top

    from vidvol.builders.writer import plan, results  # pylint: disable=g-import-not-at-top

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
    planned = lambda i, k: os.path.join(shard_dir, f"kinetics-{split}.tfrecord-{i:05d}-of-{k:05d}.partial")  # noqa: E731
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

    submitted: dict[str, Any] = {}
    if submit:
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
    final = lambda i, k: os.path.join(shard_dir, f"kinetics-{split}.tfrecord-{i:05d}-of-{k:05d}")  # noqa: E731
    result = results.collect_split(split, tasks, final)
    times["collect"] = round(time.monotonic() - t, 3)
    _note_rss(times, "collect")
    peak_driver = peak_rss_mib()

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


def run_driver(n: int, work: str, *, submit: bool = True, timeout: float = 1800.0) -> dict[str, Any]:
    """measure_driver(n) in a fresh process (`--job driver`), so the peak RSS is this size's alone."""
    os.makedirs(work, exist_ok=True)
    result_path, log_path = os.path.join(work, f"driver_{n}.json"), os.path.join(work, f"driver_{n}.log")
    args = ["--job", "driver", str(n), work, result_path] + ([] if submit else ["--no-submit"])
    print(f"[cluster] driver scale: {n:,} sources", flush=True)
    from reads import busy_cpu_seconds  # pylint: disable=g-import-not-at-top

    busy0, start = busy_cpu_seconds(), time.monotonic()
    status, usage = _run_job(args, log_path, timeout)
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    others = max(0.0, busy_cpu_seconds() - busy0 - cpu) / wall
    if status != 0:
        what = f"killed after {timeout:.0f} s" if status < 0 else f"exit {status}"
        raise RuntimeError(f"driver scale {n} failed ({what}); log {log_path}:\n{_tail(log_path)}")
    with open(result_path, encoding="utf-8") as f:
        r = json.load(f)
    r["process_wall_s"] = round(wall, 1)
    r["cpu_s"] = round(cpu, 2)
    r["other_cores_busy"] = round(others, 2)  # cores other processes kept busy meanwhile (the job uses ~1)
    t = r["times_s"]
    print(f"[cluster]   {n:,} sources, {r['shards']} shards: driver {r['driver_total_s']:.1f} s ("
          + ", ".join(f"{k} {t[k]:.2f}" for k in r["driver_phases"]) + f"), peak RSS {r['peak_rss_mib']:.0f} MiB "
          f"(after imports {r['rss_after_imports_mib']:.0f}); pickler {t['pickle.beam_pickler']:.2f} s, cloudpickle "
          f"{t['pickle.cloudpickle']:.2f} s; read back {r['examples_read_back']:,}; others {others:.2f} cores", flush=True)
    return r


def driver_scale(sizes: Sequence[int], work: str, *, submit: bool = True, timeout: float = 1800.0) -> dict[str, Any]:
    """run_driver for every size, plus how each phase grows from one size to the next (exponent of n)."""
    return _driver_curve([run_driver(n, work, submit=submit, timeout=timeout) for n in sizes])


def _driver_curve(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The driver-scale rows and how each phase grows from one size to the next (exponent of n)."""
    import math  # pylint: disable=g-import-not-at-top

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


# --------------------------------------------------------------------------------------------
# The section


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The cluster promises and whether this run meets them."""
    import report  # pylint: disable=g-import-not-at-top

    rows = []
    b = section.get("scaling")
    if b:
        one, two = b["workers_1"], b["workers_2"]
        rows.append(report.target(
            "dask build fire_hrr: 2 vs 1 workers (writing phase)", b["speedup"], TARGET_SPEEDUP,
            note=f"end to end {b['e2e_speedup']:.2f}x, build() on a running cluster {b['build_speedup']:.2f}x; "
                 f"quietest pair {b['quietest_pair']['speedup']:.2f}x (others {b['quietest_pair']['other_cores_busy']:.2f} "
                 f"cores); {two['shards_in_flight'] or 0:.2f} shards in flight with 2 workers, worker CPU per example "
                 f"{one['worker_cpu_s_per_example']:.2f} s (1 worker) vs {two['worker_cpu_s_per_example']:.2f} s "
                 f"(2 workers); fixed costs outside the writing phase {b['overhead_s']['1']:.0f} s / "
                 f"{b['overhead_s']['2']:.0f} s (see the notes below the table)"))
    m = section.get("memory")
    if m:
        res = m["results"]
        counts = sorted(res, key=int)
        lo, hi = res[counts[0]], res[counts[-1]]
        rows.append(report.target(f"dask build fire_hrr: worker peak RSS growth {counts[0]} -> {counts[-1]} experiments",
                                  hi["worker_peak_mib"] / max(lo["worker_peak_mib"], 1e-9) - 1, TARGET_FLAT,
                                  op="<=", unit="%"))
        rows.append(report.target("dask build fire_hrr: worst worker peak RSS",
                                  max(r["worker_peak_mib"] for r in res.values()) / 1024, TARGET_WORKER_GIB,
                                  op="<=", unit="GiB"))
    d = section.get("driver")
    if d:
        big = max(d["rows"], key=lambda r: r["entries"])
        where = f"{big['entries']:,} sources"
        rows.append(report.target(f"driver time, {where} (no decoding)", big["driver_total_s"], TARGET_DRIVER_S,
                                  op="<=", unit="s", note=_driver_note(big)))
        rows.append(report.target(f"driver peak RSS, {where}", big["peak_rss_mib"] / 1024, TARGET_DRIVER_GIB,
                                  op="<=", unit="GiB", note=_driver_rss_note(big)))
    return rows


# Why a driver phase costs what it does (the function that spends the time), for the report's notes.
PHASE_WHY = {
    "sources": "building one frozen `ClipSource` dataclass (and its features dict) per video in Python",
    "plan": "`writer.plan.plan_shards` -> `stable_order`: one sha256 per source and a sort (n log n), plus a "
            "`collections.Counter` over the ids for the duplicate check",
    "plan_file": "`writer.plan.write_plan`: every shard's sources cloudpickled into the build's plan file, one "
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
    "collect": "`writer.results.collect_split`: one JSON read, remove and rename per shard, then the keys concatenated "
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


def _driver_rss_note(row: dict[str, Any]) -> str:
    return (f"{row['rss_after_imports_mib']:.0f} MiB after imports; the peak rose most in "
            + ", ".join(f"{name} (+{rise:.0f} MiB)" for rise, name in _rss_rises(row)))


def _driver_note(row: dict[str, Any]) -> str:
    """The two slowest driver phases of a driver-scale row."""
    t = row["times_s"]
    top = sorted(row["driver_phases"], key=lambda k: -t[k])[:3]
    return "slowest phases: " + ", ".join(f"{k} {t[k]:.1f} s" for k in top)


def measure_section(work: str, settings: Settings, *, scaling_manual: str, memory_manuals: dict[int, str],
                    only: Sequence[str] = ("scaling", "memory", "driver")) -> dict[str, Any]:
    """Runs the cluster measurements (one at a time) into `work`; returns the section's document."""
    start = time.monotonic()
    s = settings
    dataset = f"fire_hrr/{s.fire_config}"
    section: dict[str, Any] = {"mode": s.mode, "method": METHOD}
    phases = {}
    if "scaling" in only:
        t = time.monotonic()
        section["scaling"] = scaling(dataset, scaling_manual, os.path.join(work, "scaling"), s.runs,
                                     interval=s.interval, timeout=s.job_timeout)
        phases["scaling"] = round(time.monotonic() - t, 1)
    if "memory" in only:
        t = time.monotonic()
        section["memory"] = memory(dataset, memory_manuals, os.path.join(work, "memory"), len(os.sched_getaffinity(0)),
                                   interval=s.interval, timeout=s.job_timeout)
        phases["memory"] = round(time.monotonic() - t, 1)
    if "driver" in only:
        t = time.monotonic()
        section["driver"] = driver_scale(s.driver_sizes, os.path.join(work, "driver"), timeout=s.job_timeout)
        section["driver_notes"] = driver_notes(section["driver"])
        phases["driver"] = round(time.monotonic() - t, 1)
    section["targets"] = targets(section)
    section["phases_s"] = phases
    section["duration_s"] = round(time.monotonic() - start, 1)
    return section


def resummarize(section: dict[str, Any]) -> dict[str, Any]:
    """Recomputes a section's summaries, notes and targets from its per-build and per-size records."""
    import fire_memory  # pylint: disable=g-import-not-at-top

    b = section.get("scaling")
    if b:
        runs = {int(w): rs for w, rs in b["runs"].items()}
        section["scaling"] = {**summarize_scaling(b["dataset"], runs), "runs": b["runs"]}
    m = section.get("memory")
    if m:
        m["pass"], m["verdict"] = fire_memory.verdict({int(n): r for n, r in m["results"].items()},
                                                      max_worker_gib=TARGET_WORKER_GIB, flat_tolerance=TARGET_FLAT)
    d = section.get("driver")
    if d:
        section["driver"] = _driver_curve(d["rows"])
        section["driver_notes"] = driver_notes(section["driver"])
    section["targets"] = targets(section)
    section["method"] = METHOD
    return section


def prepare_inputs(out: str, settings: Settings, inputs_dir: str | None = None) -> tuple[str, dict[int, str]]:
    """Standalone runs: fire inputs (reused if present), the scaling manual_dir and one per memory count."""
    import fire_memory  # pylint: disable=g-import-not-at-top
    import inputs  # pylint: disable=g-import-not-at-top
    import run  # pylint: disable=g-import-not-at-top

    s = settings
    root = os.path.join(os.path.abspath(inputs_dir or os.path.join(out, "inputs" if s.mode == "full" else "inputs_quick")),
                        "fire_hrr")
    inputs.write_inputs([inputs.fire_plan(root, **s.fire)], workers=len(os.sched_getaffinity(0)))
    labels = os.path.join(root, "labels.csv")
    manuals = {}
    repeated = s.scaling_experiments * s.scaling_repeat
    for count in sorted((set(s.memory_counts) | {s.scaling_experiments}) - ({repeated} if s.scaling_repeat > 1 else set())):
        manuals[count] = os.path.join(out, "manual", f"fire_{count}")
        fire_memory.subset_labels(labels, manuals[count], count)
    scaling_manual = os.path.join(out, "manual", f"fire_{s.scaling_experiments}_x{s.scaling_repeat}")
    run.repeat_experiments(os.path.join(manuals[s.scaling_experiments], "labels.csv"), scaling_manual, s.scaling_repeat)
    if s.scaling_repeat > 1:
        manuals[repeated] = scaling_manual
    return scaling_manual, {n: manuals[n] for n in s.memory_counts}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (and the entry of the job processes it starts)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--job", "build"]:
        with open(argv[2], encoding="utf-8") as f:
            job = json.load(f)
        logging.basicConfig(level=logging.WARNING)
        result = _build_job(job)
        with open(argv[3], "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        return 0
    if argv[:2] == ["--job", "driver"]:
        logging.basicConfig(level=logging.WARNING)
        result = measure_driver(int(argv[2]), argv[3], submit="--no-submit" not in argv)
        with open(argv[4], "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="work folder (inputs, datasets, logs, cluster.json, CLUSTER.md)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    parser.add_argument("--inputs", default=None, help="folder holding (or to hold) fire_hrr/ inputs (default OUT/inputs)")
    parser.add_argument("--only", nargs="+", choices=("scaling", "memory", "driver"), default=("scaling", "memory", "driver"))
    parser.add_argument("--runs", type=int, default=None, help="override the builds per worker count")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="override the driver-scale sizes")
    parser.add_argument("--resummarize", action="store_true",
                        help="recompute summaries, notes and targets of OUT/cluster.json and re-render; measure nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = QUICK if args.quick else FULL
    if args.runs:
        settings = dataclasses.replace(settings, runs=args.runs)
    if args.sizes:
        settings = dataclasses.replace(settings, driver_sizes=tuple(args.sizes))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.resummarize:
        with open(os.path.join(out, "cluster.json"), encoding="utf-8") as f:
            section = resummarize(json.load(f))
    else:
        scaling_manual, memory_manuals = ("", {})
        if {"scaling", "memory"} & set(args.only):
            scaling_manual, memory_manuals = prepare_inputs(out, settings, args.inputs)
        section = measure_section(os.path.join(out, "cluster"), settings, scaling_manual=scaling_manual,
                                  memory_manuals=memory_manuals, only=args.only)
    import report  # pylint: disable=g-import-not-at-top

    bad = report.finite_numbers(section)
    if bad:
        raise ValueError(f"non-finite numbers in the results: {bad[:10]}")
    report.write_json(section, os.path.join(out, "cluster.json"))
    with open(os.path.join(out, "CLUSTER.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(report.cluster_section(section)))
    print(f"[cluster] wrote {out}/cluster.json and CLUSTER.md"
          + ("" if args.resummarize else f" in {section['duration_s'] / 60:.1f} min"), flush=True)
    for t in section["targets"]:
        print(f"[cluster] {'PASS' if t['pass'] else 'MISS'} {t['name']}: {t['value']:.3g} "
              f"(target {t['op']} {t['target']:g})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
