"""Peak memory of `tfds build fire_hrr` (driver and Beam workers) as the number of experiments grows.

Writes `max(--experiments)` full-resolution textured JPEG experiments once (vidvol.samples), then
for each count N builds `fire_hrr/<config>` over the first N with the real `tfds build` CLI in a
subprocess (multi-process Beam), polling the RSS of the whole process tree every `--interval`
seconds with psutil, and reading the tree's `ru_maxrss` from `wait4` as a cross-check (an upper bound
only: Linux carries this launching process's own peak into it through exec; see cluster_driver.peak_rss_mib). The
streaming writer's promise is that a worker's peak is one example plus small buffers, whatever N.
`--writer tfds` builds with TFDS's stock Beam writer instead (`stock_writer.py`: the same CLI, with
vidvol's builders patched to TFDS's own `_download_and_prepare`), for comparison.

Run: python benchmarks/fire_memory.py --experiments 4 16 --out DIR
Writes DIR/fire_memory.json and prints one table row per N plus a verdict line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 2**30
MIB = 2**20
SHELLS = ("sh", "dash", "bash")
WORKER_MARKER = "sdk_worker_main"  # Beam's SDK worker processes run `-m apache_beam.runners.worker.sdk_worker_main`
WRITERS = ("streaming", "tfds")  # vidvol's streaming shard writer, TFDS's stock Beam writer


def tfds_cli(writer: str = "streaming") -> list[str]:
    """The command that stands for `tfds` for a writer: TFDS's own CLI, or `stock_writer.py` (same arguments)."""
    if writer == "streaming":
        return [sys.executable, "-m", "tensorflow_datasets.scripts.cli.main"]
    if writer == "tfds":
        return [sys.executable, os.path.join(HERE, "stock_writer.py")]
    raise ValueError(f"writer must be one of {WRITERS}, got {writer!r}")


def write_inputs(root: str, *, experiments: int, frames: int, height: int, width: int, quality: int) -> str:
    """Writes (or reuses) `experiments` textured frame experiments under root; returns its labels.csv."""
    from vidvol import samples  # pylint: disable=g-import-not-at-top  (imports TF; only when inputs are written)

    stamp = os.path.join(root, "inputs.json")
    spec = {"experiments": experiments, "frames": frames, "height": height, "width": width, "quality": quality}
    if os.path.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == spec:
                print(f"reusing inputs under {root}", flush=True)
                return os.path.join(root, "labels.csv")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    start = time.monotonic()
    names = [(f"exp_{i:03d}", frames) for i in range(experiments)]
    samples.write_fire_hrr_frames(root, experiments=names, height=height, width=width, quality=quality)
    with open(stamp, "w") as f:
        json.dump(spec, f)
    print(f"wrote {experiments} experiments x {frames} frames at {height}x{width} in {time.monotonic() - start:.0f} s", flush=True)
    return os.path.join(root, "labels.csv")


def subset_labels(labels: str, manual_dir: str, count: int) -> int:
    """Writes manual_dir/labels.csv with the first `count` experiments of `labels` (absolute frame paths)."""
    root = os.path.dirname(os.path.abspath(labels))
    os.makedirs(manual_dir, exist_ok=True)
    kept: list[str] = []
    rows = 0
    with open(labels, newline="") as src, open(os.path.join(manual_dir, "labels.csv"), "w", newline="") as dst:
        reader, writer = csv.DictReader(src), None
        for row in reader:
            if row["experiment"] not in kept:
                if len(kept) == count:
                    continue
                kept.append(row["experiment"])
            row["frame"] = os.path.join(root, row["frame"])
            if writer is None:
                writer = csv.DictWriter(dst, fieldnames=reader.fieldnames)
                writer.writeheader()
            writer.writerow(row)
            rows += 1
    if len(kept) < count:
        raise ValueError(f"{labels}: asked for {count} experiments, found {len(kept)}")
    return rows


