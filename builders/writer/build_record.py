"""`build.json`: when a prepared dataset was built, how long it took, on which runner, by which vidvol.

Written next to the skip report by every build; `python -m vidvol report` shows it on the dataset's card.
For a dataset built before vidvol wrote it, `from_log` reads what the build log next to the version
folder says (its date and duration; no runner).
"""

from __future__ import annotations

import datetime
import glob
import os
import platform
import re
from typing import Any

from vidvol.builders.writer import json_files, outputs
from vidvol.core.version import VERSION

BUILD_RECORD_NAME = "build.json"
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def runner_name(runner: Any) -> str:
    """A Beam runner's name as given (`DirectRunner`) or its class's (`FnApiRunner`)."""
    if runner is None:
        return "DirectRunner (Beam's default)"
    return runner if isinstance(runner, str) else type(runner).__name__


def write(data_path: str, *, dataset: str, version: str, started: float, runner: str, workers: Any = None) -> None:
    """Writes `build.json` into the build's folder.

    Args:
      data_path: the folder the build writes its shards into (local, gs:// or a bucket).
      dataset: `NAME/CONFIG`.
      version: the dataset version.
      started: when the build started (`time.time()`).
      runner: the Beam runner's name (`runner_name`).
      workers: the runner's worker count where the build knows it.
    """
    now = datetime.datetime.now(datetime.UTC)
    start = datetime.datetime.fromtimestamp(started, datetime.UTC)
    doc = {
        "dataset": dataset,
        "version": version,
        "started": start.isoformat(timespec="seconds"),
        "finished": now.isoformat(timespec="seconds"),
        "seconds": round((now - start).total_seconds(), 1),
        "runner": runner,
        "workers": workers,
        "vidvol_version": VERSION,
        "python": platform.python_version(),
    }
    json_files.write_json(doc, os.path.join(data_path, BUILD_RECORD_NAME))


def read(data_path: str) -> dict[str, Any] | None:
    """The `build.json` of a prepared dataset folder, or None where there is none or it does not parse."""
    path = os.path.join(os.fspath(data_path), BUILD_RECORD_NAME)
    try:
        if not outputs.exists(path):
            return None
        doc = json_files.read_json(path)
    except (ValueError, OSError):
        return None
    return doc if isinstance(doc, dict) else None


def from_log(data_path: str) -> dict[str, Any]:
    """What the newest local build log of a version folder says: its start, end and duration (no runner).

    Returns:
      `started`, `finished`, `seconds` and `log` where a log is found, else an empty dict.
    """
    folder = os.path.dirname(os.fspath(data_path).rstrip("/"))
    version = os.path.basename(os.fspath(data_path).rstrip("/"))
    logs = sorted(glob.glob(os.path.join(folder, f"build-{version}-*.log")))
    if not logs:
        return {}
    times = []
    try:
        with open(logs[-1], encoding="utf-8", errors="replace") as f:
            for line in f:
                found = _LOG_TIME.match(line)
                if found:
                    times.append(datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))
    except OSError:
        return {}
    if not times:
        return {"log": logs[-1]}
    # the log's times are the build machine's local time: written with this machine's UTC offset
    return {"started": times[0].astimezone().isoformat(), "finished": times[-1].astimezone().isoformat(),
            "seconds": round((times[-1] - times[0]).total_seconds(), 1), "log": logs[-1]}
