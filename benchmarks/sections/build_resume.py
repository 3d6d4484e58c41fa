"""Resuming a killed build: the resumed run's time against the full build's, and what the resume check costs."""

from __future__ import annotations

import dataclasses
import datetime
import glob
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import inputs, jobs, section
from vidvol.testing import samples

TARGET_RATIO = 0.40
TARGET_GROW_RATIO = 0.15  # a collection grown by 5 %: the grow's build (start-up left out) against the full build's
GROW_BY = 0.05
TARGET_CHECK_S = 10.0
KILL_AT = 0.7

METHOD = (
    "Inputs: the run's hmdb51 clips, each hard-linked under new names (`NAME_rK.avi`, split lines likewise) "
    "`hmdb51_times` times, and its fire_hrr experiments' frames linked in turn into `fire_experiments` "
    "experiments: every clip and frame is decoded for real, without writing as many files.",
    "Full build: `python -m vidvol.beam_jobs.build NAME/CONFIG --num_shards N --direct_num_workers=2 "
    "--direct_running_mode=multi_threading` into a fresh data_dir, timed from the command's start to its exit "
    "(imports included).",
    "Killed build: the same command into another data_dir, SIGKILLed (its whole process group: driver, "
    "worker threads, their decoding children) once the shards with a sidecar (`*.partial.info.json`) reach 70 % of the full build's shards.",
    "Resumed run: the same command again, timed likewise; it keeps the whole shards and builds the rest. Its "
    "shards.json must equal the full build's (the same bytes, checked by SHA-256).",
    "Resume check: a plan of N sources (clip records naming N real files: 1,000 per folder, hard links of one "
    "file), 2,000 shards; `resume.fingerprint` (every file stat'ed, every record hashed), then reading a dead "
    "build's fingerprint, comparing and `resume.keep_shards` on 70 % of the shards there (1 KiB each, hashed).",
)
GROW_METHOD = (
    "Grow: the full build's dataset (a hard-linked copy) built again by the same command over its inputs grown by "
    "5 % (hmdb51: every 20th listed clip hard-linked as `NAME_g.avi` with its split line; fire_hrr: every 20th "
    "experiment's frames linked as a new experiment); its build (the command's main) against the full build's, and "
    "its peak RSS (the driver's or its largest child's) against the full build's. Peak RSS: the driver's VmHWM, read "
    "by itself at exit, and each child's VmHWM sampled every 0.2 s (not `ru_maxrss`, which a child started by "
    "vfork + exec inherits from the driver).")
