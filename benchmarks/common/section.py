"""The skeleton every benchmark section shares: settings per mode, target rows, and the section itself.

Stdlib only: tests load it without the benchmarks folder on sys.path (`report` is imported where a run writes).
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, ClassVar

OPS = (">=", "<=")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What every mode of every section has; a section subclasses it with its own sizes."""

    mode: str  # "full" (`make bench`) or "quick" (`make bench-quick`, the tests: plumbing, not speed)
    runs: int  # timed repetitions of each measurement (medians reported)

    @property
    def quick(self) -> bool:
        return self.mode == "quick"

    def override(self, **changes: Any) -> Settings:
        """A copy with the changes that are not None (command-line overrides)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def default_inputs_dir(out: str, mode: str) -> str:
    """OUT/inputs in full mode, OUT/inputs_<mode> otherwise: a quick run never replaces a full run's inputs."""
    return os.path.join(out, "inputs" if mode == "full" else f"inputs_{mode}")


def target(name: str, value: float, threshold: float, *, op: str = ">=", unit: str = "x", note: str = "",
           cpu_value: float | None = None) -> dict[str, Any]:
    """One promise, `value op threshold` (op '>=' or '<='), as its results.json row: name, value, target, op, unit
    ("x" ratio, "%" fraction or growth, or a unit such as "GiB", "s"), pass (a non-finite value never meets it), score
    (how far the value is from its target, as a factor where >= 1 meets it; growth rates as 1 + rate), note (why it
    misses, or what else the row measured) and the CPU-normalized value when there is one."""
    if op not in OPS:
        raise ValueError(f"op must be '>=' or '<=', got {op!r}")
    met = value >= threshold if op == ">=" else value <= threshold
    if op == ">=":
        score = value / threshold
    elif unit == "%":
        score = (1.0 + threshold) / max(1.0 + value, 1e-9)
    else:
        score = threshold / max(value, 1e-9)
    row = {"name": name, "value": float(value), "target": float(threshold), "op": op, "unit": unit,
           "pass": bool(met and math.isfinite(value)), "score": score, "note": note}
    if cpu_value is not None:
        row["cpu_value"] = float(cpu_value)
    return row


def memory_targets(label: str, results: dict[str, Any], flat: float, worst_gib: float, *,
                   driver: bool = False) -> list[dict[str, Any]]:
    """Builds' worker (and driver) peak RSS growth from the fewest experiments to the most, and the worst worker's."""
    counts = sorted(results, key=int)
    lo, hi = results[counts[0]], results[counts[-1]]
    rows = [target(f"{label}: {who} peak RSS growth {counts[0]} -> {counts[-1]} experiments",
                   hi[f"{who}_peak_mib"] / max(lo[f"{who}_peak_mib"], 1e-9) - 1, flat, op="<=", unit="%")
            for who in (("worker", "driver") if driver else ("worker",))]
    return rows + [target(f"{label}: worst worker peak RSS", max(r["worker_peak_mib"] for r in results.values()) / 1024,
                          worst_gib, op="<=", unit="GiB")]


def verdict(row: dict[str, Any]) -> str:
    """A target row as one line: 'PASS name: value (target op threshold)'."""
    return (f"{'PASS' if row['pass'] else 'MISS'} {row['name']}: {row['value']:.3g} "
            f"(target {row['op']} {row['target']:g})")


def run_notes(doc: dict[str, Any], results: dict[str, Any], steadier: str) -> list[str]:
    """The notes every timed section ends with: how busy other processes kept the cores, and quick mode's caveat."""
    others = max(x["other_cores_busy"] for x in results.values())
    notes = [f"Other processes kept up to {others:.2f} of the {doc['cores']} cores busy during the timed windows"
             + (f": the wall-clock rates are understated and noisy; {steadier}." if others > 0.25
                else " (effectively a quiet machine).")]
    if doc["mode"] == "quick":
        notes.append("Quick mode: tiny inputs and batches, one round; it checks the plumbing, not speed.")
    return notes


def parser_(doc: str, out: str, quick: str, runs: str) -> argparse.ArgumentParser:
    """The options every benchmark script takes: --out, --quick, --inputs, --runs (`doc`'s first line describes it)."""
    parser = argparse.ArgumentParser(description=doc.strip().split("\n", 1)[0])
    parser.add_argument("--out", required=True, help=out)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--inputs", default=None, help="folder holding (or to hold) the generated inputs "
                        "(default OUT/inputs, quick: OUT/inputs_quick)")
    parser.add_argument("--runs", type=int, default=None, help=runs)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed arguments, with logging set up for a benchmark script."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return parser.parse_args(argv)


