"""The dispatcher of `python -m vidvol COMMAND`: demo, preview, report, build, verify, pull, push.

Each command is a module with a `main(argv) -> int`, imported only when its command runs, so
`python -m vidvol --help` and one command's start-up never load another's dependencies.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("vidvol.cli.demo", "build small sample datasets with Beam and read them back"),
    "preview": ("vidvol.cli.preview", "render a PNG preview of a prepared dataset"),
    "report": ("vidvol.cli.report", "write one self-contained HTML page about a prepared dataset"),
    "build": ("vidvol.beam_jobs.build", "build a dataset/config on a chosen Beam runner"),
    "verify": ("vidvol.cli.verify", "check every shard of a prepared dataset (checksums, counts, records)"),
    "pull": ("vidvol.cli.pull", "copy a dataset from a bucket data_dir into a local one, checked against shards.json"),
    "push": ("vidvol.cli.push", "copy a local dataset into a bucket data_dir, checked against shards.json"),
}


def main(argv: list[str] | None = None) -> int:
    """Runs one command: `python -m vidvol COMMAND [options]`.

    Args:
      argv: the command and its options (default: `sys.argv[1:]`).

    Returns:
      The command's exit code; with no command or `-h`/`--help` the usage and 0, with an unknown one the usage and 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: python -m vidvol {" + ",".join(COMMANDS) + "} [options]")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<8} {help_text}")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)
