"""No import circles: the module-level imports between vidvol's modules form a graph without cycles.

An import inside a function runs when the function does, so it can break a cycle; one at module
level (outside `if TYPE_CHECKING:`) runs at import time, and a circle of them makes the import
order decide which module sees the other half-initialised. `from vidvol.a import b` is an edge to
`vidvol.a.b` when `b` is a module there, else to `vidvol.a` itself (its `__init__`).
"""

from __future__ import annotations

import ast
import pathlib

from package_files import package_paths, plant

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root is the `vidvol` package


def _module_names(root: pathlib.Path) -> dict[str, pathlib.Path]:
    out = {}
    for path in package_paths(root):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["vidvol", *parts])] = path
    return out


def _top_level(body: list[ast.stmt]):
    """The import statements that run at import time: module level, inside if/try/with, not under TYPE_CHECKING."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _top_level(block)
        elif isinstance(node, ast.With):
            yield from _top_level(node.body)


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """{module: the vidvol modules its module-level imports run}."""
    modules = _module_names(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, set())
        for node in _top_level(ast.parse(path.read_text(encoding="utf-8"), str(path)).body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            edges.update(t for t in targets if t in modules and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles():
    graph = import_graph(ROOT)
    assert len(graph) > 100  # the whole package was read, not an empty walk
    assert cycles(graph) == []


def test_the_cycle_checker_sees_a_circle_and_ignores_function_level_imports(tmp_path):
    plant(tmp_path, {
        "core/a.py": "from vidvol.core import b\n",
        "core/b.py": "import vidvol.core.c\n",
        "core/c.py": "from vidvol.core.a import thing\n",
        "core/d.py": "def f():\n    from vidvol.core import e\n",
        "core/e.py": "from vidvol.core import d\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vidvol.core import a\n",
    })
    graph = import_graph(tmp_path)
    assert graph["vidvol.core.c"] == {"vidvol.core.a"}
    assert cycles(graph) == [["vidvol.core.a", "vidvol.core.b", "vidvol.core.c"]]
