"""Packaging: the repository root is the `vidvol` package; every subpackage and data file is found, none listed.

Metadata and dependencies live in `setup.cfg`. This file only derives what a hand-kept list
forgets: every folder with an `__init__.py` under the root becomes `vidvol.<folder>` (the repository
tools `tests/`, `benchmarks/`, `examples/` and build outputs excepted), and every other file inside
a subpackage folder or its non-package subfolders (dataset cards, `CITATIONS.bib`, `TAGS.txt`,
`checksums.tsv`, `dummy_data/`, `beam_jobs/Dockerfile`) is package data. `tests/test_packaging.py`
builds the wheel and the sdist and checks both against the checkout.
"""

from __future__ import annotations

import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
NOT_INSTALLED = ("tests", "benchmarks", "examples", "build", "dist", "docs")
SKIPPED_FILES = (".pyc", ".pyo", ".so.tmp")


def subpackages() -> list[str]:
    """Every package folder under the root, as `vidvol.<dotted path>`."""
    exclude = [p for name in NOT_INSTALLED for p in (name, f"{name}.*")]
    return sorted("vidvol." + p for p in find_packages(where=ROOT, exclude=exclude))


def data_files(package: str, packages: set[str]) -> list[str]:
    """Every non-Python file of `package`'s folder and its non-package subfolders, relative to the folder."""
    folder = os.path.join(ROOT, *package.split(".")[1:])
    out = []
    for here, dirs, names in os.walk(folder):
        rel = os.path.relpath(here, folder)
        dotted = package if rel == "." else package + "." + rel.replace(os.sep, ".")
        if rel != "." and dotted in packages:
            dirs[:] = []  # a subpackage carries its own data
            continue
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(names):
            if rel == "." and name.endswith(".py"):
                continue
            if name.startswith(".") or name.endswith(SKIPPED_FILES):
                continue
            out.append(os.path.normpath(os.path.join(rel, name)))
    return out


class BuildPy(build_py):
    """build_py without this script: it sits in the root, which is the `vidvol` package folder."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (package == "vidvol" and m[1] == "setup")]


PACKAGES = subpackages()
_ALL = {"vidvol", *PACKAGES}

setup(
    cmdclass={"build_py": BuildPy},
    package_dir={"vidvol": "."},
    packages=["vidvol", *PACKAGES],
    # The root's own files (README, Makefile, setup.cfg) are not package data; subpackages carry theirs.
    package_data={p: files for p in PACKAGES if (files := data_files(p, _ALL))},
)
