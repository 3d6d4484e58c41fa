"""The shape of `benchmarks/`: no import cycle among its modules, none over 600 lines, sections on the skeleton.

One-off studies live in `benchmarks/studies/`, which the suite never imports (that folder is not on
sys.path when `run.py` runs); the suite's modules are the folder's own `*.py`.

The imports are read with `ast`, without importing anything: imports inside functions count too (a
sibling imported lazily is still a dependency), so two modules that reach each other only at call
time fail here as well. The registry check imports `run.py` in a subprocess, as `make bench` runs it.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
MAX_LINES = 600


def sibling_imports(path: pathlib.Path, siblings: set[str]) -> set[str]:
    """Names of the benchmark modules that `path` imports anywhere (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & siblings - {path.stem}


def import_graph(folder: pathlib.Path = BENCHMARKS) -> dict[str, set[str]]:
    """{module: the sibling modules it imports} for every `*.py` of the folder."""
    files = sorted(folder.glob("*.py"))
    siblings = {p.stem for p in files}
    return {p.stem: sibling_imports(p, siblings) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_sees_direct_and_indirect_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"run": {"cluster"}, "cluster": {"run"}}) == ["cluster", "run", "cluster"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


def test_lazy_imports_count(tmp_path):
    (tmp_path / "run.py").write_text("import cluster\n")
    (tmp_path / "cluster.py").write_text("def f():\n    import run  # \n")
    (tmp_path / "report.py").write_text("from run import main\nimport json\n")
    graph = import_graph(tmp_path)
    assert graph == {"cluster": {"run"}, "report": {"run"}, "run": {"cluster"}}
    assert find_cycle(graph) == ["cluster", "run", "cluster"]


def test_no_import_cycle_among_benchmark_modules():
    graph = import_graph()
    assert {"run", "section", "cluster", "random_access", "report"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, f"benchmarks/ import cycle: {' -> '.join(cycle)}"


def test_no_benchmark_module_over_600_lines():
    long = {str(p.relative_to(BENCHMARKS)): n for p in BENCHMARKS.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"benchmark modules over {MAX_LINES} lines: {long}"


def test_the_suite_imports_no_study():
    """A study is run by hand (`python benchmarks/studies/NAME.py`); nothing `make bench` runs may need one."""
    studies = {p.stem for p in (BENCHMARKS / "studies").glob("*.py")}
    suite = {p.stem for p in BENCHMARKS.glob("*.py")}
    assert studies and not studies & suite, f"a study shares a suite module's name: {studies & suite}"
    users = {m: found for m, found in ((p.stem, sibling_imports(p, studies)) for p in BENCHMARKS.glob("*.py")) if found}
    assert not users, f"suite modules importing a study: {users}"


REGISTRY_CHECK = r"""
import json, sys
import run, section
rows = []
for s in (run.HEADLINE,) + tuple(run.SECTIONS):
    rows.append({"key": s.key, "section": isinstance(s, section.Section), "label": s.label, "summary": s.summary,
                 "modes": [s.FULL.mode, s.QUICK.mode], "settings": [isinstance(x, section.Settings) for x in (s.FULL, s.QUICK)],
                 "module": type(s).__module__, "markdown": type(s).markdown is not section.Section.markdown})
json.dump(rows, sys.stdout)
"""


@pytest.mark.slow  # imports TensorFlow and Beam through run.py
def test_registered_sections_implement_the_skeleton():
    """Every section `run.py` registers is a `section.Section` with its own key, both modes and a markdown."""
    proc = subprocess.run([sys.executable, "-c", REGISTRY_CHECK], capture_output=True, text=True, timeout=300,
                          cwd=str(BENCHMARKS), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(BENCHMARKS)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    headline, *sections = json.loads(proc.stdout)
    assert headline["key"] == "headline" and headline["module"] == "run"
    assert [s["key"] for s in sections] == ["imports", "cluster", "random_access", "resume", "build_resume", "bucket", "video_augment", "peers",
                                                "volume_memory", "fuzz"]
    keys = [headline["key"]] + [s["key"] for s in sections]
    assert len(set(keys)) == len(keys), f"duplicate section keys: {keys}"
    for s in [headline] + sections:
        assert s["section"] and s["settings"] == [True, True] and s["modes"] == ["full", "quick"], s
        assert s["label"] and s["summary"]
    for s in sections:  # rendered into RESULTS.md and KEY.md by themselves; standalone scripts named by their key
        assert s["markdown"] and s["module"] == s["key"], s
        assert (BENCHMARKS / f"{s['module']}.py").is_file()
