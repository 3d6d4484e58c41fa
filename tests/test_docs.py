"""The documentation's links: every relative link of every Markdown file resolves inside the repository.

Every `*.md` of the checkout (outside `.venv`, build outputs and hidden folders) is read; each
inline link, image and reference definition outside code is checked: a relative target must exist
and lie inside the repository (no doc sends users elsewhere), and an `#anchor` into a Markdown
file must name one of its headings (GitHub's heading ids). The README stays short: a newcomer reads
it to the end; the guides in `docs/` carry the rest. No network: URLs with a scheme are left alone.
"""

from __future__ import annotations

import pathlib
import re
import urllib.parse

import pytest
from package_files import package_paths, plant

ROOT = pathlib.Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {".venv", "bench_out", "demo_out", "build", "dist", "node_modules", "__pycache__"}
README_MAX_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\S\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every Markdown file of the checkout, outside virtual environments, build outputs and hidden folders."""
    out = []
    for path in sorted(root.rglob("*.md")):
        parts = path.relative_to(root).parts[:-1]
        if any(p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        out.append(path)
    return out


def _without_code(text: str) -> str:
    """The text with fenced code blocks and inline code spans blanked (links there are not links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's id of a heading: link text kept, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    """The heading ids of a Markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for _, title in _HEADING.findall(text):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: pathlib.Path) -> list[str]:
    """The link targets of a Markdown file, outside code."""
    text = _without_code(path.read_text(encoding="utf-8"))
    return _INLINE_LINK.findall(text) + _REFERENCE.findall(text)


def broken_links(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """'FILE: TARGET (why)' for every relative link of `path` that does not resolve inside `root`."""
    bad = []
    root, path = root.resolve(), path.resolve()
    where = path.relative_to(root).as_posix()
    for target in links(path):
        if _SCHEME.match(target):
            continue  # http(s), mailto: not checked (no network)
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / urllib.parse.unquote(file_part)).resolve()
        try:
            dest.relative_to(root)
        except ValueError:
            bad.append(f"{where}: {target} (outside the repository)")
            continue
        if not dest.exists():
            bad.append(f"{where}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where}: {target} (no heading #{anchor} in {dest.relative_to(root).as_posix()})")
    return bad


def test_the_docs_are_found():
    found = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "docs/building.md", "docs/reading.md", "docs/clusters.md", "docs/formats.md",
            "docs/development.md", "benchmarks/RESULTS.md", "datasets/hmdb51/README.md"} <= found
    assert not any(p.startswith(".venv/") for p in found)


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_the_checker_finds_what_is_broken(tmp_path):
    """Guards the checker itself: each kind of broken link is reported, code and URLs are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## A `code` heading: here\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md) [ok anchor](other.md#a-code-heading-here) [self](#page) [web](https://example.com/x)\n"
        "[missing](nothing.md) [bad anchor](other.md#nowhere) [out](../../elsewhere/README.md) "
        "[self bad](#nope)\n\n"
        "`[in code](gone.md)`\n\n```md\n[in a fence](gone.md)\n```\n\n[ref]: missing_too.md\n")
    assert sorted(broken_links(page, tmp_path)) == sorted([
        "docs/page.md: nothing.md (no such file)",
        "docs/page.md: other.md#nowhere (no heading #nowhere in docs/other.md)",
        "docs/page.md: ../../elsewhere/README.md (outside the repository)",
        "docs/page.md: #nope (no heading #nope in docs/page.md)",
        "docs/page.md: missing_too.md (no such file)",
    ])


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


# A measured figure: a rate, a speed-up, a timing per item, or "measured" followed by a number.
_FIGURE = re.compile(r"[0-9][0-9,.]* ?(?:vol/s|volumes/s|clips/s|examples/s|frames/s|batches/s|steps/s)\b"
                     r"|[0-9.]+ ?% (?:faster|slower)|[0-9.]+x (?:faster|slower)|[Mm]easured:? [0-9(]"
                     r"|[0-9.]+ ?(?:ms|µs) (?:per|a) ")


def measurement_figures(root: pathlib.Path = ROOT) -> list[str]:
    """`file:line: text` of each measured figure in the package's Python files (comments, docstrings, strings).

    Figures and their dates live in benchmarks/RESULTS.md; code that states one goes stale with the next run.
    Sizes and limits (`64 << 30  # 64 GiB`) are not figures and are not matched.
    """
    out = []
    for path in package_paths(root):
        rel = path.relative_to(root)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _FIGURE.search(line):
                out.append(f"{rel.as_posix()}:{n}: {line.strip()}")
    return out


def test_no_measurement_figures_in_package_code():
    assert measurement_figures() == [], "move these to benchmarks/RESULTS.md and link its row from the docs"


def test_the_figure_checker_finds_figures_and_leaves_sizes(tmp_path):
    plant(tmp_path, {
        "readers/x.py": ("LIMIT = 64 << 30  # 64 GiB: a cap, not a figure\n"
                         "# reads ~1,100 clips/s on 2 cores\n"
                         '"""The cast is 1.3x faster than before."""\n'
                         "CHUNK = 1 << 16  # 256 KiB of float32\n"
                         "# costs 5.2 ms per batch\n"),
        "tests/t.py": "# 900 vol/s in a test is not the package's\n",
    })
    assert measurement_figures(tmp_path) == [
        "readers/x.py:2: # reads ~1,100 clips/s on 2 cores",
        'readers/x.py:3: """The cast is 1.3x faster than before."""',
        "readers/x.py:5: # costs 5.2 ms per batch",
    ]