PHASES_NOTE = ("Each build command runs as `python -c` importing and calling `vidvol.beam_jobs.build`'s main; it notes "
               "when its imports are done and when main returns, so the build alone (main) is told apart from the "
               "start-up (interpreter, imports) and the exit. The check's CPU is this process's, with the fingerprint's "
               "stat process's beside it.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildResumeSettings(section.Settings):
    hmdb51: dict[str, Any]  # inputs.hmdb51_plan arguments (standalone runs)
    fire: dict[str, Any]  # inputs.fire_plan arguments (standalone runs)
    hmdb51_config: str
    fire_config: str
    num_shards: int
    # The builds' inputs: the hmdb51 clips each hard-linked this many times (150 x 80 = 12,000 clips, between
    # HMDB51's 6.8k and Kinetics' 650k), fire_hrr's experiments linked in turn up to this many: builds of about three
    # minutes, long enough that the command's ~10 s of start-up and exit (TensorFlow's import), paid by the resumed
    # run as by the full build, does not decide the ratio, as it does not for the hours-long builds resuming is
    # for. 0: the inputs as they are.
    hmdb51_times: int = 0
    fire_experiments: int = 0
    plan_sources: int  # sources of the resume check's plan
    plan_shards: int = 2000


# Two worker threads of the driver (the video builders decode in child processes, so threads run in parallel):
# the SDK worker processes' start (a minute on a busy 2-core machine) would swamp the comparison of small builds.
WORKERS = ("--direct_num_workers=2", "--direct_running_mode=multi_threading")


# `python -m vidvol.beam_jobs.build ARGS`, noting when the interpreter is up, when the imports are done and when
# main returns (wall clock, into $PHASES_ENV): the command's start-up and exit are told apart from the build.
_PHASES = (
    "import json, os, resource, sys, time; up = time.time(); import vidvol.beam_jobs.build as b; imported = time.time(); "
    "sys.argv[0] = b.__file__; rc = b.main(sys.argv[1:]); done = time.time(); "
    "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')]; "
    "f = open(os.environ['VIDVOL_BENCH_PHASES'], 'w'); "
    "json.dump({'up': up, 'imported': imported, 'main_done': done, 'driver_hwm_kib': hwm[0] if hwm else 0}, f); "
    "f.close(); sys.exit(rc)"
)
PHASES_ENV = "VIDVOL_BENCH_PHASES"


def _cli(name: str, manual: str, data_dir: str, num_shards: int) -> list[str]:
    return [sys.executable, "-c", _PHASES, name, "--manual_dir", manual, "--data_dir", data_dir,
            "--num_shards", str(num_shards), *WORKERS]


def _env(phases: str | None = None) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env[PHASES_ENV] = phases or os.devnull
    return env


def _timed(cmd: list[str], log: str) -> tuple[float, dict[str, float]]:
    """The command's wall time, and its phases: start-up (interpreter and imports), build (its main), exit."""
    phases = log + ".phases.json"
    spawned, start = time.time(), time.monotonic()
    status, _, tree = jobs.run_command(cmd, log, 3600, interval=0.2, env=_env(phases))  # children's own VmHWM
    total, ended = time.monotonic() - start, time.time()
    if status:
        raise RuntimeError(f"{' '.join(cmd)} failed ({status}); see {log}")
    with open(phases, encoding="utf-8") as f:
        t = json.load(f)
    # its phases, then the driver's VmHWM and its largest child's (decoding children, SDK workers)
    driver, child = round(t["driver_hwm_kib"] / 1024, 1), round(tree.descendant_peak_mib(), 1)
    return total, {"interpreter_s": round(t["up"] - spawned, 2), "imports_s": round(t["imported"] - t["up"], 2),
                   "build_s": round(t["main_done"] - t["imported"], 2), "exit_s": round(ended - t["main_done"], 2),
                   "driver_peak_mib": driver, "child_peak_mib": child, "peak_rss_mib": max(driver, child)}


def startup_cost() -> float:
    """Seconds for `python -c "import vidvol.beam_jobs.build"` to start and exit: what every build command pays."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vidvol.beam_jobs.build"], env=_env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return round(time.monotonic() - start, 2)


def _shards_json(data_dir: str, name: str) -> Any:
    (path,) = glob.glob(os.path.join(data_dir, *name.split("/"), "*", "shards.json"))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _build_span(data_dir: str, name: str, newest: bool = True) -> float | None:
    """Seconds from a build log's first line to its last (the build itself: the command's imports left out)."""
    logs = sorted(glob.glob(os.path.join(data_dir, *name.split("/"), "build-*.log")))
    if not logs:
        return None
    with open(logs[-1 if newest else 0], encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    stamps = [ln[:19] for ln in lines if len(ln) > 19 and ln[4] == "-" and ln[10] == " " and ln[13] == ":"]
    if len(stamps) < 2:
        return None
    first, last = (datetime.datetime.strptime(x, "%Y-%m-%d %H:%M:%S") for x in (stamps[0], stamps[-1]))
    return (last - first).total_seconds()


def _kill_at(cmd: list[str], config_dir: str, shards: int, log: str) -> int:
    """Runs `cmd` and SIGKILLs its process group once `KILL_AT` of `shards` have a sidecar; how many had one."""
    wanted = max(1, round(KILL_AT * shards))
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
    done = 0
    try:
        while proc.poll() is None:
            done = len(glob.glob(os.path.join(config_dir, "incomplete.*", "*.partial.info.json")))
            if done >= wanted:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.returncode == -signal.SIGKILL:
        return done
    if proc.returncode:
        raise RuntimeError(f"the build failed ({proc.returncode}) before {wanted} of {shards} shards were done; see {log}")
    return -1  # it finished first (a tiny quick-mode build): the rerun then has nothing to do


def resumed_build(label: str, name: str, manual: str, work: str, num_shards: int) -> dict[str, Any]:
    """Full build, killed build, resumed run of one dataset config."""
    full_dir, killed_dir = os.path.join(work, label, "full"), os.path.join(work, label, "killed")
    for d in (full_dir, killed_dir):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(work, label), exist_ok=True)
    full_s, full_phases = _timed(_cli(name, manual, full_dir, num_shards), full_dir + ".log")
    full = _shards_json(full_dir, name)
    shards = len(full["shards"])
    done = _kill_at(_cli(name, manual, killed_dir, num_shards), os.path.join(killed_dir, *name.split("/")), shards,
                    killed_dir + "-killed.log")
    resumed_s, resumed_phases = _timed(_cli(name, manual, killed_dir, num_shards), killed_dir + "-resumed.log")
    with open(killed_dir + "-resumed.log", encoding="utf-8") as f:
        line = next((x.strip() for x in f if "resuming:" in x), "")
    same = _shards_json(killed_dir, name) == full
    full_build, resumed_build_s = full_phases["build_s"], resumed_phases["build_s"]
    out = {"label": label, "dataset": name, "shards": shards, "shards_done_when_killed": done,
           "full_s": round(full_s, 2), "resumed_s": round(resumed_s, 2), "ratio": round(resumed_s / full_s, 3),
           # the command's main alone: its start-up (interpreter, TensorFlow, TFDS, Beam imports) and exit left out
           "full_build_s": full_build, "resumed_build_s": resumed_build_s,
           "build_ratio": round(resumed_build_s / full_build, 3) if full_build and resumed_build_s else None,
           "full_phases": full_phases, "resumed_phases": resumed_phases,
           "log_span_s": {"full": _build_span(full_dir, name), "resumed": _build_span(killed_dir, name)},
           "resume_line": line, "identical": same}
    print(f"[build_resume] {label}: full {full_s:.1f} s {full_phases}, resumed {resumed_s:.1f} s {resumed_phases} after "
          f"a kill at {done}/{shards} shards ({resumed_s / full_s:.0%}, build alone {out['build_ratio']}); {line}; "
          f"identical: {same}", flush=True)
    return out


def _grown_hmdb51(manual: str, grown: str, fraction: float) -> tuple[int, int]:
    """`manual`'s HMDB51 layout as hard links in `grown`, plus `fraction` more listed clips (`NAME_g.avi`); how many
    were added, of how many listed."""
    shutil.copytree(manual, grown, copy_function=os.link)
    splits = os.path.join(grown, samples.HMDB51_SPLITS_DIR)
    files = sorted(f for f in os.listdir(splits) if f.endswith("_test_split1.txt"))  # the config's split set only
    listed = []
    for f in files:
        with open(os.path.join(splits, f), encoding="utf-8") as lines:
            listed += [(f, line.split()) for line in lines if line.strip() and line.split()[1] != "0"]
    step = max(1, round(1 / fraction))
    added = listed[::step]
    for f, (name, split_id) in added:
        klass = f.rsplit("_test_split", 1)[0]
        folder = os.path.join(grown, samples.HMDB51_ORG_DIR, klass)
        os.link(os.path.join(folder, name), os.path.join(folder, f"{name[:-4]}_g.avi"))
        path = os.path.join(splits, f)
        with open(path, encoding="utf-8") as old:
            text = old.read()
        os.remove(path)  # a hard link of the input's split file: write a new file, never through the link
        with open(path, "w", encoding="utf-8") as out:
            out.write(text + f"{name[:-4]}_g.avi {split_id} \n")
    return len(added), len(listed)


def _grown_fire(manual: str, grown: str, fraction: float) -> tuple[int, int]:
    """`manual`'s fire_hrr frames as hard links in `grown`, plus `fraction` more experiments (frames linked); how many
    were added, of how many."""
    import csv

    shutil.copytree(manual, grown, copy_function=os.link)
    with open(os.path.join(manual, "labels.csv"), newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    experiments = sorted({r[0] for r in rows})
    added = experiments[::max(1, round(1 / fraction))]
    extra = []
    for e in added:
        os.makedirs(os.path.join(grown, "frames", f"{e}_g"))
        for r in (r for r in rows if r[0] == e):
            new = f"frames/{e}_g/{r[1].rsplit('/', 1)[1]}"
            os.link(os.path.join(manual, *r[1].split("/")), os.path.join(grown, *new.split("/")))
            extra.append([f"{e}_g", new, *r[2:]])
    os.remove(os.path.join(grown, "labels.csv"))  # a hard link of the input's: write a new file
    inputs._write_labels(grown, header, [*rows, *extra])
    return len(added), len(experiments)


def grown_build(label: str, name: str, manual: str, work: str, num_shards: int, full: dict[str, Any]) -> dict[str, Any]:
    """The full build's dataset (hard-linked copy) grown by `GROW_BY` of its sources with the same command."""
    full_dir, grow_dir = os.path.join(work, label, "full"), os.path.join(work, label, "grow")
    grown_manual = os.path.join(work, label, "grown_manual")
    for d in (grow_dir, grown_manual):
        shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(full_dir, grow_dir, copy_function=os.link)  # a grow replaces files, never writes into them
    added, of = (_grown_hmdb51 if name.startswith("hmdb51") else _grown_fire)(manual, grown_manual, GROW_BY)
    grow_s, phases = _timed(_cli(name, grown_manual, grow_dir, num_shards), grow_dir + ".log")
    with open(grow_dir + ".log", encoding="utf-8") as f:
        line = next((x.strip() for x in f if " grown: " in x), "")
    out = {"label": label, "dataset": name, "added": added, "sources": of, "grow_s": round(grow_s, 2), "grow_phases": phases,
           "grow_build_s": phases["build_s"], "full_build_s": full["full_build_s"],
           "build_ratio": round(phases["build_s"] / full["full_build_s"], 3) if full["full_build_s"] else None,
           "grow_line": line, "peak_rss_mib": phases.get("peak_rss_mib"),
           "full_peak_rss_mib": full["full_phases"].get("peak_rss_mib")}
    print(f"[build_resume] {label} grown by {added} of {of} sources: {grow_s:.1f} s {phases}, build alone {out['build_ratio']} "
          f"of the full build's; {line}", flush=True)
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def resume_check(work: str, num_sources: int, num_shards: int) -> dict[str, Any]:
    """The resume check's cost on a plan of `num_sources` sources (see METHOD)."""
    from vidvol.builders.transforms import clips
    from vidvol.builders.writer import plan, resume, shards_file

    root = os.path.join(work, "plan")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    start = time.monotonic()
    sources = []
    for i in range(num_sources):
        folder = os.path.join(root, f"c{i // 1000:04d}")
        path = os.path.join(folder, f"v{i:07d}.avi")
        if i % 1000 == 0:  # one file per folder, hard-linked 999 times (a file takes at most ~65k links)
            os.makedirs(folder)
            one = path
            with open(one, "wb") as f:
                f.write(os.urandom(4096))
        else:
            os.link(one, path)
        key = f"c{i // 1000:04d}/v{i:07d}.avi"
        sources.append((key, clips.ClipSource(path=path, key=key, features={"label": i % 400, "video_id": key},
                                              origin=f"train.csv line {i + 2}")))
    made_s = time.monotonic() - start
    old = os.path.join(root, "incomplete.DEAD00_1.0.0")
    new = os.path.join(root, "incomplete.LIVE00_1.0.0")
    os.makedirs(old)
    os.makedirs(new)
    start = time.monotonic()
    tasks = plan.plan_shards("train", sources, num_shards, lambda i, n: f"{new}/x-train.tfrecord-{i:05d}-of-{n:05d}.partial")
    plan_s = time.monotonic() - start
    kwargs = dict(dataset="bench/c", version="1.0.0", vidvol_version="0", tfds_version="0", file_format="tfrecord",
                  config={"name": "'c'"}, features="{}", options={}, tasks={"train": tasks})
    resume.write_fingerprint(old, resume.fingerprint(**kwargs))
    for t in tasks[: round(KILL_AT * len(tasks))]:  # the dead build's whole shards
        name = os.path.join(old, os.path.basename(t.path))
        with open(name, "wb") as f:
            f.write(os.urandom(1024))
        digest, size = shards_file.file_digest(name)
        with open(name + ".info.json", "w", encoding="utf-8") as f:
            json.dump({"split": "train", "index": t.index, "keys": [s[0] for s in t.sources], "skips": [],
                       "num_bytes": size, "file_bytes": size, "sha256": digest}, f)
    start, cpu, child = time.monotonic(), time.process_time(), _children_cpu()
    doc = resume.fingerprint(**kwargs)
    fingerprint_s, fingerprint_cpu = time.monotonic() - start, time.process_time() - cpu
    child_cpu = _children_cpu() - child  # its stat process (`fingerprint._StatChild`)
    start, cpu = time.monotonic(), time.process_time()
    same = resume.canonical(resume.read_fingerprint(old)) == resume.canonical(doc)
    kept = resume.keep_shards(tasks, [old]) if same else None
    keep_s, keep_cpu = time.monotonic() - start, time.process_time() - cpu
    shutil.rmtree(root, ignore_errors=True)
    total = fingerprint_s + keep_s
    out = {"sources": num_sources, "shards": len(tasks), "files_made_s": round(made_s, 1), "plan_s": round(plan_s, 2),
           "fingerprint_s": round(fingerprint_s, 2), "compare_and_keep_s": round(keep_s, 2), "check_s": round(total, 2),
           "check_cpu_s": round(fingerprint_cpu + keep_cpu, 2),  # this process's CPU (a busy machine stretches wall time)
           "check_child_cpu_s": round(child_cpu, 2),  # its stat child's, beside it
           "kept": kept.count if kept else 0, "fingerprint_bytes": len(json.dumps(doc)),
           "digest": hashlib.sha256(resume.canonical(doc).encode()).hexdigest()[:16]}
    print(f"[build_resume] check on {num_sources} sources: fingerprint {fingerprint_s:.2f} s, compare + keep "
          f"{out['kept']} shards {keep_s:.2f} s (planning itself {plan_s:.2f} s)", flush=True)
    return out


