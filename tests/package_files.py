"""The package's own Python files, found by the rule `setup.py` installs them by, for tests that read the source.

The repository root is the `vidvol` package: its top-level modules (not `setup.py`) and every folder
with an `__init__.py` below it, except the repository tools (`tests/`, `benchmarks/`, `examples/`,
`docs/`) and build outputs. Folders without an `__init__.py` (`.venv/`, `bench_out/` with the peers'
venv, `demo_out/`, dummy data) are never walked, so a checkout that has run `make bench` or
`make demo` is read the same as a fresh clone.
"""

from __future__ import annotations

import os
import pathlib

NOT_INSTALLED = frozenset({"tests", "benchmarks", "examples", "docs", "build", "dist"})


def package_paths(root: pathlib.Path) -> list[pathlib.Path]:
    """Every Python file of the installed package under `root`, sorted."""
    out = [p for p in root.glob("*.py") if p.name != "setup.py"]
    for here, dirs, names in os.walk(root):
        folder = pathlib.Path(here)
        top = folder == root
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and (folder / d / "__init__.py").is_file()
                         and not (top and d in NOT_INSTALLED))
        if not top:
            out += [folder / n for n in names if n.endswith(".py")]
    return sorted(out)


def plant(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    """Writes `{relative path: text}` under `root`, every folder on the way a package (an empty `__init__.py`
    where the files give none), as the checkers' own tests plant a small vidvol; returns `root`."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for name in files:
        for folder in (root / name).parents:
            if folder == root:
                break
            (folder / "__init__.py").touch()
    return root
