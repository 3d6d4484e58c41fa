"""The shape of `benchmarks/`: one module per section, shared parts in one place, no cycle, a size ceiling.

`benchmarks/` holds `run.py` (the entry) and four folders: `sections/` (one module per `make bench`
section, named for its key), `common/` (what sections share: the skeleton, settings, inputs, meters,
jobs, the report), `peers/` (the peers section's venv, job and report) and `studies/` (one-off studies,
which the suite never imports). Everything is read with `ast`, without importing TensorFlow: imports
inside functions count too, so two modules that reach each other only at call time fail here as well.
The registry check that imports `run.py` (TensorFlow, Beam) is the one slow test.
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
MAX_LINES = 600  # per module, as in the package
MAX_TOTAL_LINES = 6940  # benchmarks/**/*.py: 8,192, then 7,141, now 6,933 (#46); lower it as it shrinks, never raise it
FOLDERS = {"common", "sections", "peers", "studies"}
LOOSE = {"run.py"}  # the only module directly in benchmarks/: the entry `make bench` runs
HEADLINE_PARTS = ("reads", "builds", "build_limit")  # run.py's headline: results.json's read, build_*, build_limit


def module_name(path: pathlib.Path, root: pathlib.Path = BENCHMARKS) -> str:
    """The dotted name a benchmark module imports as (`common/measure.py` -> `common.measure`)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def suite_files(root: pathlib.Path = BENCHMARKS) -> list[pathlib.Path]:
    """Every suite module: run.py and the modules of its folders, studies left out."""
    return sorted(p for p in root.rglob("*.py") if "studies" not in p.relative_to(root).parts)


