"""What starting vidvol costs: `import vidvol`, `tfds.builder`, `--help` vs `import tensorflow_datasets`."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import report, section

BASELINE = "tfds"
# key -> (what it is, the Python code or module command run in a fresh interpreter)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "tfds": ("import tensorflow_datasets", ["-c", "import tensorflow_datasets"]),
    "vidvol": ("import vidvol", ["-c", "import vidvol"]),
    "builder": ('import vidvol; tfds.builder("hmdb51").info',
                ["-c", "import vidvol, tensorflow_datasets as tfds; tfds.builder('hmdb51').info"]),
    "help": ("python -m vidvol --help", ["-m", "vidvol", "--help"]),
    "verify_help": ("python -m vidvol verify --help", ["-m", "vidvol", "verify", "--help"]),
    "tensorflow": ("import tensorflow", ["-c", "import tensorflow"]),
}
HEAVY = ("tensorflow", "apache_beam", "cv2", "keras")
MAX_HELP_S = 1.5
MAX_RATIO = 1.5
METHOD = [
    "Each command a fresh interpreter (this benchmark's Python, TF_CPP_MIN_LOG_LEVEL=2, in the section's work folder, "
    "bytecode written as on a user's machine), timed from its start to its exit, after one warm-up run of each; a round runs every command once, the order turning by one each round; medians "
    "over the rounds, ratios to `import tensorflow_datasets` taken within a round.",
    "CPU: user + system seconds of the finished child (wait4). Peak RSS: its VmHWM, sampled every 20 ms in one more "
    "run. Imported: the heavy modules a `-X importtime` run of the command lists.",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportSettings(section.Settings):
    timeout_s: float = 120.0  # per command run


def _argv(key: str) -> list[str]:
    return [sys.executable, *COMMANDS[key][1]]


def _env() -> dict[str, str]:
    """The commands' environment: bytecode written and read as on a user's machine (PYTHONDONTWRITEBYTECODE dropped)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # else every run compiles vidvol's modules again (an editable install)
    return env


def timed_run(key: str, work: str, timeout: float) -> dict[str, float]:
    """One run of a command: wall and CPU seconds, and how busy the rest of the machine kept its cores."""
    from common import jobs
    from common.streams import busy_cpu_seconds

    busy0, start = busy_cpu_seconds(), time.monotonic()
    status, usage, _ = jobs.run_command(_argv(key), os.devnull, timeout, env=_env(), cwd=work)
    wall = time.monotonic() - start
    if status != 0:
        why = f"killed after {timeout:.0f} s" if wall >= timeout else f"exited with {status}"
        raise RuntimeError(f"{COMMANDS[key][0]!r} {why} (run it by hand: {' '.join(_argv(key))})")
    cpu = usage.ru_utime + usage.ru_stime
    others = max(0.0, (busy_cpu_seconds() - busy0 - cpu) / wall)
    return {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "other_cores_busy": round(others, 3)}


def peak_rss_mib(key: str, work: str, timeout: float) -> float:
    """The command's VmHWM (MiB), sampled every 20 ms."""
    from common import jobs

    status, _, sampler = jobs.run_command(_argv(key), os.path.join(work, f"{key}.log"), timeout, interval=0.02)
    if status != 0:
        raise RuntimeError(f"{COMMANDS[key][0]!r} exited with {status}: {jobs.tail(os.path.join(work, f'{key}.log'))}")
    return round(sampler.peaks.get(sampler.pid, {}).get("hwm", 0) / 2**20, 1)


def heavy_imports(key: str, work: str, timeout: float) -> list[str]:
    """Which of HEAVY the command imports (its `-X importtime` lines)."""
    argv = [sys.executable, "-X", "importtime", *COMMANDS[key][1]]
    proc = subprocess.run(argv, cwd=work, env=_env(), capture_output=True, text=True, timeout=timeout)
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return [m for m in HEAVY if any(n == m or n.startswith(m + ".") for n in names)]


