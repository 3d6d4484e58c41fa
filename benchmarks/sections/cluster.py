"""Builds on Beam's DaskRunner: 1 vs 2 workers, worker peak RSS vs size, and the driver at Kinetics scale."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import dask_builds, dask_driver, measure, report, section

TARGET_SPEEDUP = 1.7
TARGET_WORKER_GIB = 2.0
TARGET_FLAT = 0.10
TARGET_DRIVER_S = 60.0
TARGET_DRIVER_GIB = 2.0
PARTS = ("scaling", "memory", "driver")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterSettings(section.Settings):
    """Sizes of one mode of the cluster section (`runs`: 1-worker and 2-worker builds each, alternating)."""

    fire_config: str
    fire: dict[str, Any]  # inputs.fire_plan arguments (standalone runs)
    scaling_experiments: int  # experiments of the scaling inputs (the first ones of the fire inputs) ...
    scaling_repeat: int  # ... each listed this many times (same frames, new names)
    memory_counts: tuple[int, int]  # N and 4N experiments (4N may be the scaling inputs: N listed 4 times)
    driver_sizes: tuple[int, ...]
    interval: float = 0.1  # RSS polling period (s)
    job_timeout: float = 1800.0  # a build or driver measurement running longer is killed and reported


METHOD = [
    "Dask builds: `vidvol.beam_jobs.build.build(NAME/CONFIG, runner='dask', beam_flags=[--dask_client_address])` on a "
    "fresh `LocalDaskCluster(n_workers)` (scheduler + single-threaded worker processes on 127.0.0.1, no nanny), each "
    "build in its own Python process; 1- and 2-worker builds alternate. *Writing phase*: first shard attempt file "
    "opened -> last shard written (shard watch every 0.05 s); *end to end*: the build process's wall time "
    "(interpreter, imports, cluster start, build, cluster stop).",
    "Worker memory: RSS (VmRSS) of the driver, the scheduler and every dask worker process every 0.1 s "
    "(`measure.TreeSampler`).",
    "Driver scale: synthetic hmdb51-style `ClipSource` records (Kinetics-like paths, 700 labels), shards sized as "
    "hmdb51's 16x224x224 config (~235 KiB per example, 128 MiB shards); each size in a fresh process, peak RSS "
    "(VmHWM) after each phase. *submit* is what `pipeline.run()` does on the driver with the DaskRunner before any task "
    "runs: Beam pipeline construction (Create encodes the shard numbers, the DoFn holds one `ShardRef` per shard, "
    "the sources being in the plan file the driver writes first, *plan_file*), Beam's runner-API round trip (pickles, bz2 "
    "level 9), the DaskRunner's translation (`dask.bag.from_sequence` tokenizes every element), and distributed's "
    "serialization of the graph (`serialize(to_serialize(expr))`, as `Client.compute`). Shards are empty files; "
    "*collect* is `writer.results.collect_split` over one `.info.json` per shard, as the workers write them.",
]


class Cluster(section.Section):
    """Builds on Beam's DaskRunner (1 vs 2 workers, worker memory) and the driver at Kinetics scale."""

    key = "cluster"
    label = "cluster"
    summary = "Dask cluster section (sections/cluster.py: dask builds, driver at 1M sources)"
    FULL = ClusterSettings(
        mode="full", fire_config="full_161x540x960", fire=dict(experiments=16, frames=161, height=540, width=960),
        # Memory at 16 and 64 experiments (64 = the scaling inputs): each worker past its first examples, so the
        # comparison is of dataset size, not of a worker's first example against its fourth (allocator warm-up).
        runs=3, scaling_experiments=16, scaling_repeat=4, memory_counts=(16, 64),
        driver_sizes=(10_000, 100_000, 1_000_000),
    )
    QUICK = ClusterSettings(
        mode="quick", fire_config="161x135x240", fire=dict(experiments=2, frames=161, height=135, width=240),
        runs=1, scaling_experiments=2, scaling_repeat=1, memory_counts=(1, 2), driver_sizes=(2_000,), job_timeout=600.0,
    )
    method = METHOD

    def measure(self, work: str, settings: ClusterSettings, *, scaling_manual: str, memory_manuals: dict[int, str],
                only: Sequence[str] = PARTS) -> dict[str, Any]:
        s = settings
        dataset = f"fire_hrr/{s.fire_config}"
        doc: dict[str, Any] = {"mode": s.mode}
        phases = {}
        parts = {"scaling": lambda: dask_builds.scaling(dataset, scaling_manual, os.path.join(work, "scaling"), s.runs,
                                                        interval=s.interval, timeout=s.job_timeout),
                 "memory": lambda: dask_builds.memory(dataset, memory_manuals, os.path.join(work, "memory"),
                                                      len(os.sched_getaffinity(0)), interval=s.interval,
                                                      timeout=s.job_timeout),
                 "driver": lambda: {"rows": [dask_driver.run_driver(n, os.path.join(work, "driver"), s.job_timeout)
                                             for n in s.driver_sizes]}}
        for part in (p for p in PARTS if p in only):
            t = time.monotonic()
            doc[part] = parts[part]()
            phases[part] = round(time.monotonic() - t, 1)
        doc["phases_s"] = phases
        return doc

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        b = doc.get("scaling")
        if b:
            runs = {int(w): rs for w, rs in b["runs"].items()}
            doc["scaling"] = {**dask_builds.summarize_scaling(b["dataset"], runs), "runs": b["runs"]}
        m = doc.get("memory")
        if m:
            m["pass"], m["verdict"] = measure.memory_verdict({int(n): r for n, r in m["results"].items()},
                                                             max_worker_gib=TARGET_WORKER_GIB, flat_tolerance=TARGET_FLAT)
        d = doc.get("driver")
        if d:
            doc["driver"] = dask_driver.driver_curve(d["rows"])
            doc["driver_notes"] = dask_driver.driver_notes(doc["driver"])
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        rows = []
        b = doc.get("scaling")
        if b:
            one, two = b["workers_1"], b["workers_2"]
            rows.append(section.target(
                "dask build fire_hrr: 2 vs 1 workers (writing phase)", b["speedup"], TARGET_SPEEDUP,
                note=f"end to end {b['e2e_speedup']:.2f}x, build() on a running cluster {b['build_speedup']:.2f}x; "
                     f"quietest pair {b['quietest_pair']['speedup']:.2f}x "
                     f"(others {b['quietest_pair']['other_cores_busy']:.2f} cores); "
                     f"{two['shards_in_flight'] or 0:.2f} shards in flight with 2 workers, worker CPU per example "
                     f"{one['worker_cpu_s_per_example']:.2f} s (1 worker) vs {two['worker_cpu_s_per_example']:.2f} s "
                     f"(2 workers); fixed costs outside the writing phase {b['overhead_s']['1']:.0f} s / "
                     f"{b['overhead_s']['2']:.0f} s (see the notes below the table)"))
        if doc.get("memory"):
            rows += section.memory_targets("dask build fire_hrr", doc["memory"]["results"], TARGET_FLAT, TARGET_WORKER_GIB)
        d = doc.get("driver")
        if d:
            big = max(d["rows"], key=lambda r: r["entries"])
            where = f"{big['entries']:,} sources"
            rows.append(section.target(f"driver time, {where} (no decoding)", big["driver_total_s"], TARGET_DRIVER_S,
                                       op="<=", unit="s", note=dask_driver.driver_note(big)))
            rows.append(section.target(f"driver peak RSS, {where}", big["peak_rss_mib"] / 1024, TARGET_DRIVER_GIB,
                                       op="<=", unit="GiB", note=dask_driver.driver_rss_note(big)))
        return rows

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        c = doc
        out = ["## Builds on a Dask cluster (DaskRunner)", "",
               f"`benchmarks/sections/cluster.py` ({c['mode']} mode, {c['duration_s'] / 60:.1f} min). Targets:", ""]
        out += report.targets_table(c["targets"], cpu=False) + report.misses(c["targets"])
        b = c.get("scaling")
        if b:
            out += ["### 1 vs 2 dask workers", "",
                    f"`{b['dataset']}` over {b['examples']} examples in {b['shards']} shards, a fresh "
                    "`LocalDaskCluster` per build, 1 and 2 workers alternating. *Writing phase*: first shard attempt "
                    "opened to last shard written (shard watch); *build()*: the build call on a running cluster; *end to "
                    "end*: the build's process (interpreter, imports, cluster start, build, cluster stop).", ""]
            out += report.table(
                ["workers", "writing phase examples/s", "runs", "build() examples/s", "end-to-end examples/s", "runs",
                 "wall s", "shards in flight", "cores busy (others)"],
                [[w, report.rate(r["examples_per_s"]), ", ".join(report.rate(x) for x in r["examples_per_s_runs"]),
                  report.rate(r["build_examples_per_s"]), report.rate(r["e2e_examples_per_s"]),
                  ", ".join(report.rate(x) for x in r["e2e_examples_per_s_runs"]), f"{r['wall_s']:.1f}",
                  report.opt(r["shards_in_flight"]), f"{r['cores_used']:.2f} ({r['other_cores_busy']:.2f})"]
                 for w, r in ((w, b[f"workers_{w}"]) for w in (1, 2))])
            out += [f"Speed-up 2 vs 1 workers: **{b['speedup']:.2f}x** writing phase, {b['build_speedup']:.2f}x build() "
                    f"call, {b['e2e_speedup']:.2f}x end to end (medians); per pair: "
                    + ", ".join(f"{p['speedup']:.2f}x / {p['e2e_speedup']:.2f}x e2e (others {p['other_cores_busy']:.2f})"
                                for p in b["pairs"]) + ".", "",
                    "Where the time goes (seconds, medians):", ""]
            steps = list(b["workers_1"]["steps_s"])
            out += report.table(
                ["step"] + [f"{w} worker{'s' if w > 1 else ''}" for w in (1, 2)],
                [[k.replace("_", " ")] + [report.opt(b[f"workers_{w}"]["steps_s"][k], "{:.1f}") for w in (1, 2)]
                 for k in steps]
                + [["worker CPU s per example"] + [report.opt(b[f"workers_{w}"].get("worker_cpu_s_per_example"))
                                                   for w in (1, 2)]])
            out += [f"- {line}" for line in b.get("notes", [])] + [""]
        m = c.get("memory")
        if m:
            out += ["### Dask worker memory: more experiments", "",
                    f"`{m['dataset']}` on {m['workers']} dask workers, RSS polled every {m['interval_s']} s.", ""]
            out += report.table(
                ["experiments", "examples", "shards", "dataset MiB", "wall s", "worker peaks MiB", "scheduler MiB",
                 "driver MiB"],
                [[n, r["examples"], r["shards"], f"{r['dataset_mib']:.0f}", f"{r['wall_s']:.1f}",
                  ", ".join(f"{v:.0f}" for v in r["worker_peaks_mib"].values()), f"{r['scheduler_peak_mib']:.0f}",
                  f"{r['driver_peak_mib']:.0f}"] for n, r in m["results"].items()])
            out += [m["verdict"], ""]
        d = c.get("driver")
        if d:
            rows = d["rows"]
            phases = rows[0]["driver_phases"]
            out += ["### Driver at scale (no decoding)", "",
                    f"Synthetic hmdb51-style sources, shards sized for ~{d['example_bytes'] // 1024} KiB examples in "
                    f"{d['max_shard_mib']} MiB shards; each size in a fresh process. Seconds per phase; *total* is the "
                    "driver's (the stand-alone pickles and the workers' sidecars are not in it); RSS: peak (VmHWM) of the "
                    "process (imports included).", ""]
            out += report.table(
                ["sources", "shards"] + phases + ["total s", "Beam pickler s (MiB)", "cloudpickle s (MiB)", "RSS after imports MiB",
                                                  "peak RSS MiB", "read back"],
                [[f"{r['entries']:,}", r["shards"]] + [f"{r['times_s'][k]:.2f}" for k in phases]
                 + [f"**{r['driver_total_s']:.1f}**",
                    f"{r['times_s']['pickle.beam_pickler']:.2f} ({r['pickled_mib']['beam_pickler']:.0f})",
                    f"{r['times_s']['pickle.cloudpickle']:.2f} ({r['pickled_mib']['cloudpickle']:.0f})",
                    f"{r['rss_after_imports_mib']:.0f}", f"**{r['peak_rss_mib']:.0f}**",
                    f"{r['examples_read_back']:,}" + ("" if r["keys_match"] else " (keys differ!)")] for r in rows])
            if d.get("growth_exponents"):
                out += ["Growth exponent per phase (time ~ n^e; 1 = linear, '-' = under 50 ms):", ""]
                out += report.table(
                    ["from -> to"] + phases + ["total"],
                    [[f"{g['from']:,} -> {g['to']:,}"] + [report.opt(g.get(k)) for k in phases]
                     + [report.opt(g.get("driver_total_s"))] for g in d["growth_exponents"]])
            if c.get("driver_notes"):
                out += [f"- {line}" for line in c["driver_notes"]] + [""]
        out += ["Method:", ""] + [f"- {line}" for line in c.get("method", [])] + [""]
        return out

    def run_settings(self, ctx: section.Context) -> ClusterSettings:
        s = ctx.settings
        counts = (s.fire_counts[-1], s.fire_counts[-1] * s.scaling_repeat) if s.scaling_repeat > 1 else tuple(s.fire_counts)
        return dataclasses.replace(self.mode_settings(s.quick), mode=s.mode, fire_config=s.fire_config, fire=dict(s.fire),
                                   runs=s.build_runs, scaling_experiments=s.fire_counts[-1],
                                   scaling_repeat=s.scaling_repeat, memory_counts=counts)

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        s = ctx.settings
        scaling_manual = ctx.path("manual", f"fire_{s.fire_counts[-1]}_x{s.scaling_repeat}")
        repeated = s.fire_counts[-1] * s.scaling_repeat
        return {"scaling_manual": scaling_manual,
                "memory_manuals": {n: scaling_manual if n == repeated and s.scaling_repeat > 1
                                   else ctx.path("manual", f"fire_{n}") for n in self.run_settings(ctx).memory_counts}}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--only", nargs="+", choices=PARTS, default=PARTS)
        parser.add_argument("--sizes", type=int, nargs="+", default=None, help="override the driver-scale sizes")

    def apply_arguments(self, settings: ClusterSettings, args: argparse.Namespace) -> ClusterSettings:
        return settings.override(driver_sizes=tuple(args.sizes) if args.sizes else None)

    def standalone_inputs(self, out: str, settings: ClusterSettings, inputs_dir: str,
                          args: argparse.Namespace) -> dict[str, Any]:
        scaling_manual, memory_manuals = ("", {})
        if {"scaling", "memory"} & set(args.only):
            scaling_manual, memory_manuals = prepare_inputs(out, settings, inputs_dir)
        return {"scaling_manual": scaling_manual, "memory_manuals": memory_manuals, "only": args.only}