def imports_of(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The benchmark modules `path` imports anywhere (top level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found & modules


def import_graph(root: pathlib.Path = BENCHMARKS) -> dict[str, set[str]]:
    """{module: the benchmark modules it imports} for every suite module (packages themselves left out)."""
    files = [p for p in suite_files(root) if p.name != "__init__.py"]
    modules = {module_name(p, root) for p in files}
    return {module_name(p, root): imports_of(p, modules) - {module_name(p, root)} for p in files}


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


def registered(run_py: pathlib.Path = BENCHMARKS / "run.py") -> list[str]:
    """The modules of the sections `run.py` registers (`SECTIONS = (imports.SECTION, ...)`), read with ast."""
    for node in ast.parse(run_py.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign)
                                                                        else None)
        if isinstance(target, ast.Name) and target.id == "SECTIONS":
            return [e.value.id for e in node.value.elts if isinstance(e, ast.Attribute) and e.attr == "SECTION"]
    raise AssertionError(f"{run_py}: no SECTIONS tuple")


def section_key(path: pathlib.Path) -> str | None:
    """The `key = "..."` of the section class a module defines (None when it defines none)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["key"]
                        and isinstance(stmt.value, ast.Constant)):
                    return stmt.value.value
    return None


def layout_problems(root: pathlib.Path = BENCHMARKS) -> list[str]:
    """What breaks the layout rules, one line each (an empty list: the layout holds)."""
    problems = []
    loose = {p.name for p in root.glob("*.py")} - LOOSE
    problems += [f"benchmarks/{name} sits loose: move it to sections/ (a section), common/ (shared) or peers/"
                 for name in sorted(loose)]
    folders = {p.name for p in root.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    problems += [f"benchmarks/{name}/ is not one of {sorted(FOLDERS)}" for name in sorted(folders - FOLDERS)]
    sections = root / "sections"
    keys = registered(root / "run.py")
    for key in keys:
        path = sections / f"{key}.py"
        if not path.is_file():
            problems.append(f"section {key!r} is registered in run.py but has no benchmarks/sections/{key}.py")
        elif section_key(path) != key:
            problems.append(f"benchmarks/sections/{key}.py defines key {section_key(path)!r}, not {key!r}")
    problems += [f"headline part benchmarks/sections/{part}.py is missing" for part in HEADLINE_PARTS
                 if not (sections / f"{part}.py").is_file()]
    extra = {p.stem for p in sections.glob("*.py")} - set(keys) - set(HEADLINE_PARTS) - {"__init__"}
    problems += [f"benchmarks/sections/{name}.py is no registered section: register it in run.py's SECTIONS or move "
                 "it to common/" for name in sorted(extra)]
    return problems


def total_lines(root: pathlib.Path = BENCHMARKS) -> int:
    """Lines of Python under benchmarks/, studies included."""
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in root.rglob("*.py"))


def test_find_cycle_sees_direct_and_indirect_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"run": {"cluster"}, "cluster": {"run"}}) == ["cluster", "run", "cluster"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]


def test_lazy_and_dotted_imports_count(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "sections").mkdir()
    (tmp_path / "run.py").write_text("from sections import cluster\n")
    (tmp_path / "sections" / "cluster.py").write_text("def f():\n    from common.report import x\n")
    (tmp_path / "common" / "report.py").write_text("import run\nimport json\n")
    graph = import_graph(tmp_path)
    assert graph == {"common.report": {"run"}, "run": {"sections.cluster"}, "sections.cluster": {"common.report"}}
    assert find_cycle(graph) == ["common.report", "run", "sections.cluster", "common.report"]


def test_layout_problems_are_found(tmp_path):
    """A loose module, a registered section without its module, a stray section module: each named."""
    for folder in ("common", "sections"):
        (tmp_path / folder).mkdir()
    (tmp_path / "run.py").write_text("from sections import bucket, fuzz\nSECTIONS = (bucket.SECTION, fuzz.SECTION)\n")
    (tmp_path / "reads.py").write_text("")
    for part in HEADLINE_PARTS:
        (tmp_path / "sections" / f"{part}.py").write_text("")
    (tmp_path / "sections" / "bucket.py").write_text("class B:\n    key = 'bucket'\n")
    (tmp_path / "sections" / "helpers.py").write_text("")
    problems = layout_problems(tmp_path)
    assert any("benchmarks/reads.py sits loose" in p for p in problems), problems
    assert any("'fuzz' is registered in run.py but has no benchmarks/sections/fuzz.py" in p for p in problems), problems
    assert any("sections/helpers.py is no registered section" in p for p in problems), problems
    assert not any("bucket" in p for p in problems), problems


def test_benchmarks_layout():
    """run.py alone at the top; each registered section (and the headline's parts) in sections/KEY.py."""
    assert len(registered()) >= 10
    problems = layout_problems()
    assert not problems, "\n".join(problems)


def test_no_import_cycle_among_benchmark_modules():
    graph = import_graph()
    assert {"run", "common.section", "sections.cluster", "sections.random_access", "common.report"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, f"benchmarks/ import cycle: {' -> '.join(cycle)}"


def test_no_benchmark_module_over_600_lines():
    long = {str(p.relative_to(BENCHMARKS)): n for p in BENCHMARKS.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"benchmark modules over {MAX_LINES} lines: {long}"


def test_benchmarks_stay_under_their_line_ceiling():
    """The suite is a tool beside the product: its size is held where it is (see benchmarks/README.md)."""
    total = total_lines()
    assert total <= MAX_TOTAL_LINES, (f"benchmarks/ holds {total} lines of Python, over its ceiling of "
                                      f"{MAX_TOTAL_LINES}: share a helper in common/ rather than write it again")


def test_the_suite_imports_no_study():
    """A study is run by hand (`python benchmarks/studies/NAME.py`); nothing `make bench` runs may need one."""
    studies = {module_name(p) for p in (BENCHMARKS / "studies").glob("*.py")}
    assert studies
    users = {module_name(p): found for p in suite_files() if (found := imports_of(p, studies))}
    assert not users, f"suite modules importing a study: {users}"


REGISTRY_CHECK = r"""
import json, sys
import run
from common import section
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
    assert [s["key"] for s in sections] == ["imports", "cluster", "random_access", "resume", "build_resume", "bucket",
                                            "video_augment", "peers", "volume_memory", "fuzz"]
    keys = [headline["key"]] + [s["key"] for s in sections]
    assert len(set(keys)) == len(keys), f"duplicate section keys: {keys}"
    for s in [headline] + sections:
        assert s["section"] and s["settings"] == [True, True] and s["modes"] == ["full", "quick"], s
        assert s["label"] and s["summary"]
    for s in sections:  # rendered into RESULTS.md and KEY.md by themselves; standalone scripts named by their key
        assert s["markdown"] and s["module"] == f"sections.{s['key']}", s
        assert (BENCHMARKS / "sections" / f"{s['key']}.py").is_file()