def finite(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc`, or a ValueError naming its non-finite numbers."""
    from common import report

    bad = report.finite_numbers(doc)
    if bad:
        raise ValueError(f"non-finite numbers in the results: {bad[:10]}")
    return doc


class Context:
    """One `make bench` run: its folders, its settings, its phase timings and the results so far."""

    def __init__(self, out: str, settings: Settings, inputs_dir: str | None = None):
        self.out = os.path.abspath(out)
        self.inputs_dir = os.path.abspath(inputs_dir or default_inputs_dir(self.out, settings.mode))
        self.settings = settings
        self.cores = len(os.sched_getaffinity(0))
        self.phases: dict[str, float] = {}
        self.results: dict[str, Any] = {}
        os.makedirs(self.out, exist_ok=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def phase(self, name: str, start: float) -> None:
        """Records (and prints) how long a phase that began at `start` (time.monotonic()) took."""
        self.phases[name] = round(time.monotonic() - start, 1)
        print(f"[bench] {name} done in {self.phases[name]:.0f} s", flush=True)


class Section(abc.ABC):
    """One part of the benchmark: what it measures, its promises, how it reads in RESULTS.md."""

    key: ClassVar[str]  # its document's key in results.json; standalone: OUT/KEY.json, OUT/KEY.md
    label: ClassVar[str]  # how run.py's summary lines name it: "[bench] LABEL: PASS ..."
    summary: ClassVar[str]  # what `run.py --no-KEY` leaves out
    FULL: ClassVar[Settings]
    QUICK: ClassVar[Settings]
    method: ClassVar[Sequence[str]] = ()  # how it measures (RESULTS.md lists it)

    @abc.abstractmethod
    def measure(self, work: str, settings: Settings, **inputs: Any) -> dict[str, Any]:
        """Measures into the folder `work`; returns the document's records (no targets yet)."""

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Derived figures and notes, from the records alone (so a stored document can be redone)."""
        return doc

    @abc.abstractmethod
    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The section's promises (`target` rows) and whether the document meets them."""

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        """Markdown lines of the section (in RESULTS.md after the build tables; standalone, KEY.md)."""
        raise NotImplementedError(f"{type(self).__name__} has no markdown")

    def run_settings(self, ctx: Context) -> Settings:
        """Its settings inside a benchmark run: by default those of the run's mode."""
        return self.mode_settings(ctx.settings.quick)

    def run_inputs(self, ctx: Context) -> dict[str, Any]:
        """Its `measure` inputs inside a benchmark run (the run's inputs and builds); by default none."""
        return {}

    def mode_settings(self, quick: bool) -> Settings:
        return self.QUICK if quick else self.FULL

    def measure_section(self, work: str, settings: Settings, **inputs: Any) -> dict[str, Any]:
        """Measures (timed) and returns the whole document: records, summaries, targets, method."""
        start = time.monotonic()
        os.makedirs(work, exist_ok=True)
        doc = self.measure(work, settings, **inputs)
        doc["duration_s"] = round(time.monotonic() - start, 1)
        return self.resummarize(doc)

    def resummarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Recomputes summaries, notes, targets and method of a document from its records."""
        doc = self.summarize(doc)
        doc["targets"] = self.targets(doc)
        doc["method"] = list(self.method)
        return doc

    def in_run(self, ctx: Context) -> dict[str, Any]:
        """Measures the section inside a benchmark run (into OUT/KEY, phase KEY)."""
        start = time.monotonic()
        doc = self.measure_section(ctx.path(self.key), self.run_settings(ctx), **self.run_inputs(ctx))
        ctx.phase(self.key, start)
        return doc

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The section's own command-line options (beyond --out, --quick, --inputs, --runs, --resummarize)."""
        return None

    def apply_arguments(self, settings: Settings, args: argparse.Namespace) -> Settings:
        """The settings with the section's own command-line overrides."""
        return settings

    def standalone_inputs(self, out: str, settings: Settings, inputs_dir: str,
                          args: argparse.Namespace) -> dict[str, Any]:
        """Writes (or reuses) what a standalone run measures; returns the `measure` inputs."""
        return {}

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Standalone run: measures into OUT/KEY (or --resummarize OUT/KEY.json), writes KEY.json and KEY.md."""
        parser = parser_(sys.modules[type(self).__module__].__doc__ or self.key,
                         f"work folder (inputs, datasets, {self.key}.json, {self.key.upper()}.md)",
                         "tiny sizes, one run (smoke)", "override the timed runs")
        parser.add_argument("--resummarize", action="store_true", help=f"recompute summaries, notes and targets of "
                            f"OUT/{self.key}.json and re-render; measure nothing")
        self.add_arguments(parser)
        args = parse(parser, argv)
        settings = self.apply_arguments(self.mode_settings(args.quick).override(runs=args.runs), args)
        out = os.path.abspath(args.out)
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"{self.key}.json")
        if args.resummarize:
            with open(path, encoding="utf-8") as f:
                doc = self.resummarize(json.load(f))
        else:
            inputs_dir = os.path.abspath(args.inputs or default_inputs_dir(out, settings.mode))
            doc = self.measure_section(os.path.join(out, self.key), settings,
                                       **self.standalone_inputs(out, settings, inputs_dir, args))
        from common import report

        report.write_json(finite(doc), path)
        with open(os.path.join(out, f"{self.key.upper()}.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.markdown(doc)))
        print(f"[{self.key}] wrote {path} and {self.key.upper()}.md"
              + ("" if args.resummarize else f" in {doc['duration_s'] / 60:.1f} min"), flush=True)
        for row in doc["targets"]:
            print(f"[{self.key}] {verdict(row)}", flush=True)
        return 0


class Hmdb51Section(Section):
    """A section over the run's hmdb51 inputs and TFRecord build (its settings: `hmdb51`, `config`, `batch_size`)."""

    def run_settings(self, ctx: Context) -> Settings:
        s = ctx.settings
        return dataclasses.replace(self.mode_settings(s.quick), hmdb51=dict(s.hmdb51), config=s.hmdb51_config,
                                   runs=s.runs, batch_size=s.hmdb51_batch)

    def run_inputs(self, ctx: Context) -> dict[str, Any]:
        return {"manual_dir": os.path.join(ctx.inputs_dir, "hmdb51"), "tfrecord_dir": ctx.path("data", "hmdb51")}

    def standalone_inputs(self, out: str, settings: Any, inputs_dir: str, args: argparse.Namespace) -> dict[str, Any]:
        """The hmdb51 inputs of the mode (reused when present)."""
        from common import inputs

        root = os.path.join(inputs_dir, "hmdb51")
        inputs.write_inputs([inputs.hmdb51_plan(root, **settings.hmdb51)], workers=len(os.sched_getaffinity(0)))
        return {"manual_dir": root}
