"""mri_volumes manual_dir layout: parse labels.csv, name the classes, assign subjects to splits.

manual_dir may be a local folder or a URL (`s3://bucket/mri`, any fsspec URL): labels.csv is read
and the volume paths are resolved through `vidvol.builders.sources.files`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import posixpath
from collections.abc import Iterable, Sequence

from vidvol.builders.sources import csv_files
from vidvol.builders.sources import files
from vidvol.builders.sources import labels
from vidvol.core import redact

logger = logging.getLogger(__name__)

LABELS_CSV = "labels.csv"
DEFAULT_LABEL_COLUMN = "label"
# Used only when the configured column is the default "label" and the CSV lacks it.
LABEL_COLUMN_ALIASES = ("pass",)
SPLITS = ("train", "validation", "test")
# Hash assignment when the CSV has no `split` column: cumulative upper bounds of train, validation, test.
SPLIT_FRACTIONS = (0.8, 0.9, 1.0)

EXPECTED_LAYOUT = f"""\
Expected in manual_dir: {LABELS_CSV} with a header row and the columns
  path     a .nii or .nii.gz file, relative to manual_dir or absolute
  label    the class of the scan (the column name is the config's `label_column`;
           a `pass` column is accepted when the config keeps the default `label`)
  subject  optional: scans of one subject always land in the same split
  split    optional: train, validation or test (otherwise 80/10/10 by a stable hash of subject, or path)"""


class LayoutError(ValueError):
    """labels.csv cannot be used as it is; the message names the file (and line) and what was expected."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One scan listed in labels.csv."""

    path: str  # as listed in the CSV (stripped)
    label: str
    subject: str  # "" when the CSV has no subject column or the cell is empty
    split: str  # train, validation or test
    line: int
    csv_path: str
    split_given: bool = False  # True: the CSV's `split` column said so; False: hashed from subject (or path)

    @property
    def origin(self) -> str:
        """`file:line` where the row was read, for messages."""
        return f"{self.csv_path}:{self.line}"


def _find_column(fieldnames: Sequence[str], name: str) -> str | None:
    """The header cell matching `name` (exact after strip, else case-insensitive), or None."""
    stripped = {f.strip(): f for f in fieldnames}
    if name in stripped:
        return stripped[name]
    folded = {f.strip().lower(): f for f in fieldnames}
    return folded.get(name.lower())


def resolve_label_column(fieldnames: Sequence[str], label_column: str, csv_path: str) -> str:
    """The header cell that holds the labels; the `pass` alias only stands in for the default `label`."""
    found = _find_column(fieldnames, label_column)
    if found is not None:
        return found
    if label_column == DEFAULT_LABEL_COLUMN:
        aliases = [c for c in (_find_column(fieldnames, a) for a in LABEL_COLUMN_ALIASES) if c is not None]
        if len(aliases) == 1:
            logger.info("%s: no %r column, using %r as the label column", csv_path, label_column, aliases[0])
            return aliases[0]
    raise LayoutError(
        f"{csv_path}: no label column {label_column!r}; found columns {list(fieldnames)}. "
        f"Set the config's label_column to the column holding the labels.\n{EXPECTED_LAYOUT}"
    )


def split_for(identity: str) -> str:
    """Deterministic 80/10/10 train/validation/test bucket of a subject (or path) from its SHA-256."""
    fraction = labels.hash_fraction(identity)
    for split, bound in zip(SPLITS, SPLIT_FRACTIONS):
        if fraction < bound:
            return split
    return SPLITS[-1]


def read_labels_csv(csv_path: str, *, label_column: str = DEFAULT_LABEL_COLUMN) -> list[Row]:
    """Parses labels.csv into rows; a bad header, empty cell, unknown split or repeated path is an error."""
    if not files.isfile(csv_path):
        raise FileNotFoundError(f"{csv_path}: labels file not found{files.missing_detail(files.dirname(csv_path))}.\n{EXPECTED_LAYOUT}")
    rows: list[Row] = []
    first_line: dict[str, int] = {}
    fieldnames, records = csv_files.dict_rows(csv_path, error=LayoutError)
    path_col = _find_column(fieldnames, "path")
    if path_col is None:
        raise LayoutError(f"{csv_path}: no `path` column; found columns {list(fieldnames)}.\n{EXPECTED_LAYOUT}")
    label_col = resolve_label_column(fieldnames, label_column, csv_path)
    subject_col = _find_column(fieldnames, "subject")
    split_col = _find_column(fieldnames, "split")
    for line, record in records:
        path = (record.get(path_col) or "").strip()
        label = (record.get(label_col) or "").strip()
        if not path:
            raise LayoutError(f"{csv_path}:{line}: empty `path` cell, expected a .nii or .nii.gz file")
        if not label:
            raise LayoutError(f"{csv_path}:{line}: empty label in column {label_col!r} for {path}")
        if "\n" in label or "\r" in label:
            raise LayoutError(f"{csv_path}:{line}: label {label!r} spans lines; expected a one-line class name")
        normalized = posixpath.normpath(path.replace("\\", "/"))
        if normalized in first_line:
            raise LayoutError(f"{csv_path}:{line}: {path} is already listed at line {first_line[normalized]}")
        first_line[normalized] = line
        subject = (record.get(subject_col) or "").strip() if subject_col else ""
        if split_col:
            split = (record.get(split_col) or "").strip().lower()
            if split not in SPLITS:
                raise LayoutError(
                    f"{csv_path}:{line}: unknown split {record.get(split_col)!r} for {path}, expected one of {SPLITS}"
                )
        else:
            split = split_for(subject or path)
        rows.append(Row(path=path, label=label, subject=subject, split=split, line=line, csv_path=csv_path,
                        split_given=bool(split_col)))
    if not rows:
        raise LayoutError(f"{csv_path}: no rows after the header.\n{EXPECTED_LAYOUT}")
    if split_col:
        _warn_straddling_subjects(rows)
    return rows