def prepare_inputs(out: str, settings: ClusterSettings, inputs_dir: str) -> tuple[str, dict[int, str]]:
    """Standalone runs: fire inputs (reused if present), the scaling manual_dir and one per memory count."""
    from common import inputs

    s = settings
    root = os.path.join(inputs_dir, "fire_hrr")
    inputs.write_inputs([inputs.fire_plan(root, **s.fire)], workers=len(os.sched_getaffinity(0)))
    labels = os.path.join(root, "labels.csv")
    manuals = {}
    repeated = s.scaling_experiments * s.scaling_repeat
    for count in sorted((set(s.memory_counts) | {s.scaling_experiments}) - ({repeated} if s.scaling_repeat > 1 else set())):
        manuals[count] = os.path.join(out, "manual", f"fire_{count}")
        inputs.subset_labels(labels, manuals[count], count)
    scaling_manual = os.path.join(out, "manual", f"fire_{s.scaling_experiments}_x{s.scaling_repeat}")
    inputs.repeat_experiments(os.path.join(manuals[s.scaling_experiments], "labels.csv"), scaling_manual, s.scaling_repeat)
    if s.scaling_repeat > 1:
        manuals[repeated] = scaling_manual
    return scaling_manual, {n: manuals[n] for n in s.memory_counts}


SECTION = Cluster()

if __name__ == "__main__":
    sys.exit(SECTION.main())
