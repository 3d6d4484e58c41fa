"""`python -m vidvol COMMAND`: demo, preview, build, verify."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "demo": ("vidvol.demo", "build small sample datasets with Beam and read them back"),
    "preview": ("vidvol.preview", "render a PNG preview of a prepared dataset"),
    "build": ("vidvol.beam_jobs.build", "build a dataset/config on a chosen Beam runner"),
    "verify": ("vidvol.builders.writer.integrity", "check every shard of a prepared dataset (checksums, counts, records)"),
}


def main(argv: list[str] | None = None) -> int:
    """Dispatches to the command's own `main`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: python -m vidvol {" + ",".join(COMMANDS) + "} [options]")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<8} {help_text}")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
