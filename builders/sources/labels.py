"""Labelled inputs as datasets list them: the video-file test, class folders, split files, hashed splits, label order.

What several datasets share about listing their inputs, so that none imports another's layout:
hmdb51 and video_folder find class folders and read HMDB51's `<class>_test_split<k>.txt` files
alike; video_folder and mri_volumes order labels alike (numbers as numbers), hash an input's
identity into a split alike and take a listed path as absolute alike. Every listing and read goes
through `vidvol.builders.sources.files` (a local folder or any fsspec URL).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping

from vidvol.builders.sources import csv_files
from vidvol.builders.sources import files
from vidvol.core.names import name_bytes

# Containers OpenCV's bundled FFmpeg decodes.
VIDEO_EXTENSIONS = (".avi", ".mp4", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg")
HMDB_SPLIT_FILE_RE = re.compile(r"^(?P<cls>.+)_test_split(?P<k>\d+)\.txt$")
HMDB_SPLIT_IDS = {"0": None, "1": "train", "2": "test"}
_IGNORED_DIRS = ("__MACOSX",)


class LayoutError(ValueError):
    """The collection cannot be read as it is; the message names the file (and line) and the fix."""


def is_video_name(name: str) -> bool:
    """Whether a file name has a video container extension vidvol decodes."""
    return name.lower().endswith(VIDEO_EXTENSIONS)


def is_hidden(name: str) -> bool:
    """Whether a folder entry is hidden or archive clutter (`.git`, `__MACOSX`): never a class or a list folder."""
    return name.startswith(".") or name in _IGNORED_DIRS


# --------------------------------------------------------------------------------------------
# Class folders
# --------------------------------------------------------------------------------------------


def class_folders_in(folder: str, names: set[str] | None = None) -> dict[str, str]:
    """Subfolders of `folder` as `{class name: folder}` (only `names` if given), sorted by name.

    A per-class archive extracted in place may nest one level (`<class>/<class>/<video>`, as
    HMDB51's `<class>.rar` do): the inner folder is then the class folder.
    """
    if not files.isdir(folder):
        return {}
    found = {}
    for d in sorted(files.listdir(folder)):
        path = files.join(folder, d)
        if (names is not None and d not in names) or (names is None and is_hidden(d)) or not files.isdir(path):
            continue
        if not any(is_video_name(f) for f in files.listdir(path)) and files.isdir(files.join(path, d)):
            path = files.join(path, d)
        found[d] = path
    return found


def locate_videos(class_dirs: Mapping[str, str]) -> dict[str, str]:
    """Video file name -> class folder it sits in (a name in two folders is an error)."""
    where: dict[str, str] = {}
    for cls, folder in class_dirs.items():
        for fname in files.listdir(folder):
            if is_video_name(fname):
                if fname in where:
                    raise LayoutError(f"{fname} appears in two class folders: {where[fname]} and {cls}")
                where[fname] = cls
    return where


# --------------------------------------------------------------------------------------------
# HMDB51 split files
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SplitEntry:
    """One line of a split list: a video of a class, in a subset."""

    video: str  # file name
    class_name: str
    subset: str  # "train" or "test"
    split_file: str
    line: int
    label_index: int | None = None  # UCF101 trainlist's index (1-based), if the line has one


def list_lines(path: str) -> Iterator[tuple[int, str, list[str]]]:
    """`(line number, stripped line, whitespace-split fields)` of each non-blank line of a list file (strict UTF-8:
    a byte that is not is a LayoutError naming file and line)."""
    for lineno, raw in enumerate(io.StringIO(csv_files.read_text(path, error=LayoutError), newline=None), start=1):
        line = raw.strip()
        if line:
            yield lineno, line, line.split()


def parse_hmdb_split_file(path: str, class_name: str) -> list[SplitEntry]:
    """Parses HMDB51's `<video>.<ext> <id>` lines; a malformed line is an error naming file and line."""
    entries = []
    for lineno, line, parts in list_lines(path):
        if len(parts) != 2 or not is_video_name(parts[0]) or parts[1] not in HMDB_SPLIT_IDS:
            raise ValueError(
                f"{path}:{lineno}: expected `<video>.<ext> <id>` (ext one of {', '.join(VIDEO_EXTENSIONS)}) "
                f"with id 0, 1 or 2, got {line!r}"
            )
        subset = HMDB_SPLIT_IDS[parts[1]]
        if subset:
            entries.append(SplitEntry(parts[0], class_name, subset, path, lineno))
    return entries


def check_classes(entries: Iterable[SplitEntry], located: Mapping[str, str]) -> None:
    """A video filed under another class than its split list names is an error, not a guess."""
    for e in entries:
        cls = located.get(e.video)
        if cls is not None and cls != e.class_name:
            raise LayoutError(
                f"{e.split_file}:{e.line}: {e.video} is listed for class {e.class_name!r} "
                f"but sits in the {cls!r} class folder"
            )


# --------------------------------------------------------------------------------------------
# Hashed splits, label order, listed paths
# --------------------------------------------------------------------------------------------


def hash_fraction(identity: str | bytes) -> float:
    """A stable number in [0, 1) from the SHA-256 of `identity`'s bytes (same on every machine and run).

    A name that is not UTF-8 (`os.fsdecode`'s surrogates) hashes as its bytes (`vidvol.core.names.name_bytes`);
    a UTF-8 one as its UTF-8 encoding, as it always did.
    """
    digest = hashlib.sha256(name_bytes(identity)).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hashed_split(identity: str | bytes, fractions: Mapping[str, float]) -> str:
    """The split `identity` falls into: fractions taken in order as consecutive slices of [0, 1)."""
    x = hash_fraction(identity)
    bound = 0.0
    names = [k for k, v in fractions.items() if v > 0]
    for name in names:
        bound += fractions[name]
        if x < bound:
            return name
    return names[-1]


def _as_number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def label_names(values: Iterable[str]) -> list[str]:
    """Distinct labels, sorted numerically when all are finite numbers ("2" < "10"), else as strings."""
    distinct = set(values)
    numbers = {v: _as_number(v) for v in distinct}
    if distinct and all(n is not None for n in numbers.values()):
        return sorted(distinct, key=lambda v: (numbers[v], v))
    return sorted(distinct)


def is_absolute(path: str) -> bool:
    """Absolute in the list's own terms (POSIX or this OS), or a URL."""
    return path.startswith("/") or os.path.isabs(path) or files.is_url(path)
