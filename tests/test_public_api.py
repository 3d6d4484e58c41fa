"""The facade's public API: `vidvol.__all__` is complete, and each of its names documents every parameter."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re
import types

import pytest

import vidvol

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = re.compile(r"^([A-Z][A-Za-z ]*):\s*$")  # a Google-style section header: "Args:", "Returns:", "Raises:"
ENTRY = re.compile(r"^\*{0,2}(\w+)(?:\s*\([^)]*\))?:(?:\s|$)")  # "name:", "name (type):", "**kwargs:"
SKIPPED = {"self", "cls"}


def sections(doc: str) -> dict[str, list[str]]:
    """The sections of a cleaned docstring: header -> its indented lines (blank lines dropped)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in doc.splitlines():
        header = SECTION.match(line)
        if header:
            current = out.setdefault(header.group(1), [])
        elif line and not line[0].isspace():
            current = None  # back at the left margin: prose after the section
        elif current is not None and line.strip():
            current.append(line)
    return out


def documented_args(lines: list[str]) -> list[str]:
    """The names an `Args:` section documents: entries at its first indent (deeper lines continue one)."""
    if not lines:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    names = []
    for line in lines:
        if len(line) - len(line.lstrip()) == indent:
            entry = ENTRY.match(line.strip())
            if entry:
                names.append(entry.group(1))
    return names


def problems(obj) -> list[str]:
    """What the docstring of a public function or class leaves out: its parameters, its `Returns:` section."""
    doc = inspect.getdoc(obj) if obj.__doc__ else None
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and doc and doc.startswith(f"{obj.__name__}("):
        doc = None  # the signature dataclasses writes for a class without a docstring
    if not doc:
        return ["no docstring"]
    found = sections(doc)
    args = documented_args(found.get("Args", []))
    signature = inspect.signature(obj)
    out = [f"parameter {name!r} not in Args" for name in signature.parameters
           if name not in SKIPPED and name not in args]
    out += [f"Args names {name!r}, which is no parameter" for name in args if name not in signature.parameters]
    returns = signature.return_annotation
    if not isinstance(obj, type) and returns not in (None, "None") and "Returns" not in found and "Yields" not in found:
        out.append("no Returns section" + (" (no return annotation)" if returns is inspect.Signature.empty else ""))
    return out


def facade_bindings(path: pathlib.Path = ROOT / "__init__.py") -> set[str]:
    """The names `vidvol/__init__.py` binds at module level, public ones only (no leading underscore)."""
    names = set()
    body = list(ast.parse(path.read_text(encoding="utf-8")).body)
    # `if TYPE_CHECKING:` imports name what `__getattr__` binds on first use (the read side, imported lazily)
    body += [n for node in body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) for n in node.body]
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return {n for n in names if not n.startswith("_")} | ({"__version__"} & names)


DOCUMENTED = [n for n in vidvol.__all__ if n != "__version__"]


def test_all_names_exist_and_are_unique():
    assert len(set(vidvol.__all__)) == len(vidvol.__all__), vidvol.__all__
    missing = [n for n in vidvol.__all__ if not hasattr(vidvol, n)]
    assert not missing, f"vidvol.__all__ names {missing}, which vidvol does not have"


def test_every_public_binding_is_in_all():
    bound = facade_bindings()
    assert {"load", "ReadSpec", "data_source", "__version__"} <= bound, bound  # the parser sees the re-exports
    assert not bound - set(vidvol.__all__), f"vidvol binds {sorted(bound - set(vidvol.__all__))} outside __all__"
    # At run time too: whatever public non-module attribute `import vidvol` leaves is listed.
    runtime = {n for n, v in vars(vidvol).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert not runtime - set(vidvol.__all__), f"vidvol has {sorted(runtime - set(vidvol.__all__))} outside __all__"


def test_star_import_gives_all():
    namespace: dict = {}
    exec("from vidvol import *", namespace)
    assert set(vidvol.__all__) <= set(namespace)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_public_docstring_documents_every_parameter(name):
    obj = getattr(vidvol, name)
    if isinstance(obj, types.ModuleType):  # vidvol.layers: a module has no signature, only its docstring
        assert (obj.__doc__ or "").strip(), f"vidvol.{name} has no module docstring"
        return
    assert not problems(obj), f"vidvol.{name}: {problems(obj)}"


# The checker itself: it must see what is missing, or the test above proves nothing.


def _undocumented(a: int, b: str = "x", *, c: bool = False) -> int:
    """Adds things.

    Args:
      a: documented.
      b (str): documented, with a type.
        c: deeper: a continuation line, not an entry.
    """
    return a


def _grouped(a: int, b: int) -> None:
    """Two parameters on one line, which is no Google-style entry.

    Args:
      a, b: the numbers.
    """


def _complete(a: int, *args: int, **kwargs: int) -> int:
    """Sums.

    Args:
      a: the first number.
      *args: more numbers.
      **kwargs: ignored.

    Returns:
      The sum.
    """
    return a + sum(args)


@dataclasses.dataclass(frozen=True)
class _Undocumented:
    length: int = 1
    stride: int = 1


@dataclasses.dataclass(frozen=True)
class _HalfDocumented:
    """A spec.

    Args:
      length: frames.
      strid: a misspelt field.
    """

    length: int = 1
    stride: int = 1


def test_checker_reports_an_undocumented_parameter_and_a_missing_returns():
    assert problems(_undocumented) == ["parameter 'c' not in Args", "no Returns section"]


def test_checker_reports_grouped_parameters():
    assert problems(_grouped) == ["parameter 'a' not in Args", "parameter 'b' not in Args"]


def test_checker_accepts_a_complete_docstring():
    assert problems(_complete) == []


def test_checker_reads_class_fields_and_misspellings():
    assert problems(_Undocumented) == ["no docstring"]
    assert problems(_HalfDocumented) == ["parameter 'stride' not in Args", "Args names 'strid', which is no parameter"]


def test_checker_sees_a_binding_outside_all(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text("from vidvol.readers import load, get_builder\nfrom vidvol import layers as _layers\n"
                    "__all__ = ['load']\nVERSION = 1\n")
    assert facade_bindings(init) - {"load", "__all__"} == {"get_builder", "VERSION"}
