"""The package's imports point down: core | testing | layers < builders | readers < datasets < beam_jobs < the `vidvol` facade < cli < __main__.

Every import statement in the package (module level or inside functions) is read with `ast`; an
import of a vidvol module from a higher layer, or between the build side (`builders`) and the
read side (`readers`), fails the test with file:line. A name of the facade counts as the facade
(layer 4): `from vidvol import load`, or `vidvol.load` after `import vidvol.datasets`.

Inside `builders` the rooms point down too: `example_io` (what an example function yields) is the
ground; `sources` (files, archives, split lists) and `writer` (the Beam write machinery) stand on
it and know nothing of each other; `transforms` (the array stages) may use `sources`, never
`writer`; the builder bases (`dataset_builder`, `clip_builder`, `configs`) sit on top. Inside
`datasets` no dataset imports another's modules.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from package_files import package_paths, plant

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root is the `vidvol` package
# Layer of each top-level part of the package; a part may import its own modules and lower layers.
LAYERS = {
    "core": 0, "layers": 0,  # layers: Keras layers for the device, importing no other vidvol module
    "testing": 0,  # sample inputs for tests, the demo and benchmarks
    "builders": 1, "readers": 1,
    "datasets": 2,
    "beam_jobs": 3,
    "__init__": 4,  # the facade: `import vidvol` registers the datasets and exposes `load`
    "cli": 5,  # the commands of `python -m vidvol` (demo, preview, verify) and their dispatcher
    "__main__": 6,
}


def part_of(module: str) -> str:
    """`vidvol.builders.transforms.video` -> "builders"; `vidvol` -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_files(root: pathlib.Path):
    """(module name, path) of every Python file installed as part of vidvol."""
    for path in package_paths(root):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(["vidvol"] + ([] if parts == ["__init__"] else parts)), path


def imports(path: pathlib.Path, module: str):
    """(line, imported vidvol module) for every import in a file, relative imports resolved.

    Also every `vidvol.NAME` read through a name an `import vidvol[.x]` bound (`import vidvol.datasets` binds
    `vidvol`, so `vidvol.load` after it reaches the facade as `from vidvol import load` does).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    bound = {a.asname or "vidvol" for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
             if (a.name == "vidvol" or (a.name.startswith("vidvol.") and a.asname is None))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            yield node.lineno, f"vidvol.{node.attr}"
            continue
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


# Upward imports allowed by name, each with its reason: the facade's one function that is a command's.
ALLOWED_UP = {
    ("__init__.py", "vidvol.cli.report"): "vidvol.report() runs `python -m vidvol report`'s function, imported when called",
}


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
            if LAYERS[dst] >= LAYERS[src] and (str(path.relative_to(root)), target) not in ALLOWED_UP:
                bad.append(f"{path.relative_to(root)}:{line} {src} -> {dst} ({target})")
    return bad


def test_imports_point_down():
    assert upward_edges(ROOT) == []


def test_layers_name_the_package_as_it_is():
    """Every top-level part of the package has a layer, and every layer names a part that is there."""
    parts = {part_of(module) for module, _ in package_files(ROOT)}
    assert parts == set(LAYERS)


def test_the_checker_sees_an_upward_import(tmp_path):
    plant(tmp_path, {"builders/w.py": "def f():\n    from vidvol.beam_jobs import runners\n",
                     "readers/r.py": "from vidvol.builders import w\nfrom vidvol.core import features\n"})
    # Not the package: a venv `make bench` leaves in bench_out/ (no __init__.py on the way) is never read.
    (tmp_path / "bench_out" / "peers_venv" / "lib").mkdir(parents=True)
    (tmp_path / "bench_out" / "peers_venv" / "lib" / "x.py").write_text("from vidvol.beam_jobs import runners\n")
    assert upward_edges(tmp_path) == [
        "builders/w.py:2 builders -> beam_jobs (vidvol.beam_jobs.runners)",
        "readers/r.py:1 readers -> builders (vidvol.builders.w)",
    ]


def test_the_checker_sees_a_lower_layer_reach_up_to_the_facade(tmp_path):
    """`from vidvol import NAME` of a facade name, `import vidvol`, and `vidvol.NAME` after `import vidvol.x`."""
    plant(tmp_path, {
        "beam_jobs/a.py": "from vidvol import datasets\nfrom vidvol import load\n",
        "beam_jobs/b.py": "import vidvol.datasets\n\n\ndef f():\n    return vidvol.datasets, vidvol.Tuning()\n",
        "datasets/c.py": "def f():\n    import vidvol\n",
        "builders/d.py": "import vidvol.core.tfrecord as tfrecord\nimport vidvol as v\nx = v.data_source\n",
        "cli/e.py": "import vidvol\nfrom vidvol import load\nvidvol.load\n",  # the apps stand on the facade
    })
    assert sorted(upward_edges(tmp_path)) == [
        "beam_jobs/a.py:2 beam_jobs -> __init__ (vidvol.load)",
        "beam_jobs/b.py:5 beam_jobs -> __init__ (vidvol.Tuning)",
        "builders/d.py:2 builders -> __init__ (vidvol)",
        "builders/d.py:3 builders -> __init__ (vidvol.data_source)",
        "datasets/c.py:2 datasets -> __init__ (vidvol)",
    ]


# Rooms inside `builders` and what each may import (besides itself); a module of no room below is a builder base.
BUILDER_ROOMS: dict[str, set[str]] = {
    "example_io": set(),
    "sources": {"example_io"},
    "writer": {"example_io"},
    "transforms": {"example_io", "sources"},
    "bases": {"example_io", "sources", "writer", "transforms"},
}


def builders_room(module: str) -> str:
    """`vidvol.builders.writer.plan` -> "writer"; `vidvol.builders.dataset_builder` -> "bases"."""
    parts = module.split(".")
    sub = parts[2] if len(parts) > 2 else ""
    return sub if sub in BUILDER_ROOMS and sub != "bases" else "bases"


def dataset_of(module: str) -> str | None:
    """`vidvol.datasets.hmdb51.layout` -> "hmdb51"; the `vidvol.datasets` package itself -> None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def room_edges(root: pathlib.Path) -> list[str]:
    """Every import inside `builders` that points up or across its rooms, and every import of one dataset by
    another, as "file:line a -> b (target)"."""
    bad = []
    for module, path in package_files(root):
        for line, target in imports(path, module):
            where = f"{path.relative_to(root)}:{line}"
            if part_of(module) == part_of(target) == "builders":
                src, dst = builders_room(module), builders_room(target)
                if dst != src and dst not in BUILDER_ROOMS[src]:
                    bad.append(f"{where} builders/{src} -> builders/{dst} ({target})")
            elif part_of(module) == part_of(target) == "datasets":
                src, dst = dataset_of(module), dataset_of(target)
                if src is not None and dst is not None and dst != src:
                    bad.append(f"{where} datasets/{src} -> datasets/{dst} ({target})")
    return bad


