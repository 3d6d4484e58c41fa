"""video_folder's CSV lists: `path,label[,split][,start,end]` rows, with or without a header, where start/end cut clips.

A header row (`path,label[,split][,start,end]` in any order; `time_start`/`time_end` accepted) is
recognised by its names; without one the columns go by count. A malformed row is an error naming
file and line. `layout.discover` turns the rows into the collection's entries.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
from collections.abc import Sequence

from vidvol.builders.sources import csv_files
from vidvol.builders.sources import files
from vidvol.builders.sources.labels import VIDEO_EXTENSIONS, LayoutError, is_video_name

SPLIT_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
CSV_COLUMNS = ("path", "label", "split", "start", "end")
CSV_ALIASES = {"time_start": "start", "time_end": "end", "start_s": "start", "end_s": "end"}
# Headerless CSVs: the columns by count, as in `path,label[,split][,start,end]`.
CSV_POSITIONAL = {
    2: ("path", "label"),
    3: ("path", "label", "split"),
    4: ("path", "label", "start", "end"),
    5: ("path", "label", "split", "start", "end"),
}


@dataclasses.dataclass(frozen=True)
class CsvRow:
    """One video (or clip of one) listed in a CSV."""

    path: str  # as listed
    label: str
    split: str  # "" when the CSV has no split column
    start: float | None
    end: float | None
    csv_path: str
    line: int

    @property
    def origin(self) -> str:
        """`file:line` where the row was read, for messages."""
        return f"{self.csv_path}:{self.line}"


def _canonical_column(cell: str) -> str:
    name = cell.strip().lower()
    return CSV_ALIASES.get(name, name)


def csv_header(first_row: Sequence[str]) -> tuple[str, ...] | None:
    """The columns a header row names, or None when the row is data (not all known names, or no path/label)."""
    cols = tuple(_canonical_column(c) for c in first_row)
    if cols and all(c in CSV_COLUMNS for c in cols) and {"path", "label"} <= set(cols):
        return cols
    return None


def has_video_csv_header(path: str) -> bool:
    """Whether a CSV file's first row is a `path,label,...` header (how a CSV layout is recognised)."""
    try:
        first = csv_files.first_row(path)
    except OSError:
        return False
    return first is not None and csv_header(first) is not None


def _without_query(path: str) -> str:
    """An http(s) URL without its query string and fragment (a presigned URL's signature), else `path` as it is."""
    if path.lower().startswith(("http://", "https://")):
        return path.split("#", 1)[0].split("?", 1)[0]
    return path


def _seconds(text: str, column: str, origin: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LayoutError(f"{origin}: {column} {text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise LayoutError(f"{origin}: {column} {text!r} is not a finite number of seconds")
    return value


def read_video_csv(csv_path: str) -> tuple[list[CsvRow], tuple[str, ...]]:
    """Parses a video CSV into rows and its columns; a malformed row is an error naming file and line.

    A header row (`path,label[,split][,start,end]` in any order; `time_start`/`time_end` accepted)
    is recognised by its names; without one the columns go by count (2: path,label; 3: +split;
    4: path,label,start,end; 5: path,label,split,start,end). start/end come together.
    """
    if not files.isfile(csv_path):
        raise FileNotFoundError(f"{csv_path}: CSV list not found{files.missing_detail(files.dirname(csv_path))}")
    rows: list[CsvRow] = []
    first_line: dict[tuple[str, float | None, float | None], int] = {}
    columns: tuple[str, ...] | None = None
    for line, record in csv_files.rows(csv_path, error=LayoutError):
        if not record or all(not c.strip() for c in record):
            continue
        if columns is None:
            columns = csv_header(record)
            if columns is not None:
                if len(set(columns)) != len(columns) or (("start" in columns) != ("end" in columns)):
                    raise LayoutError(
                        f"{csv_path}:{line}: header {record} repeats a column or has only one of start/end; "
                        f"expected `path,label[,split][,start,end]`"
                    )
                continue
            columns = CSV_POSITIONAL.get(len(record))
            if columns is None:
                raise LayoutError(
                    f"{csv_path}:{line}: {len(record)} columns and no header row; expected "
                    f"`path,label[,split][,start,end]` (2 to 5 columns, or a header naming them)"
                )
        if len(record) != len(columns):
            raise LayoutError(f"{csv_path}:{line}: {len(record)} cells, expected {len(columns)} ({','.join(columns)})")
        cells = {c: v.strip() for c, v in zip(columns, record)}
        origin = f"{csv_path}:{line}"
        if not cells["path"]:
            raise LayoutError(f"{origin}: empty path")
        if not is_video_name(_without_query(cells["path"])):
            raise LayoutError(f"{origin}: {cells['path']!r} is not a video file ({', '.join(VIDEO_EXTENSIONS)})")
        if not cells["label"] or "\n" in cells["label"] or "\r" in cells["label"]:
            raise LayoutError(f"{origin}: empty or multi-line label {cells['label']!r} for {cells['path']}")
        split = cells.get("split", "").lower()
        if "split" in cells and not SPLIT_NAME_RE.match(split):
            raise LayoutError(
                f"{origin}: split {cells['split']!r} is not a split name (letters, digits, underscore; e.g. train, validation, test)"
            )
        start = end = None
        if "start" in cells:
            start = _seconds(cells["start"], "start", origin)
            end = _seconds(cells["end"], "end", origin)
        key = (posixpath.normpath(cells["path"].replace("\\", "/")), start, end)
        if key in first_line:
            raise LayoutError(f"{origin}: {cells['path']} (same start/end) is already listed at line {first_line[key]}")
        first_line[key] = line
        rows.append(CsvRow(cells["path"], cells["label"], split, start, end, csv_path, line))
    return rows, columns or ()