class ImportCost(section.Section):
    """Start-up of vidvol's light paths against TFDS's own import."""

    key = "imports"
    label = "imports"
    summary = "imports section (sections/imports.py: import vidvol, tfds.builder, --help vs import tensorflow_datasets)"
    FULL = ImportSettings(mode="full", runs=7)
    QUICK = ImportSettings(mode="quick", runs=1)
    method = METHOD

    def measure(self, work: str, settings: ImportSettings, **inputs: Any) -> dict[str, Any]:
        keys = list(COMMANDS)
        for key in keys:  # warm-up, not counted: bytecode written, files in the page cache
            timed_run(key, work, settings.timeout_s)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in keys}
        for r in range(settings.runs):
            for key in keys[r % len(keys):] + keys[: r % len(keys)]:
                runs[key].append(timed_run(key, work, settings.timeout_s))
            print(f"[imports] round {r + 1}: " + ", ".join(f"{k} {runs[k][-1]['wall_s']:.2f} s" for k in keys), flush=True)
        results = {key: {"command": COMMANDS[key][0], "peak_rss_mib": peak_rss_mib(key, work, settings.timeout_s),
                         "imports": heavy_imports(key, work, settings.timeout_s)} for key in keys}
        return {"mode": settings.mode, "rounds": settings.runs, "cores": len(os.sched_getaffinity(0)),
                "python": sys.executable, "runs": runs, "results": results}

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        base = doc["runs"][BASELINE]
        for key, r in doc["results"].items():
            own = doc["runs"][key]
            r["wall_s"] = round(statistics.median(x["wall_s"] for x in own), 3)
            r["wall_s_runs"] = [x["wall_s"] for x in own]
            r["cpu_s"] = round(statistics.median(x["cpu_s"] for x in own), 3)
            r["ratio"] = round(statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(own, base)), 3)
            r["cpu_ratio"] = round(statistics.median(a["cpu_s"] / b["cpu_s"] for a, b in zip(own, base)), 3)
            r["other_cores_busy"] = round(statistics.median(x["other_cores_busy"] for x in own), 3)
        doc["notes"] = section.run_notes(doc, doc["results"], "the CPU seconds and CPU ratios are steadier")
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        r = doc["results"]
        return [
            section.target("python -m vidvol --help: wall seconds", r["help"]["wall_s"], MAX_HELP_S, op="<=", unit="s",
                           cpu_value=r["help"]["cpu_s"], note="cpu_value: its CPU seconds"),
            section.target("import vidvol vs import tensorflow_datasets", r["vidvol"]["ratio"], MAX_RATIO, op="<=",
                           cpu_value=r["vidvol"]["cpu_ratio"]),
            section.target('tfds.builder("hmdb51").info after import vidvol vs import tensorflow_datasets',
                           r["builder"]["ratio"], MAX_RATIO, op="<=", cpu_value=r["builder"]["cpu_ratio"]),
        ]

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["## Imports: what starting vidvol costs", "",
               f"`benchmarks/sections/imports.py` ({doc['mode']} mode, {doc.get('duration_s', 0) / 60:.1f} min): each command a "
               f"fresh interpreter, {doc['rounds']} round(s) on {doc['cores']} cores.", ""]
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
        out += report.table(
            ["command", "wall s (median)", "rounds", "CPU s", "vs import tensorflow_datasets (wall, CPU)", "peak RSS MiB",
             "imports", "cores busy (others)"],
            [[f"`{r['command']}`", f"{r['wall_s']:.2f}", ", ".join(f"{x:.2f}" for x in r["wall_s_runs"]),
              f"{r['cpu_s']:.2f}", f"{r['ratio']:.2f}x, {r['cpu_ratio']:.2f}x", f"{r['peak_rss_mib']:.0f}",
              ", ".join(r["imports"]) or "none of " + "/".join(HEAVY), f"{r['other_cores_busy']:.2f}"]
             for r in doc["results"].values()])
        out += [f"- {line}" for line in doc.get("notes", []) + doc.get("method", [])] + [""]
        return out


SECTION = ImportCost()

if __name__ == "__main__":
    sys.exit(SECTION.main())
