"""vidvol benchmark: the headline (reads and builds against their baselines and limits), then every section."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

import psutil

from common import inputs, report, section, suite
from sections import (bucket, build_resume, builds, cluster, fuzz, imports, peers, random_access, reads, resume,
                      video_augment, volume_memory)
from common.suite import CONTENDED_CORES

HERE = os.path.dirname(os.path.abspath(__file__))  # benchmarks/ of the source checkout
GIB = 2**30

# Machine


def machine() -> dict[str, Any]:
    """Cores, CPU model (/proc/cpuinfo's, or platform.processor()), memory, platform and the current load average."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown"
    return {"cores": len(os.sched_getaffinity(0)), "cpu_model": model,
            "memory_gib": round(psutil.virtual_memory().total / GIB, 1), "platform": platform.platform(),
            "load_before": [round(x, 2) for x in os.getloadavg()]}


def versions() -> dict[str, str]:
    """Versions of the libraries the numbers depend on."""
    import apache_beam
    import cv2
    import nibabel
    import numpy
    import tensorflow
    import tensorflow_datasets

    jpeg = next((line.split(":", 1)[1].strip() for line in cv2.getBuildInformation().splitlines()
                 if line.strip().startswith("JPEG:")), "unknown")
    return {"python": platform.python_version(), "tensorflow": tensorflow.__version__,
            "tensorflow-datasets": tensorflow_datasets.__version__, "apache-beam": apache_beam.__version__,
            "opencv": cv2.__version__, "opencv JPEG": jpeg, "nibabel": nibabel.__version__,
            "numpy": numpy.__version__}


def write_inputs(ctx: section.Context) -> dict[str, Any]:
    """Generates (or reuses) every input set of the run's settings; returns their descriptions."""
    start = time.monotonic()
    s = ctx.settings
    root = ctx.inputs_dir
    plans = [inputs.hmdb51_plan(os.path.join(root, "hmdb51"), **s.hmdb51),
             inputs.fire_plan(os.path.join(root, "fire_hrr"), **s.fire)]
    plans += [inputs.mri_plan(os.path.join(root, f"mri_{tag}"), **spec) for tag, spec in s.mri]
    written = inputs.write_inputs(plans, workers=ctx.cores if s.isolate else 1)
    desc = {"hmdb51": {**plans[0].spec, **inputs.describe_hmdb51(plans[0].root)},
            "fire_hrr": {**plans[1].spec, **inputs.describe_fire(plans[1].root)}}
    for (tag, _), plan in zip(s.mri, plans[2:]):
        desc[f"mri_{tag}"] = {**plan.spec, **inputs.describe_mri(plan.root)}
    for d, w in zip(desc.values(), written):
        d["generated_this_run"] = w
    ctx.phase("inputs", start)
    return desc


class Headline(section.Section):
    """Reads and builds against their baselines and limits: the document is results.json's top level."""

    key = "headline"
    label = "headline"
    summary = "reads and builds (always measured)"
    FULL = suite.FULL
    QUICK = suite.QUICK
    method = reads.METHOD + builds.METHOD

    def measure(self, work: str, settings: section.Settings, *, ctx: section.Context) -> dict[str, Any]:
        results: dict[str, Any] = {"inputs": write_inputs(ctx)}
        built = builds.build_all(ctx)
        results["build_limit"] = builds.build_limit_all(ctx, built)
        results["no_config"] = built["no_config"]
        results["read"] = reads.read_all(ctx, built)
        results["hmdb51_paths"] = reads.hmdb51_paths(ctx, results["read"]["hmdb51"])
        lim = results["read"]["hmdb51"]["limit"]  # what the stored frames cost to decode: compare with real footage
        results["inputs"]["hmdb51"].update(stored_frame_kib=round(lim["mean_stored_frame_bytes"] / 1024, 2),
                                           decode_frames_per_s_per_core=round(lim["frames_per_s_one_core"]))
        results["build_scaling"] = built["build_scaling"]
        results["build_memory"] = built["build_memory"]
        results["builds_for_reads"] = built["reads"]
        return results

    def in_run(self, ctx: section.Context) -> dict[str, Any]:
        """The headline's entries, measured in the run's own folders (each step records its phase)."""
        return self.measure(ctx.out, ctx.settings, ctx=ctx)

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        doc["machine"]["shared"] = other_cores_max(doc) > CONTENDED_CORES
        doc["notes"] = notes(doc)
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        return (reads.targets(doc["read"]) + builds.targets(doc)
                + reads.path_targets(doc.get("hmdb51_paths")))


HEADLINE = Headline()
# The sections measured after the headline, in this order (imports first: start-up times before the sections'
# builds and servers; video_augment before peers: its augmented row joins the peers' table); each document goes
# to results.json[KEY] and renders after the build tables. A new one: a `section.Section` module, one entry here.
SECTIONS: tuple[section.Section, ...] = (
    imports.SECTION, cluster.SECTION, random_access.SECTION, resume.SECTION, build_resume.SECTION, bucket.SECTION,
    video_augment.SECTION, peers.SECTION, volume_memory.SECTION, fuzz.SECTION)


RENDERERS = {s.key: s.markdown for s in SECTIONS}  # report.markdown's section renderers


def run(out: str, settings: suite.RunSettings, *, inputs_dir: str | None = None,
        sections: Sequence[section.Section] = SECTIONS) -> dict[str, Any]:
    """Runs the headline, then every section, and returns the results document."""
    started = datetime.datetime.now().astimezone()
    t0 = time.monotonic()
    ctx = section.Context(out, settings, inputs_dir)
    results = ctx.results
    batches = {"hmdb51": settings.hmdb51_batch, "fire_hrr": settings.fire_batch, "mri_volumes": settings.mri_batch}
    results.update({"mode": settings.mode, "started": started.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
                    "versions": versions(), "settings": {"runs": settings.runs, "build_runs": settings.build_runs,
                                                         "min_seconds": settings.min_seconds,
                                                         "isolated": settings.isolate, "batch_sizes": batches}})
    results.update(HEADLINE.in_run(ctx))
    for s in sections:
        results[s.key] = s.in_run(ctx)
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["phases_s"] = ctx.phases
    results["duration_s"] = round(time.monotonic() - t0, 1)
    return HEADLINE.resummarize(results)


def other_cores_max(results: dict[str, Any]) -> float:
    """The most cores other processes kept busy during any timed read or scaling build (median over its runs)."""
    others = [p["other_cores_busy"] for r in results["read"].values() for k, p in r.items() if k in ("loader", "baseline")]
    others += [results["build_scaling"][f"workers_{w}"]["other_cores_busy"] for w in (1, 2)]
    others += [r["other_cores_busy"] for r in (results.get("hmdb51_paths") or {}).get("rows", [])]
    return max(others, default=0.0)


def notes(results: dict[str, Any]) -> list[str]:
    """Automatic remarks: machine load, inputs generated in this run."""
    out = []
    if results["mode"] == "quick":
        out.append("Quick mode: tiny inputs, one run, builds in this process with multi-threaded Beam and reads in "
                   "this process. It checks the plumbing; its numbers say nothing about speed or memory.")
    m = results["machine"]
    busiest = other_cores_max(results)
    if busiest > CONTENDED_CORES:
        out.append(f"Other processes kept up to {busiest:.2f} of the {m['cores']} cores busy during the timed "
                   "windows (columns `others`): those measurements had less than the whole machine, so their "
                   "wall-clock rates (and the 2-worker builds most) are understated; the cpu-normalized columns "
                   "are steadier.")
    else:
        out.append(f"Other processes kept at most {busiest:.2f} cores busy during the timed windows: "
                   "the machine was effectively this benchmark's (the load average counts the benchmark itself).")
    fresh = [k for k, v in results["inputs"].items() if v.get("generated_this_run")]
    if fresh:
        out.append(f"Inputs generated in this run ({results['phases_s'].get('inputs', 0):.0f} s): {', '.join(fresh)}; "
                   "later runs reuse them.")
    return out


def publish(paths: dict[str, str]) -> list[str]:
    """Copies RESULTS.md, results.png and results.json into the checkout's benchmarks/ (the committed copy): this
    folder, when it is the `benchmarks/` of a source checkout (a `.git` beside it)."""
    checkout = os.path.exists(os.path.join(os.path.dirname(HERE), ".git"))
    return [shutil.copyfile(p, os.path.join(HERE, os.path.basename(p))) for p in paths.values()] if checkout else []


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = section.parser_(__doc__, "output folder (inputs, datasets, logs, results)",
                            "tiny inputs, 1 run, in-process (CI smoke)", "override the timed runs per read pipeline")
    parser.add_argument("--build-runs", type=int, default=None, help="override the builds per worker count")
    parser.add_argument("--isolate", action="store_true",
                        help="with --quick: still build with the tfds CLI and read in subprocesses (as a full run)")
    parser.add_argument("--report-only", action="store_true",
                        help="re-render RESULTS.md and results.png from OUT/results.json without measuring")
    for s in SECTIONS:
        parser.add_argument(f"--no-{s.key.replace('_', '-')}", action="store_true", help=f"leave out the {s.summary}")
    parser.add_argument("--no-publish", action="store_true", help="do not copy the results into the checkout's benchmarks/")
    args = section.parse(parser, argv)
    settings = HEADLINE.mode_settings(args.quick).override(runs=args.runs, build_runs=args.build_runs,
                                                           isolate=True if args.isolate else None)
    if args.report_only:
        with open(os.path.join(args.out, "results.json"), encoding="utf-8") as f:
            results = HEADLINE.resummarize(json.load(f))
        for s in SECTIONS:
            if s.key in results:
                results[s.key] = s.resummarize(results[s.key])
        paths = report.write_all(results, os.path.abspath(args.out), RENDERERS)
        if results["mode"] == "full" and not args.no_publish:
            publish(paths)
        print(f"[bench] re-rendered {', '.join(paths.values())}", flush=True)
        return 0
    load = os.getloadavg()[0]
    print(f"[bench] {settings.mode} run into {os.path.abspath(args.out)}; load average {load:.2f} on "
          f"{len(os.sched_getaffinity(0))} cores", flush=True)
    sections = [s for s in SECTIONS if not getattr(args, f"no_{s.key}")]
    results = section.finite(run(args.out, settings, inputs_dir=args.inputs, sections=sections))
    paths = report.write_all(results, os.path.abspath(args.out), RENDERERS)
    if settings.mode == "full" and not args.no_publish:
        copied = publish(paths)
        print(f"[bench] published {', '.join(copied)}" if copied else
              f"[bench] not published: {HERE} is not in a source checkout (no .git beside it)", flush=True)
    print(f"[bench] wrote {', '.join(paths.values())} in {results['duration_s'] / 60:.1f} min", flush=True)
    for t in results["targets"]:
        print(f"[bench] {section.verdict(t)}", flush=True)
    for s in sections:
        for t in results[s.key]["targets"]:
            print(f"[bench] {s.label}: {section.verdict(t)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
