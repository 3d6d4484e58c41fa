"""The package's imports point down: core | samples | layers < builders | readers < datasets < beam_jobs < the `vidvol` facade < apps (CLI, demo, preview).

Every import statement in the package (module level or inside functions) is read with `ast`; an
import of a vidvol module from a higher layer, or between the build side (`builders`) and the
read side (`readers`), fails the test with file:line.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root is the `vidvol` package
# Layer of each top-level part of the package; a part may import its own modules and lower layers.
LAYERS = {
    "core": 0, "samples": 0, "layers": 0,  # layers: Keras layers for the device, importing no other vidvol module
    "builders": 1, "readers": 1,
    "datasets": 2,
    "beam_jobs": 3,
    "__init__": 4,  # the facade: `import vidvol` registers the datasets and exposes `load`
    "preview": 5, "demo": 6, "__main__": 6,
}
NOT_PACKAGE = {"tests", "benchmarks", "examples", ".venv", "build", "dist", "setup.py"}  # setup.py: packaging, not installed


def part_of(module: str) -> str:
    """`vidvol.builders.video` -> "builders"; `vidvol` -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_files(root: pathlib.Path):
    """(module name, path) of every Python file installed as part of vidvol."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_PACKAGE or any(p.startswith(".") for p in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(["vidvol"] + ([] if parts == ["__init__"] else parts)), path


def imports(path: pathlib.Path, module: str):
    """(line, imported vidvol module) for every import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] if node.names[0].name == "*" else [f"{base}.{a.name}" if base else a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "vidvol" or name.startswith("vidvol."):
                yield node.lineno, name


def upward_edges(root: pathlib.Path) -> list[str]:
    """Every import that points up a layer or across the build/read line, as "file:line a -> b"."""
    bad = []
    for module, path in package_files(root):
        src = part_of(module)
        if src not in LAYERS:
            bad.append(f"{path.relative_to(root)}: top-level part {src!r} has no layer in LAYERS")
            continue
        for line, target in imports(path, module):
            dst = part_of(target)
            if dst == src:
                continue
            if dst not in LAYERS:  # e.g. `from vidvol import load`: a name of the facade
                dst = "__init__"
            if LAYERS[dst] >= LAYERS[src]:
                bad.append(f"{path.relative_to(root)}:{line} {src} -> {dst} ({target})")
    return bad


def test_imports_point_down():
    assert upward_edges(ROOT) == []


def test_the_checker_sees_an_upward_import(tmp_path):
    (tmp_path / "builders").mkdir()
    (tmp_path / "builders" / "__init__.py").write_text("")
    (tmp_path / "builders" / "w.py").write_text("def f():\n    from vidvol.beam_jobs import runners\n")
    (tmp_path / "readers").mkdir()
    (tmp_path / "readers" / "r.py").write_text("from vidvol.builders import w\nfrom vidvol.core import features\n")
    assert upward_edges(tmp_path) == [
        "builders/w.py:2 builders -> beam_jobs (vidvol.beam_jobs.runners)",
        "readers/r.py:1 readers -> builders (vidvol.builders.w)",
    ]


@pytest.mark.parametrize("module", ["vidvol.builders.dataset_builder", "vidvol.datasets", "vidvol.core.features"])
def test_build_side_modules_do_not_load_the_read_side(module):
    """Statically: nothing reachable from the build side's imports is in `vidvol.readers`."""
    files = dict(package_files(ROOT))
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = files.get(name)
        if path is None:
            continue
        todo.extend(t if t in files else t.rpartition(".")[0] for _, t in imports(path, name))
    assert not [n for n in seen if n.startswith("vidvol.readers")]
