"""No installed module over 600 lines: a module that grows past that is split by concept, not by size."""

from __future__ import annotations

import pathlib

from package_files import package_paths, plant

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root is the `vidvol` package
MAX_LINES = 600


def too_long(root: pathlib.Path = ROOT) -> dict[str, int]:
    """{path relative to `root`: its line count} for every installed module over `MAX_LINES` lines."""
    counts = {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in package_paths(root)}
    return {path: n for path, n in counts.items() if n > MAX_LINES}


def test_no_package_module_is_over_600_lines():
    bad = too_long()
    assert not bad, (f"modules over {MAX_LINES} lines (split each by concept, e.g. a protocol apart from its policy): "
                     + ", ".join(f"{path} ({n})" for path, n in sorted(bad.items())))


def test_the_checker_counts_installed_modules_only(tmp_path):
    plant(tmp_path, {"small.py": "x = 1\n" * MAX_LINES, "big.py": "x = 1\n" * (MAX_LINES + 1),
                     "tests/__init__.py": "", "tests/huge.py": "x = 1\n" * 5000})
    assert too_long(tmp_path) == {"big.py": MAX_LINES + 1}