def _warn_straddling_subjects(rows: Iterable[Row]) -> None:
    """Logs subjects that a user-given split column puts into more than one split (hashing never does)."""
    splits_of: dict[str, set[str]] = collections.defaultdict(set)
    for row in rows:
        if row.subject:
            splits_of[row.subject].add(row.split)
    mixed = sorted(s for s, splits in splits_of.items() if len(splits) > 1)
    if mixed:
        logger.warning("split column puts %d subjects into more than one split, e.g. %s", len(mixed), mixed[:5])


def check_labels(rows: Iterable[Row], names: Sequence[str]) -> None:
    """Every row's label must be one of the declared class names."""
    known = set(names)
    for row in rows:
        if row.label not in known:
            raise LayoutError(f"{row.origin}: label {row.label!r} is not one of the declared label_names {list(names)}")


def local_path(manual_dir: str, row: Row) -> str:
    """The file to read: the CSV path itself when absolute, else joined onto manual_dir (a path or a URL)."""
    if labels.is_absolute(row.path):
        return row.path
    return files.join(manual_dir, *posixpath.normpath(row.path.replace("\\", "/")).split("/"))


def listed_path(manual_dir: str, row: Row) -> str:
    """The `path` feature: as listed, except that an absolute path inside manual_dir becomes relative, and that a
    URL's credentials and query string (a presigned URL's signature) are replaced by `***`, also when the URL lies
    under manual_dir (`sub1/t1.nii.gz?***`)."""
    if labels.is_absolute(row.path):
        bare = redact.without_query(row.path)
        try:
            rel = files.relpath(bare, manual_dir)
        except ValueError:  # a URL and a local path, or two URL schemes
            return redact.url(row.path)
        if rel != os.pardir and not rel.startswith((os.pardir + os.sep, os.pardir + "/")):
            return redact.url(posixpath.normpath(rel.replace(os.sep, "/")) + ("?" + redact.MASK if bare != row.path else ""))
    return redact.url(row.path)


def example_key(manual_dir: str, row: Row) -> str:
    """Stable example key with no local absolute path and no URL secret: the relative path, or a hash-tagged name
    for outside files."""
    if not labels.is_absolute(row.path):
        return redact.url(posixpath.normpath(row.path.replace("\\", "/")))
    inside = listed_path(manual_dir, row)
    if not labels.is_absolute(inside):
        return inside
    digest = hashlib.sha256(row.path.encode("utf-8")).hexdigest()[:12]
    return f"external/{digest}/{posixpath.basename(redact.url(row.path))}"


def empty_split_reason(rows: Sequence[Row], split: str) -> str:
    """Why no row of labels.csv landed in `split` (for the build's summary), e.g. "7 subjects; hashing put none in test"."""
    if not rows:
        return "labels.csv lists no scan"
    if all(r.split_given for r in rows):
        return f"the `split` column of {os.path.basename(rows[0].csv_path)} names no row {split!r}"
    subjects = {r.subject for r in rows if r.subject}
    scans_alone = sum(1 for r in rows if not r.subject)
    parts = ([f"{len(subjects)} subject{'s' if len(subjects) != 1 else ''}"] if subjects else []) + (
        [f"{scans_alone} scan{'s' if scans_alone != 1 else ''} without a subject"] if scans_alone else [])
    share = {s: f"{round(100 * (hi - lo))}%" for s, lo, hi in zip(SPLITS, (0.0,) + SPLIT_FRACTIONS[:-1], SPLIT_FRACTIONS)}
    return f"{' and '.join(parts)}; hashing (~{share.get(split, '?')} to {split}) put none in {split}"


def splits_with_reasons(rows: Sequence[Row]) -> dict[str, tuple[list[Row], str]]:
    """Every split (train, validation, test) with its rows and, for a split with none, why."""
    return {split: (group, "" if group else empty_split_reason(rows, split))
            for split in SPLITS for group in [[r for r in rows if r.split == split]]}
