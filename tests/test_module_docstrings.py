"""Module docstrings in Grain's style: a one-sentence summary line, then at most a short paragraph.

Every installed module opens with a docstring whose first line is one sentence ending in "." (at
most 120 characters), followed by a blank line or nothing, and the whole docstring holds at most 10
lines: design notes belong to the class or function they describe, or to `docs/`. No module carries
a pylint pragma either (no pylint runs here; ruff does).
"""

from __future__ import annotations

import ast
import pathlib
import re

from package_files import package_paths, plant

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root is the `vidvol` package
MAX_SUMMARY = 120
MAX_LINES = 10


# A sentence ends at ".", "!" or "?" followed by a space and a capital or code ("e.g.", "i.e." do not end one).
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?]\s+[A-Z`\"']")


def docstring_problems(source: str) -> list[str]:
    """What is wrong with the module docstring of `source` (empty: nothing)."""
    doc = ast.get_docstring(ast.parse(source), clean=True)
    if not doc or not doc.strip():
        return ["no module docstring"]
    lines = doc.splitlines()
    first, out = lines[0], []
    if not first.endswith("."):
        out.append(f"the first line does not end with '.': {first!r}")
    if len(first) > MAX_SUMMARY:
        out.append(f"the first line has {len(first)} characters (at most {MAX_SUMMARY})")
    if _SENTENCE_END.search(first[:-1]):
        out.append(f"the first line is more than one sentence: {first!r}")
    if len(lines) > 1 and lines[1].strip():
        out.append("the summary runs on past its first line (a blank line or the end must follow it)")
    if len(lines) > MAX_LINES:
        out.append(f"the docstring has {len(lines)} lines (at most {MAX_LINES}): move the notes to the class or "
                   "function they describe, or to docs/")
    return out


def failing(root: pathlib.Path = ROOT) -> dict[str, list[str]]:
    """{path relative to `root`: its problems} for every installed module whose docstring breaks the rule."""
    out = {}
    for path in package_paths(root):
        found = docstring_problems(path.read_text(encoding="utf-8"))
        if found:
            out[path.relative_to(root).as_posix()] = found
    return out


def with_pragmas(root: pathlib.Path = ROOT) -> list[str]:
    """Installed modules (relative paths) that hold a pylint pragma."""
    return [path.relative_to(root).as_posix() for path in package_paths(root)
            if "pylint: disable" in path.read_text(encoding="utf-8")]


def test_every_module_docstring_is_a_summary_and_a_short_paragraph():
    bad = {module: found for module, found in failing().items()}
    assert not bad, "\n".join(f"{module}: {'; '.join(found)}" for module, found in sorted(bad.items()))


def test_no_pylint_pragmas():
    bad = [module for module in with_pragmas()]
    assert not bad, f"no pylint runs here; drop the pragma (keep its reason as a plain comment): {bad}"


def test_the_checker_catches_long_docstrings_and_run_on_summaries(tmp_path):
    paragraph = "".join(f"Line {i} of the notes.\n" for i in range(10))
    plant(tmp_path, {
        "good.py": '"""A one-line summary, e.g. `x.y` and i.e. this.\n\nA short paragraph.\n"""\n',
        "one_line.py": '"""Just a summary."""\n',
        "long.py": f'"""A summary.\n\n{paragraph}"""\n',  # 12 lines
        "two_sentences.py": '"""A summary. And another sentence.\n"""\n',
        "run_on.py": '"""A summary that wraps\nonto a second line.\n"""\n',
        "no_period.py": '"""A summary without a stop\n"""\n',
        "too_wide.py": f'"""{"x" * 120}."""\n',
        "none.py": "import os\n",
        "core/__init__.py": '"""A package."""\n',
        "core/pkg.py": '"""Fine."""\nx = 1  # pylint: disable=invalid-name\n',
    })
    found = failing(tmp_path)
    assert set(found) == {"long.py", "two_sentences.py", "run_on.py", "no_period.py", "too_wide.py", "none.py"}
    assert found["long.py"] == ["the docstring has 12 lines (at most 10): move the notes to the class or function "
                                "they describe, or to docs/"]
    assert found["two_sentences.py"] == ["the first line is more than one sentence: 'A summary. And another sentence.'"]
    assert any("runs on past its first line" in p for p in found["run_on.py"])
    assert "does not end with '.'" in found["no_period.py"][0]
    assert "121 characters" in found["too_wide.py"][0]
    assert found["none.py"] == ["no module docstring"]
    assert with_pragmas(tmp_path) == ["core/pkg.py"]