def repeat_experiments(labels: str, manual_dir: str, repeat: int) -> int:
    """Writes manual_dir/labels.csv listing every experiment `repeat` times (same frames, new names).

    A build long enough that worker start-up (a few seconds of imports) does not dominate the
    1-vs-2-worker comparison, without generating more full-resolution frames.
    """
    os.makedirs(manual_dir, exist_ok=True)
    with open(labels, newline="") as f:
        reader = csv.DictReader(f)
        rows, fields = list(reader), reader.fieldnames
    with open(os.path.join(manual_dir, "labels.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for j in range(repeat):
            for row in rows:
                writer.writerow({**row, "experiment": f"{row['experiment']}_r{j}" if repeat > 1 else row["experiment"]})
    return len(rows) * repeat


class TreeMonitor(threading.Thread):
    """Polls the RSS of a process and all its descendants; keeps each process's peak and the tree total's peak."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peaks: dict[int, dict[str, Any]] = {}
        self.total_peak = 0
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            total = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    if p.pid not in self.peaks:
                        cmd = " ".join(p.cmdline())
                        worker = WORKER_MARKER in cmd and p.name() not in SHELLS  # Beam starts workers via `sh -c`
                        kind = "driver" if p.pid == self.root.pid else ("worker" if worker else "other")
                        self.peaks[p.pid] = {"kind": kind, "peak_rss": 0, "cmd": cmd[:160]}
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                total += rss
                self.peaks[p.pid]["peak_rss"] = max(self.peaks[p.pid]["peak_rss"], rss)
            self.total_peak = max(self.total_peak, total)
            self.samples += 1
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def build_once(manual_dir: str, data_dir: str, *, config: str, interval: float, extra: Sequence[str], env: dict[str, str],
               writer: str = "streaming") -> dict[str, Any]:
    """Runs `tfds build fire_hrr/<config>` (with `writer`) once under the monitor; returns the measured peaks."""
    shutil.rmtree(data_dir, ignore_errors=True)
    cmd = [
        *tfds_cli(writer), "build", f"fire_hrr/{config}",
        "--imports", "vidvol", "--manual_dir", manual_dir, "--data_dir", data_dir, *extra,
    ]
    log_path = data_dir.rstrip("/") + ".log"
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        monitor = TreeMonitor(proc.pid, interval)
        monitor.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        monitor.stop()
    wall = time.monotonic() - start
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"tfds build failed ({proc.returncode}); log {log_path}:\n{tail}")
    workers = [p["peak_rss"] for p in monitor.peaks.values() if p["kind"] == "worker"]
    driver = [p["peak_rss"] for p in monitor.peaks.values() if p["kind"] == "driver"]
    report_path = os.path.join(data_dir, "fire_hrr", config, "1.0.0", "skip_report.json")
    with open(report_path) as f:
        report = json.load(f)
    return {
        "wall_s": round(wall, 1),
        "driver_peak_mib": round(max(driver, default=0) / MIB, 1),
        "worker_peak_mib": round(max(workers, default=0) / MIB, 1),
        "worker_peaks_mib": sorted(round(w / MIB, 1) for w in workers),
        "processes": sorted(monitor.peaks.values(), key=lambda p: -p["peak_rss"]),
        "num_workers": len(workers),
        "tree_total_peak_mib": round(monitor.total_peak / MIB, 1),
        "tree_ru_maxrss_mib": round(usage.ru_maxrss * 1024 / MIB, 1),  # Linux: KiB; largest process of the tree
        "polls": monitor.samples,
        "examples": sum(s["examples"] for s in report["splits"].values()),
        "shards": sum(s["shards"] for s in report["splits"].values()),
        "dataset_mib": round(sum(s["num_bytes"] for s in report["splits"].values()) / MIB, 1),
        "log": log_path,
    }


def verdict(results: dict[int, dict[str, Any]], *, max_worker_gib: float, flat_tolerance: float) -> tuple[bool, str]:
    """Whether worker peaks are flat (within tolerance) from the smallest to the largest N and under the cap."""
    counts = sorted(results)
    lo, hi = results[counts[0]], results[counts[-1]]
    growth_w = hi["worker_peak_mib"] / max(lo["worker_peak_mib"], 1e-9) - 1
    growth_d = hi["driver_peak_mib"] / max(lo["driver_peak_mib"], 1e-9) - 1
    worst = max(r["worker_peak_mib"] for r in results.values()) / 1024
    ok = growth_w <= flat_tolerance and worst <= max_worker_gib
    text = (
        f"worker peak {lo['worker_peak_mib']:.0f} -> {hi['worker_peak_mib']:.0f} MiB ({growth_w:+.1%}) from "
        f"{counts[0]} to {counts[-1]} experiments, driver {lo['driver_peak_mib']:.0f} -> {hi['driver_peak_mib']:.0f} MiB "
        f"({growth_d:+.1%}); worst worker {worst:.2f} GiB; target: flat within {flat_tolerance:.0%} and under "
        f"{max_worker_gib:g} GiB per worker: {'PASS' if ok else 'FAIL'}"
    )
    return ok, text


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=int, nargs="+", default=[4, 16], help="experiment counts to build")
    parser.add_argument("--out", required=True, help="work folder (inputs, datasets, logs, fire_memory.json)")
    parser.add_argument("--frames", type=int, default=161, help="frames per experiment")
    parser.add_argument("--height", type=int, default=540)
    parser.add_argument("--width", type=int, default=960)
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the source frames")
    parser.add_argument("--config", default="full_161x540x960", help="fire_hrr config to build")
    parser.add_argument("--workers", type=int, default=0, help="Beam SDK workers (0: one per core)")
    parser.add_argument("--writer", choices=WRITERS, default="streaming",
                        help="vidvol's streaming shard writer, or TFDS's stock Beam writer for comparison")
    parser.add_argument("--interval", type=float, default=0.2, help="RSS polling period in seconds")
    parser.add_argument("--max-worker-gib", type=float, default=2.0)
    parser.add_argument("--flat-tolerance", type=float, default=0.10)
    args = parser.parse_args(argv)

    out = os.path.abspath(args.out)
    labels = write_inputs(os.path.join(out, "inputs"), experiments=max(args.experiments), frames=args.frames,
                          height=args.height, width=args.width, quality=args.quality)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    extra = [f"--beam_pipeline_options=direct_num_workers={args.workers}"] if args.workers else []
    results: dict[int, dict[str, Any]] = {}
    print(f"{'experiments':>11} {'examples':>8} {'shards':>6} {'MiB out':>8} {'wall s':>7} {'driver MiB':>10} "
          f"{'worker MiB':>10} {'workers':>7} {'tree MiB':>8} {'ru_maxrss MiB':>13}")
    for count in sorted(args.experiments):
        manual_dir = os.path.join(out, f"manual_{count}")
        rows = subset_labels(labels, manual_dir, count)
        r = build_once(manual_dir, os.path.join(out, f"data_{count}"), config=args.config, interval=args.interval,
                       extra=extra, env=env, writer=args.writer)
        results[count] = r
        print(f"{count:>11} {r['examples']:>8} {r['shards']:>6} {r['dataset_mib']:>8.1f} {r['wall_s']:>7.1f} "
              f"{r['driver_peak_mib']:>10.0f} {r['worker_peak_mib']:>10.0f} {r['num_workers']:>7} "
              f"{r['tree_total_peak_mib']:>8.0f} {r['tree_ru_maxrss_mib']:>13.0f}", flush=True)
    ok, text = verdict(results, max_worker_gib=args.max_worker_gib, flat_tolerance=args.flat_tolerance)
    print(text)
    summary = {"args": vars(args), "results": {str(k): v for k, v in results.items()}, "verdict": text, "pass": ok}
    with open(os.path.join(out, "fire_memory.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