def test_builders_rooms_and_datasets_import_down_and_apart():
    assert room_edges(ROOT) == []


def test_the_room_checker_sees_upward_and_sideways_imports(tmp_path):
    files = {
        "builders/__init__.py": "",
        "builders/example_io.py": "from vidvol.builders.writer import plan\n",
        "builders/clip_builder.py": "from vidvol.builders.transforms import clips\nfrom vidvol.builders.writer import runner\n",
        "builders/transforms/clips.py": "from vidvol.builders.sources import files\nfrom vidvol.builders.writer.plan import ShardTask\n",
        "builders/writer/plan.py": "from vidvol.builders.example_io import Source\nfrom vidvol.builders.sources import files\n",
        "builders/sources/files.py": "def f():\n    from vidvol.builders import dataset_builder\n",
        "datasets/__init__.py": "from vidvol.datasets.a import builder\n",
        "datasets/a/builder.py": "from vidvol.datasets.a import layout\nfrom vidvol.datasets.b import layout as other\n",
    }
    plant(tmp_path, files)
    assert room_edges(tmp_path) == [
        "builders/example_io.py:1 builders/example_io -> builders/writer (vidvol.builders.writer.plan)",
        "builders/sources/files.py:2 builders/sources -> builders/bases (vidvol.builders.dataset_builder)",
        "builders/transforms/clips.py:2 builders/transforms -> builders/writer (vidvol.builders.writer.plan.ShardTask)",
        "builders/writer/plan.py:2 builders/writer -> builders/sources (vidvol.builders.sources.files)",
        "datasets/a/builder.py:2 datasets/a -> datasets/b (vidvol.datasets.b.layout)",
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


# Rooms inside `readers`: `tfdata` (vidvol.load) and `random_access` (by index) never import each other, and the
# modules both share (readers/*.py) import neither room; only the `vidvol.readers` facade (__init__) sees all.
READER_ROOMS = ("tfdata", "random_access")


def readers_room(module: str) -> str:
    """`vidvol.readers.tfdata.plan` -> "tfdata"; `vidvol.readers.order` -> "shared"; `vidvol.readers` -> "facade"."""
    parts = module.split(".")
    if len(parts) == 2:
        return "facade"
    return parts[2] if parts[2] in READER_ROOMS else "shared"


def reader_room_edges(root: pathlib.Path) -> list[str]:
    """Every import between the two reader rooms, or from a shared reader module into a room, as "file:line a -> b"."""
    bad = []
    for module, path in package_files(root):
        if part_of(module) != "readers":
            continue
        src = readers_room(module)
        for line, target in imports(path, module):
            if part_of(target) != "readers" or src == "facade":
                continue
            dst = readers_room(target)
            if dst in READER_ROOMS and dst != src:
                bad.append(f"{path.relative_to(root)}:{line} readers/{src} -> readers/{dst} ({target})")
    return bad


def test_the_reader_rooms_do_not_import_each_other():
    assert reader_room_edges(ROOT) == []


def test_the_reader_room_checker_sees_crossings(tmp_path):
    plant(tmp_path, {
        "readers/__init__.py": "from vidvol.readers.tfdata.load import load\nfrom vidvol.readers.random_access import grain\n",
        "readers/order.py": "from vidvol.readers import rng\n",
        "readers/spec.py": "from vidvol.readers.tfdata import sizing\n",
        "readers/tfdata/load.py": "from vidvol.readers import order\nfrom vidvol.readers.tfdata import plan\n",
        "readers/random_access/grain.py": "def f():\n    from vidvol.readers.tfdata import load\n",
    })
    assert reader_room_edges(tmp_path) == [
        "readers/random_access/grain.py:2 readers/random_access -> readers/tfdata (vidvol.readers.tfdata.load)",
        "readers/spec.py:1 readers/shared -> readers/tfdata (vidvol.readers.tfdata.sizing)",
    ]
