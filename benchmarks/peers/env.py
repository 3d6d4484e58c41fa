"""The peers' own virtual environment: made from setup.cfg's `bench` extra, reused while the extra is unchanged."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout (benchmarks/ is in it)
SETUP_CFG = os.path.join(REPO, "setup.cfg")
EXTRA = "bench"
STAMP = "vidvol-bench-extra.txt"
PIP = ("--disable-pip-version-check", "--progress-bar", "off")


class PeersUnavailable(RuntimeError):
    """The peers' venv is not there (and may not be made now), or could not be made."""


def bench_requirements(setup_cfg: str = SETUP_CFG, extra: str = EXTRA) -> list[str]:
    """The requirement lines of one extra of setup.cfg's `[options.extras_require]` (comments left out)."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#",))
    if not parser.read(setup_cfg, encoding="utf-8"):
        raise FileNotFoundError(f"{setup_cfg}: not found (the peers' requirements are its '{extra}' extra)")
    try:
        value = parser["options.extras_require"][extra]
    except KeyError as e:
        raise KeyError(f"{setup_cfg}: no '{extra}' in [options.extras_require]") from e
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def python_of(venv: str) -> str:
    return os.path.join(os.path.abspath(venv), "bin", "python")


def missing(venv: str, requirements: Sequence[str]) -> str | None:
    """Why `venv` cannot be used as the peers' venv for `requirements`, or None when it can."""
    if not os.path.isfile(python_of(venv)):
        return f"no peers venv at {venv} (`make bench` makes it from setup.cfg's '{EXTRA}' extra)"
    try:
        with open(os.path.join(venv, STAMP), encoding="utf-8") as f:
            stamped = f.read().split("\n")
    except OSError:
        return f"{venv} has no {STAMP}: it was not made (or not finished) by the benchmark"
    if [x for x in stamped if x] != list(requirements):
        return f"{venv} was made for other requirements than setup.cfg's '{EXTRA}' extra now names"
    return None


def ensure(venv: str, *, create: bool, log_path: str, timeout: float = 1800.0) -> str:
    """The peers' python: the venv as it is when its stamp matches, else (re)installed when `create`."""
    requirements = bench_requirements()
    reason = missing(venv, requirements)
    if reason is None:
        return python_of(venv)
    if not create:
        raise PeersUnavailable(reason)
    print(f"[peers] installing the '{EXTRA}' extra into {venv}: {' '.join(requirements)}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        steps = [[sys.executable, "-m", "venv", venv]] if not os.path.isfile(python_of(venv)) else []
        steps.append([python_of(venv), "-m", "pip", "install", *PIP, *requirements])
        for cmd in steps:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            except subprocess.TimeoutExpired as e:
                raise PeersUnavailable(f"{' '.join(cmd[:4])} ran past {timeout:.0f} s (log: {log_path})") from e
            if proc.returncode != 0:
                log.close()
                from common import jobs

                raise PeersUnavailable(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{jobs.tail(log_path, 3000)}")
    with open(os.path.join(venv, STAMP), "w", encoding="utf-8") as f:
        f.write("\n".join(requirements) + "\n")
    return python_of(venv)
