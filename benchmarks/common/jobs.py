"""A benchmark script run as a job: a fresh Python process, its log, a time limit, the rusage of its tree.

Stdlib only at import (`measure`, `streams` and psutil are imported where used): loadable without the benchmarks
folder on sys.path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


def json_job(script: str, job: dict[str, Any], folder: str, tag: str, timeout: float, *,
             python: str = sys.executable) -> tuple[dict[str, Any], dict[str, float]]:
    """`python SCRIPT JOB.json RESULT.json` (files FOLDER/TAG.*) in a fresh process under `run_command`: its result and
    its costs ({"wall", "cpu" of its tree, "others": cores other processes kept busy}); RuntimeError with the log's
    tail if it fails."""
    from common.streams import busy_cpu_seconds

    os.makedirs(folder, exist_ok=True)
    job_path, result_path, log_path = (os.path.join(folder, f"{tag}.{x}") for x in ("job.json", "result.json", "log"))
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    busy0, start = busy_cpu_seconds(), time.monotonic()
    status, usage, _ = run_command([python, os.path.abspath(script), job_path, result_path], log_path, timeout)
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime if usage else 0.0
    if status != 0:
        what = f"killed after {timeout:.0f} s" if status < 0 else f"exit {status}"
        raise RuntimeError(f"{os.path.basename(script)} job {tag} failed ({what}); log {log_path}:\n{tail(log_path)}")
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    return result, {"wall": wall, "cpu": cpu, "others": max(0.0, busy_cpu_seconds() - busy0 - cpu) / wall}


def run_command(cmd: Sequence[str], log_path: str, timeout: float | None = None, *, interval: float | None = None,
                env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[int, Any, Any]:
    """Runs `cmd` (its output to log_path), SIGKILLs its process tree once it runs past `timeout` seconds: (exit
    status, negative for a signal; rusage of it and the children it reaped; its `TreeSampler` if `interval`, or None)."""
    env = env or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    sampler = None
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        timer = threading.Timer(timeout, kill_tree, args=(proc.pid,)) if timeout else None
        if timer:
            timer.start()
        if interval:
            from common import measure

            sampler = measure.TreeSampler(proc.pid, interval)
            sampler.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # covers the job and the processes it reaped (scheduler, workers)
        finally:
            if timer:
                timer.cancel()
            if sampler:
                sampler.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage, sampler


def kill_tree(pid: int) -> None:
    """SIGKILLs a job process and every process under it (dask workers outlive a SIGTERMed driver mid-task)."""
    import psutil

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


def tail(path: str, size: int = 4000) -> str:
    """The last `size` characters of a job's log (or why it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-size:]
    except OSError as e:
        return f"<cannot read {path}: {e}>"


def job_main(script: str, run: Callable[[dict[str, Any]], dict[str, Any]], argv: Sequence[str] | None = None) -> int:
    """A job script's entry, `python SCRIPT JOB.json RESULT.json`: writes `run(job)` to RESULT.json."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        benchmarks = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        raise SystemExit(f"usage: python benchmarks/{os.path.relpath(os.path.abspath(script), benchmarks)} JOB.json RESULT.json")
    with open(args[0], encoding="utf-8") as f:
        job = json.load(f)
    result = run(job)
    with open(args[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0
