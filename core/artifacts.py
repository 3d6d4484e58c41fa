"""What a build leaves next to its shards, and the commands that check or rebuild a prepared dataset.

Both sides use these names: the build side writes the files (`vidvol.builders`), the read side
and the CLIs point users at them and at the commands (`vidvol.readers`, `python -m vidvol verify`).
"""

from __future__ import annotations

import os
import shlex

SKIP_REPORT_NAME = "skip_report.json"  # inputs that did not become examples, and why; empty splits
SHARDS_NAME = "shards.json"  # per shard file: split, example count, size and SHA-256, as written


def dataset_spec(name: str, config: str | None) -> str:
    """`NAME/CONFIG` (or `NAME` for a dataset without configs), as the CLIs take it."""
    return f"{name}/{config}" if config else name


def data_dir_of(data_path: str | os.PathLike, has_config: bool) -> str:
    """The TFDS data_dir holding a prepared version folder `DATA_DIR/NAME[/CONFIG]/VERSION`."""
    path = os.fspath(data_path).rstrip("/")
    for _ in range(3 if has_config else 2):
        path = os.path.dirname(path)
    return path


def verify_command(spec: str, data_dir: str) -> str:
    """`python -m vidvol verify NAME/CONFIG --data_dir DIR`: checks every shard of a prepared dataset."""
    return f"python -m vidvol verify {shlex.quote(spec)} --data_dir {shlex.quote(os.fspath(data_dir))}"


def rebuild_command(spec: str, data_dir: str, manual_dir: str | None) -> str:
    """The command that rebuilds a dataset config from its inputs (replacing what is there)."""
    manual = shlex.quote(manual_dir) if manual_dir else "MANUAL_DIR"
    return (f"python -m vidvol.beam_jobs.build {shlex.quote(spec)} --manual_dir {manual} "
            f"--data_dir {shlex.quote(os.fspath(data_dir))} --overwrite")
