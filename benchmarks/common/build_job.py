"""One timed, memory-monitored build of a vidvol dataset config."""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from common.dask_builds import AttemptWatch
from common import jobs, measure
from common.streams import busy_cpu_seconds

MIB = 2**20
IN_MEMORY = ("--direct_num_workers=1", "--direct_running_mode=in_memory")
TFDS_CLI = (sys.executable, "-m", "tensorflow_datasets.scripts.cli.main")  # `tfds`, as a user runs it


def beam_flags(workers: int, running_mode: str) -> list[str]:
    return [f"--direct_num_workers={workers}", f"--direct_running_mode={running_mode}"]


def _cli(name: str, config: str, manual_dir: str, data_dir: str, workers: int, log_path: str,
         monitor_interval: float, target: str | None = None) -> tuple[float, float, measure.TreeSampler]:
    """Runs `tfds build` in a subprocess under a TreeSampler; returns (wall s, CPU s of the tree, sampler)."""
    options = ",".join(flag.lstrip("-") for flag in beam_flags(workers, "multi_processing"))
    cmd = [*TFDS_CLI, "build", target or f"{name}/{config}", "--imports", "vidvol", "--manual_dir", manual_dir,
           "--data_dir", data_dir, f"--beam_pipeline_options={options}"]
    start = time.monotonic()
    returncode, usage, monitor = jobs.run_command(cmd, log_path, interval=monitor_interval)  # usage: driver + workers
    wall = time.monotonic() - start
    if returncode != 0:
        raise RuntimeError(f"tfds build {name}/{config} failed ({returncode}); log {log_path}:\n{jobs.tail(log_path)}")
    return wall, usage.ru_utime + usage.ru_stime, monitor


def prepare(name: str, manual_dir: str, data_dir: str, flags: Sequence[str] = IN_MEMORY, *,
            before: Callable[[], Any] | None = None, **builder_kwargs: Any) -> Any:
    """`tfds.builder(name)` prepared in this process (Beam with `flags`) unless it is; `before()` first if not."""
    import tensorflow_datasets as tfds
    from apache_beam.options.pipeline_options import PipelineOptions
    import vidvol  # noqa: F401

    builder = tfds.builder(name, data_dir=data_dir, **builder_kwargs)
    if not builder.is_prepared():
        if before:
            before()
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
            manual_dir=manual_dir, beam_options=PipelineOptions(list(flags))))
    return builder


def _in_process(name: str, config: str, manual_dir: str, data_dir: str, workers: int, running_mode: str,
                monitor_interval: float, target: str | None = None) -> tuple[float, float, measure.TreeSampler]:
    """Runs download_and_prepare here under a TreeSampler of this process (and its Beam workers, if any)."""
    with measure.TreeSampler(os.getpid(), monitor_interval) as monitor:
        start, cpu_start = time.monotonic(), _cpu_seconds()
        prepare(target or f"{name}/{config}", manual_dir, data_dir, beam_flags(workers, running_mode))
    return time.monotonic() - start, _cpu_seconds() - cpu_start, monitor


def _cpu_seconds() -> float:
    """CPU seconds used so far by this process and its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def build(name: str, config: str, manual_dir: str, data_dir: str, *, workers: int, isolate: bool = True,
          running_mode: str = "multi_threading", interval: float = 0.1, target: str | None = None) -> dict[str, Any]:
    """Builds name/config from scratch into data_dir; returns rates, memory peaks and the skip summary."""
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    busy_start = busy_cpu_seconds()
    with AttemptWatch(data_dir, interval=0.05) as watch:
        if isolate:
            wall, cpu, monitor = _cli(name, config, manual_dir, data_dir, workers, data_dir.rstrip("/") + ".log",
                                      interval, target)
        else:
            wall, cpu, monitor = _in_process(name, config, manual_dir, data_dir, workers, running_mode, interval, target)
    others = max(0.0, busy_cpu_seconds() - busy_start - cpu) / wall
    configs = sorted(d for d in os.listdir(os.path.join(data_dir, name))
                     if os.path.isdir(os.path.join(data_dir, name, d)) and not d.startswith("."))
    if configs != [config]:
        raise RuntimeError(f"tfds build {target or name + '/' + config} built {configs}, expected only {config!r}")
    found = sorted(glob.glob(os.path.join(data_dir, name, config, "*", "skip_report.json")))  # any version
    if not found:
        raise FileNotFoundError(f"{data_dir}/{name}/{config}: no skip_report.json (did the build finish?)")
    with open(found[-1], encoding="utf-8") as f:
        report = json.load(f)
    examples = sum(s["examples"] for s in report["splits"].values())
    write_s = in_flight = None
    if watch.first_open is not None:  # the writing phase ends with the latest shard's last write
        last = max(os.path.getmtime(p) for p in glob.glob(os.path.join(data_dir, name, config, "*",
                                                                          f"{name}-*.tfrecord-*")))
        write_s = max(last - watch.first_open, 1e-3)
        in_flight = watch.shards_in_flight(last)
    workers_rss, driver_rss = monitor.peaks_of("worker"), monitor.peaks_of("driver")
    # Multi-threaded builds run their workers as threads of the driver: the driver's peak is theirs.
    worker_peak = max(workers_rss) if workers_rss else (max(driver_rss, default=0) if not isolate else 0)
    return {
        "workers": workers,
        "isolated": isolate,
        "running_mode": "multi_processing" if isolate else running_mode,
        "examples": examples,
        "skipped": len([s for s in report["skipped"] if not s.get("example")]),
        "shards": sum(s["shards"] for s in report["splits"].values()),
        "dataset_mib": round(sum(s["num_bytes"] for s in report["splits"].values()) / MIB, 2),
        "wall_s": round(wall, 2),
        "write_s": round(write_s if write_s is not None else wall, 2),
        "examples_per_s": round(examples / (write_s if write_s is not None else wall), 3),
        "shards_in_flight": round(in_flight, 2) if in_flight is not None else None,
        "e2e_examples_per_s": round(examples / wall, 3),
        "cpu_s": round(cpu, 2),
        "cores_used": round(cpu / wall, 2),  # average over the whole build, start-up included
        "other_cores_busy": round(others, 2),  # cores other processes on the machine kept busy meanwhile
        "driver_peak_mib": round(max(driver_rss, default=0) / MIB, 1),
        "worker_peak_mib": round(worker_peak / MIB, 1),
        "worker_peaks_mib": sorted(round(w / MIB, 1) for w in workers_rss),
        "num_worker_processes": len(workers_rss),
        "tree_total_peak_mib": round(monitor.total_peak / MIB, 1),
        "polls": monitor.samples,
    }