def _alone_note(b: dict[str, Any]) -> str:
    """A build row's note: its main alone."""
    return (f"the build alone (the command's start-up and exit left out): {b['resumed_build_s']:.1f} s "
            f"vs {b['full_build_s']:.1f} s, {b['build_ratio']:.0%}") if b.get("build_ratio") else ""


def _fixed(b: dict[str, Any]) -> str:
    """A build row's start-up and exit seconds (interpreter, imports, exit), full / resumed."""
    return " / ".join(f"{p['interpreter_s'] + p['imports_s'] + p['exit_s']:.1f} s"
                      for p in (b["full_phases"], b["resumed_phases"]))


class BuildResume(section.Section):
    key = "build_resume"
    label = "build resume"
    summary = "build resume section (sections/build_resume.py: a killed build's resumed run vs the full build, resume check cost)"
    FULL = BuildResumeSettings(mode="full", runs=1, hmdb51=dict(num_classes=4, videos_per_class=20, num_frames=(60, 200),
                               height=240, width=320), fire=dict(experiments=10, frames=161, height=540, width=960),
                               hmdb51_config="split1_20x64x64", fire_config="161x135x240", num_shards=20,
                               hmdb51_times=150, fire_experiments=400, plan_sources=1_000_000)
    QUICK = BuildResumeSettings(mode="quick", runs=1, hmdb51=dict(num_classes=2, videos_per_class=5, num_frames=(20, 40),
                                height=120, width=160), fire=dict(experiments=4, frames=40, height=135, width=240),
                                hmdb51_config="split1_20x64x64", fire_config="161x135x240", num_shards=4,
                                hmdb51_times=2, fire_experiments=6, plan_sources=10_000, plan_shards=40)
    method = METHOD

    def measure(self, work: str, settings: BuildResumeSettings, *, hmdb51_manual: str, fire_manual: str) -> dict[str, Any]:
        plans = []
        if settings.hmdb51_times > 1:
            plans.append(inputs.hmdb51_replicated_plan(os.path.join(work, "inputs", "hmdb51"), hmdb51_manual,
                                                       settings.hmdb51_times))
            hmdb51_manual = plans[-1].root
        if settings.fire_experiments:
            plans.append(inputs.fire_replicated_plan(os.path.join(work, "inputs", "fire_hrr"), fire_manual,
                                                     settings.fire_experiments))
            fire_manual = plans[-1].root
        inputs.write_inputs(plans)
        clips = sum(f.endswith(".avi") for _, _, files in os.walk(hmdb51_manual) for f in files)
        counts = {"hmdb51_clips": clips if settings.hmdb51_times else None,
                  "fire_experiments": settings.fire_experiments or None}
        builds = [resumed_build("fire_hrr", f"fire_hrr/{settings.fire_config}", fire_manual, work, settings.num_shards),
                  resumed_build("hmdb51", f"hmdb51/{settings.hmdb51_config}", hmdb51_manual, work, settings.num_shards)]
        grows = [grown_build(b["label"], b["dataset"], m, work, settings.num_shards, b)
                 for b, m in zip(builds, (fire_manual, hmdb51_manual))]
        return {"mode": settings.mode, "runs": settings.runs, "cores": len(os.sched_getaffinity(0)),
                "builds": builds, "grows": grows, "inputs": counts, "startup_s": startup_cost(),
                "check": resume_check(work, settings.plan_sources, settings.plan_shards)}

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [section.target(f"{b['label']}: resumed run after a kill at {b['shards_done_when_killed']}/{b['shards']} "
                               "shards vs the full build", b["ratio"], TARGET_RATIO, op="<=",
                               note=("" if b["identical"] else "its shards.json differs from the full build's; ")
                               + ("the build finished before it could be killed; " if b["shards_done_when_killed"] < 0
                                  else "")
                               + _alone_note(b))
                for b in doc["builds"]]
        rows += [section.target(f"{g['label']}: grown by {g['added']} of {g['sources']} sources, the grow's build vs the "
                                "full build's (start-up and exit left out)", g["build_ratio"], TARGET_GROW_RATIO, op="<=",
                                note=g["grow_line"]) for g in doc["grows"] if g["build_ratio"] is not None]
        rows += [section.target(f"{g['label']}: the grow's peak RSS vs the full build's (MiB)", g["peak_rss_mib"],
                                g["full_peak_rss_mib"], op="<=", unit="MiB")
                 for g in doc["grows"] if g["peak_rss_mib"] and g["full_peak_rss_mib"]]
        c = doc["check"]
        cpu = f"{c['check_cpu_s']:.1f} s of CPU" + (f" (and its stat process's {c['check_child_cpu_s']:.1f} s beside it)"
                                                    if c["check_child_cpu_s"] else "")
        rows.append(section.target(f"resume check on a {c['sources']:,}-source plan", c["check_s"], TARGET_CHECK_S,
                                   op="<=", unit="s", note=cpu))
        return rows

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        from common import report

        out = ["## Resuming a killed build", "",
               f"`benchmarks/sections/build_resume.py` ({doc['mode']} mode, {doc['duration_s'] / 60:.1f} min, {doc['cores']} cores).", ""]
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
        counts = doc.get("inputs") or {}
        if any(counts.values()):
            out += ["Inputs: " + ", ".join(text for text in (
                f"hmdb51 {counts['hmdb51_clips']:,} clips" if counts.get("hmdb51_clips") else "",
                f"fire_hrr {counts['fire_experiments']} experiments" if counts.get("fire_experiments") else "") if text)
                    + " (hard links of the run's generated inputs, each decoded for real).", ""]
        out += report.table(["dataset", "shards", "killed at", "full build", "resumed run", "resumed / full",
                             "start-up + exit (full / resumed)", "the build alone", "identical"],
                            [[b["dataset"], str(b["shards"]), str(b["shards_done_when_killed"]), f"{b['full_s']:.1f} s",
                              f"{b['resumed_s']:.1f} s", f"{b['ratio']:.0%}", _fixed(b),
                              f"{b['resumed_build_s']:.1f} s / {b['full_build_s']:.1f} s = {b['build_ratio']:.0%}"
                              if b.get("build_ratio") else "-", str(b["identical"])] for b in doc["builds"]])
        out += [PHASES_NOTE, ""]
        if doc.get("startup_s"):
            out += [f"Starting and ending `python -c \"import vidvol.beam_jobs.build\"` alone takes {doc['startup_s']:.1f} s "
                    "here (interpreter, TensorFlow, TFDS, Beam): every build command pays it, the resumed run as much "
                    "as the full build.", ""]
        c = doc["check"]
        out += report.table(["plan", "fingerprint", "compare + keep", "check", "planning itself", "fingerprint size"],
                            [[f"{c['sources']:,} sources / {c['shards']} shards", f"{c['fingerprint_s']:.2f} s",
                              f"{c['compare_and_keep_s']:.2f} s ({c['kept']} kept)", f"{c['check_s']:.2f} s",
                              f"{c['plan_s']:.2f} s", f"{c['fingerprint_bytes'] / 1024:.0f} KiB"]])
        out += [f"- {line}" for line in doc["method"]] + [f"- {GROW_METHOD}", ""]
        return out

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        return {"hmdb51_manual": os.path.join(ctx.inputs_dir, "hmdb51"),
                "fire_manual": os.path.join(ctx.inputs_dir, "fire_hrr")}

    def run_settings(self, ctx: section.Context) -> BuildResumeSettings:
        base = self.mode_settings(ctx.settings.quick)
        return dataclasses.replace(base, hmdb51_config=ctx.settings.hmdb51_config, fire_config=ctx.settings.fire_config)

    def standalone_inputs(self, out: str, settings: BuildResumeSettings, inputs_dir: str, args: Any) -> dict[str, Any]:
        hmdb, fire = os.path.join(inputs_dir, "hmdb51"), os.path.join(inputs_dir, "fire_hrr")
        inputs.write_inputs([inputs.hmdb51_plan(hmdb, **settings.hmdb51), inputs.fire_plan(fire, **settings.fire)],
                            workers=len(os.sched_getaffinity(0)))
        return {"hmdb51_manual": hmdb, "fire_manual": fire}


SECTION = BuildResume()

if __name__ == "__main__":
    sys.exit(SECTION.main())
