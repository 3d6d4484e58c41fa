"""Dask builds for the cluster section: one build on a fresh `LocalDaskCluster`, timed and monitored."""

from __future__ import annotations

import glob
import os
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
MIB = 2**20


class AttemptWatch(threading.Thread):
    """Polls data_dir for shard files: workers' attempts (`*.partial.<id>.tmp`) and renamed `*.partial`."""

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

    def __enter__(self) -> AttemptWatch:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def first_open(self) -> float | None:
        return min(self.opened.values(), default=None)

    def shards_in_flight(self, end: float) -> float | None:
        """Mean number of shards being written at once between the first opening and `end`."""
        first = self.first_open
        if first is None or end <= first:
            return None
        return sum(max(0.0, self.written.get(p, t) - t) for p, t in self.opened.items()) / (end - first)


def _stamp(stamps: dict[str, float], owner: Any, name: str, before: str, after: str) -> None:
    """Wraps the library method `owner.name` to note (time.time()) its first call as `before`, its last return `after`."""
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        stamps.setdefault(before, time.time())
        try:
            return original(*args, **kwargs)
        finally:
            stamps[after] = time.time()

    setattr(owner, name, wrapped)


def _build_job(job: dict[str, Any]) -> dict[str, Any]:
    """Starts a cluster, builds `job['dataset']` on it under the RSS monitor and the shard watch; returns timings."""
    import psutil

    started = psutil.Process().create_time()  # when this process started (time.time() scale)
    from common import measure
    from vidvol.beam_jobs import build, dask_cluster, dask_runner
    from vidvol.builders import dataset_builder

    imported = time.time()
    # The workers get the driver's sys.path on their PYTHONPATH: keep this folder's scripts off it.
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != HERE]
    s: dict[str, float] = {}  # the driver-side steps of the build
    _stamp(s, dataset_builder.StreamingBeamBuilder, "_plan", "plan_start", "plan_end")
    _stamp(s, dataset_builder.StreamingBeamBuilder, "_run_pipeline", "pipeline_start", "pipeline_end")
    _stamp(s, dask_runner.DaskRunner, "run_pipeline", "submit_start", "submitted")

    data_dir = job["data_dir"]
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    worker_cpu: dict[str, float | None] = {}
    with measure.TreeSampler(os.getpid(), job["interval"]) as monitor, AttemptWatch(data_dir) as watch:
        t0 = time.time()
        with dask_cluster.LocalDaskCluster(n_workers=job["workers"], log_dir=job["log_dir"]) as cluster:
            up = time.time()
            pids = cluster.process_pids()
            result = build.build(job["dataset"], manual_dir=job["manual_dir"], data_dir=data_dir, runner="dask",
                                 beam_flags=[f"--dask_client_address={cluster.address}"], overwrite=True)
            built = time.time()
            for name, pid in pids.items():
                try:
                    t = psutil.Process(pid).cpu_times()
                    worker_cpu[name] = round(t.user + t.system, 2)
                except psutil.NoSuchProcess:
                    worker_cpu[name] = None
        stopped = time.time()
    examples = sum(x["examples"] for x in result.splits.values())
    shards = glob.glob(os.path.join(result.data_path, "*.tfrecord-*"))
    last = max(os.path.getmtime(p) for p in shards)
    first = watch.first_open
    by_pid = {pid: name for name, pid in pids.items()}
    workers = {by_pid[pid]: p["peak_rss"] for pid, p in monitor.peaks.items() if by_pid.get(pid, "").startswith("worker")}
    scheduler = [p["peak_rss"] for pid, p in monitor.peaks.items() if by_pid.get(pid) == "scheduler"]
    driver = monitor.peaks_of("driver")
    rel = lambda a, b: round(b - a, 2) if a is not None and b is not None else None
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


def run_build(dataset: str, manual_dir: str, work: str, tag: str, workers: int, *, interval: float,
              timeout: float) -> dict[str, Any]:
    """Runs one build job process; returns its result plus end-to-end wall, CPU and other load."""
    from common import jobs

    job = {"dataset": dataset, "manual_dir": os.path.abspath(manual_dir), "data_dir": os.path.join(work, f"data_{tag}"),
           "log_dir": os.path.join(work, f"dask_{tag}"), "workers": workers, "interval": interval}
    shutil.rmtree(job["log_dir"], ignore_errors=True)
    print(f"[cluster] build {dataset} from {manual_dir} on {workers} dask worker(s)", flush=True)
    r, cost = jobs.json_job(__file__, job, work, tag, timeout)
    wall, cpu, others = cost["wall"], cost["cpu"], cost["others"]
    r.update({"wall_s": round(wall, 2),
              "examples_per_s": round(r["examples"] / r["write_s"], 3) if r["write_s"] else None,
              "build_examples_per_s": round(r["examples"] / r["build_s"], 3),
              "e2e_examples_per_s": round(r["examples"] / wall, 3), "cpu_s": round(cpu, 2),
              "cores_used": round(cpu / wall, 2), "other_cores_busy": round(others, 2)})
    st = r["steps_s"]
    print(f"[cluster]   {r['examples']} examples in {r['shards']} shards: writing {r['write_s']} s "
          f"({r['examples_per_s']} ex/s, {r['shards_in_flight']} shards in flight), build() {r['build_s']} s, end to end "
          f"{wall:.1f} s (imports {st['interpreter_and_imports']}, cluster start {st['cluster_start']}, to first shard "
          f"{st['dispatch_to_first_shard_open']} after submit, stop {st['cluster_stop']}); worker peaks "
          f"{r['worker_peaks_mib']} MiB, driver {r['driver_peak_mib']:.0f} MiB; others {others:.2f} cores", flush=True)
    return r


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
            "worker_cpu_s_per_example": _median([{"v": sum(v or 0.0 for k, v in r["worker_cpu_s"].items()
                                                           if k.startswith("worker")) / r["examples"]} for r in rs], "v"),
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
    """1 and 2 worker builds, alternating, `runs` each (`summarize_scaling` derives the rest)."""
    results: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for i in range(runs):
        for w in (1, 2):
            results[w].append(run_build(dataset, manual_dir, work, f"scaling_w{w}_r{i}", w, interval=interval,
                                        timeout=timeout))
    return {"dataset": dataset, "runs": {str(w): rs for w, rs in results.items()}}


def memory(dataset: str, manuals: dict[int, str], work: str, workers: int, *, interval: float,
           timeout: float) -> dict[str, Any]:
    """Builds over N and 4N experiments with `workers` workers; peak RSS of each worker, scheduler and driver."""
    results = {n: run_build(dataset, manual, work, f"memory_{n}", workers, interval=interval, timeout=timeout)
               for n, manual in sorted(manuals.items())}
    return {"dataset": dataset, "workers": workers, "interval_s": interval,
            "results": {str(n): r for n, r in results.items()}}


if __name__ == "__main__":  # `python benchmarks/common/dask_builds.py JOB.json RESULT.json` (started by `run_build`)
    from common import jobs

    sys.exit(jobs.job_main(__file__, _build_job))
