"""The fuzz lane's long budget: seeded mutations of every target, counted by outcome, with peak RSS per target."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import report, section

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
TESTS = os.path.join(os.path.dirname(HERE), "tests")
BAD = ("crash", "hang", "wrong", "unclear")

_TARGETS = r"""
import json, logging, sys, time
sys.path[:0] = [sys.argv[4], sys.argv[5]]
logging.disable(logging.ERROR)  # the decoders' complaints about damaged inputs (nibabel's, the child's relayed lines)
import fuzz_targets
from common import measure
from vidvol.builders import isolation
names, work, inputs = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
for name in names:
    target = fuzz_targets.make(name, work)
    start = time.monotonic()
    result = fuzz_targets.run_budget(target, inputs, seed=int(sys.argv[6]))
    result["seconds"] = round(time.monotonic() - start, 1)
    target.close()
    # The decoding children alive now (VmHWM); not ru_maxrss, which counts the parent's pages between vfork and exec.
    result["children_peak_rss_mib"] = round(max([measure.peak_rss_mib(c.process.pid) for c in isolation._idle] + [0.0]), 1)
    isolation._end_all()
    result["peak_rss_mib"] = round(measure.peak_rss_mib(), 1)
    print(json.dumps({"target": name, **result}), flush=True)
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FuzzSettings(section.Settings):
    inputs: int = 3000  # per target (the first ones are its seeds, unmutated)
    seed: int = 0
    timeout_s: float = 1800.0  # per target
    isolate: bool = True  # a process per target (its own peak RSS); quick: all in one (plumbing, not memory)


def run_targets(names: list[str], work: str, settings: FuzzSettings) -> list[dict[str, Any]]:
    """The targets' budgets, one after the other in one fresh process; a process that fails is one crash per target
    it did not finish."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _TARGETS, ",".join(names), work, str(settings.inputs), TESTS, HERE,
                           str(settings.seed)], capture_output=True, encoding="utf-8", errors="replace",
                          timeout=settings.timeout_s * len(names),
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"target"')]
    for name in names[len(rows):]:
        rows.append({"target": name, "inputs": 0, "crash": 1, "hang": 0, "wrong": 0, "unclear": 0, "example": 0,
                     "skip": 0, "error": 0, "findings": [f"the fuzzing process exited {proc.returncode}: "
                                                         f"{proc.stderr[-1500:]}"],
                     "seconds": round(time.monotonic() - start, 1), "peak_rss_mib": 0.0, "children_peak_rss_mib": 0.0})
    return rows


class Fuzz(section.Section):
    """Every input a mutation makes ends as an example, a skip with its reason or a clear error."""

    key = "fuzz"
    label = "fuzz"
    summary = "fuzz section (sections/fuzz.py: seeded mutations of every fuzz target, outcomes and peak RSS per target)"
    FULL = FuzzSettings(mode="full", runs=1)
    QUICK = FuzzSettings(mode="quick", runs=1, inputs=20, isolate=False)
    method = [
        "tests/fuzz_targets.py's targets, each in a process of its own: `run_budget(target, N, seed)` feeds the "
        "target's seed inputs unmutated, then N minus that many mutations of them (byte flips, set bytes, cuts, "
        "insertions, deletions, duplicated runs; the JSON targets also structural edits), drawn from "
        "`random.Random(seed)`.",
        "Decoding targets run through `isolation.InChild` as a build does (a 30 s deadline: past it, a hang); a "
        "crash is an exception escaping the path users call, a wrong example one that breaks the example's shape, "
        "dtype or range, an unclear error one that does not name its file.",
        "Peak RSS: the fuzzing process's VmHWM (full mode: a process per target; quick: one for all, so cumulative); "
        "the decoding child's, the VmHWM of the child alive at the target's end (one replaced after a crash or a "
        "timeout is not counted).",
    ]

    def measure(self, work: str, settings: FuzzSettings) -> dict[str, Any]:
        sys.path.insert(0, TESTS)
        import fuzz_targets

        names = sorted(fuzz_targets.TARGETS)
        rows = []
        for batch in ([[n] for n in names] if settings.isolate else [names]):
            for row in run_targets(batch, work, settings):
                rows.append(row)
                print(f"[fuzz] {row['target']}: {row['inputs']} inputs in {row['seconds']} s, "
                      + ", ".join(f"{k} {row[k]}" for k in ("example", "skip", "error") + BAD)
                      + f"; peak RSS {row['peak_rss_mib']} MiB (children {row['children_peak_rss_mib']} MiB)", flush=True)
        return {"mode": settings.mode, "inputs_per_target": settings.inputs, "seed": settings.seed,
                "isolated": settings.isolate, "rows": rows}

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        doc["inputs"] = sum(r["inputs"] for r in doc["rows"])
        doc["bad"] = sum(r[k] for r in doc["rows"] for k in BAD)
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        bad = [f"{r['target']}: {r['findings'][0]}" for r in doc["rows"] if r["findings"]]
        return [section.target(f"fuzzed inputs ending in a crash, hang, wrong example or unclear error (of "
                               f"{doc['inputs']})", doc["bad"], 0, op="<=", unit="inputs", note="; ".join(bad)[:600])]

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["## Fuzzing", "",
               f"`benchmarks/sections/fuzz.py` ({doc['mode']} mode, {doc['duration_s'] / 60:.1f} min): "
               f"{doc['inputs_per_target']} inputs per target (seed {doc['seed']}), tests/fuzz_targets.py.", ""]
        out += report.targets_table(doc["targets"], cpu=False) + report.misses(doc["targets"])
        out += report.table(
            ["target", "inputs", "examples", "skips", "errors", "crashes", "hangs", "wrong", "unclear", "time",
             "peak RSS", "children's peak"],
            [[r["target"], r["inputs"], r["example"], r["skip"], r["error"], r["crash"], r["hang"], r["wrong"],
              r["unclear"], f"{r['seconds']:.0f} s", f"{r['peak_rss_mib']:.0f} MiB",
              f"{r['children_peak_rss_mib']:.0f} MiB"] for r in doc["rows"]])
        out += [f"- {line}" for line in doc.get("method", [])] + [""]
        return out


SECTION = Fuzz()

if __name__ == "__main__":
    sys.exit(SECTION.main())
