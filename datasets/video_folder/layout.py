"""video_folder's manual_dir layouts: class folders, split lists (UCF101 and HMDB51 formats), CSV lists, hashed splits.

`discover` reads a manual_dir as one of them. manual_dir may be a local folder or a URL
(`s3://bucket/videos`, any fsspec URL): every listing, existence check and list read goes through
`vidvol.builders.sources.files`; what hmdb51 and mri_volumes share with it (class folders, HMDB51
split files, hashed splits, label order) is `vidvol.builders.sources.labels`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence

from vidvol.builders.sources import files
from vidvol.builders.sources.labels import HMDB_SPLIT_FILE_RE, VIDEO_EXTENSIONS, LayoutError, SplitEntry
from vidvol.builders.sources.labels import check_classes, class_folders_in, hashed_split, is_absolute, is_hidden
from vidvol.builders.sources.labels import is_video_name, label_names, list_lines, locate_videos, parse_hmdb_split_file
from vidvol.core import redact
from vidvol.core.names import name_bytes
from vidvol.datasets.video_folder.csv_list import has_video_csv_header, read_video_csv

logger = logging.getLogger(__name__)

UCF_LIST_RE = re.compile(r"^(?P<subset>train|test)list(?P<k>\d+)\.txt$", re.IGNORECASE)
UCF_CLASS_INDEX = "classInd.txt"
SPLITS = ("train", "validation", "test")
NO_SPLIT_SET = "none"

EXPECTED_LAYOUT = """\
Expected in manual_dir, one of:
  <class>/<video>.<ext>          class folders (also one folder down, e.g. UCF-101/<class>/...);
                                 any container OpenCV decodes: .avi, .mp4, .mkv, .webm, .mov, .m4v, .mpg
  + optional split lists, in manual_dir or one folder down:
    trainlist01.txt / testlist01.txt        UCF101: `<class>/<video>.<ext> [<label index>]`
    <class>_test_split1.txt                 HMDB51: `<video>.<ext> <id>` (1 train, 2 test, 0 unused)
  or a CSV with a header row `path,label[,split][,start,end]` (paths relative to manual_dir)"""


# --------------------------------------------------------------------------------------------
# Class folders
# --------------------------------------------------------------------------------------------


def videos_in(folder: str) -> list[str]:
    """Sorted names of the video files directly in `folder`."""
    return sorted(f for f in files.listdir(folder) if is_video_name(f) and not f.startswith("."))


def _has_class_folders(folder: str, exclude: set[str]) -> bool:
    """Whether some subfolder of `folder` (not excluded) holds a video, directly or nested by its own name."""
    return any(videos_in(path) for path in class_folders_in(folder).values() if files.normpath(path) not in exclude)


def find_class_folders(manual_dir: str, exclude: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
    """(folder holding the class folders, `{class: folder}`): manual_dir itself or the one folder below it that holds them.

    Every subfolder there is a class and must hold at least one video; a folder without one is an
    error naming it (a stray folder would otherwise become an empty class). `exclude`: folders
    that are not classes (the one holding the split lists).
    """
    exclude = {files.normpath(e) for e in exclude}
    norm = files.normpath
    if not files.isdir(manual_dir):
        raise FileNotFoundError(f"manual_dir {manual_dir} does not exist{files.missing_detail(manual_dir)}.\n{EXPECTED_LAYOUT}")

    top = {d: p for d, p in class_folders_in(manual_dir).items() if norm(p) not in exclude}
    if any(videos_in(p) for p in top.values()):
        root, classes = manual_dir, top
    else:
        nested = [p for p in top.values() if _has_class_folders(p, exclude)]
        if len(nested) > 1:
            raise LayoutError(
                f"manual_dir {manual_dir}: class folders in more than one folder: {nested}. Keep one folder of "
                f"class folders (or put the class folders directly in manual_dir).\n{EXPECTED_LAYOUT}"
            )
        if not nested:
            found = sorted(files.listdir(manual_dir))[:20]
            raise LayoutError(
                f"manual_dir {manual_dir}: no class folder holding videos, and no CSV list; found {found}.\n{EXPECTED_LAYOUT}"
            )
        root = nested[0]
        classes = {d: p for d, p in class_folders_in(root).items() if norm(p) not in exclude}
    empty = [d for d, p in classes.items() if not videos_in(p)]
    if empty:
        raise LayoutError(
            f"class folder {files.join(root, empty[0])} holds no video ({', '.join(VIDEO_EXTENSIONS)})"
            + (f" (nor do {empty[1:6]})" if len(empty) > 1 else "")
            + "; every folder next to the class folders is taken as a class: add its videos or move it out"
        )
    loose = videos_in(root)
    if loose:
        logger.warning(
            "%d videos directly in %s are in no class folder and are left out, e.g. %s", len(loose), root, loose[:3]
        )
    return root, classes


# --------------------------------------------------------------------------------------------
# Split lists
# --------------------------------------------------------------------------------------------


def parse_ucf_list(path: str, subset: str) -> list[SplitEntry]:
    """Parses UCF101's `<class>/<video>.<ext> [<label index>]` lines; a malformed line is an error naming file and line."""
    entries = []
    for lineno, line, parts in list_lines(path):
        rel = parts[0].replace("\\", "/")
        cls, _, video = rel.rpartition("/")
        index = parts[1] if len(parts) == 2 else None
        if (
            len(parts) not in (1, 2) or not cls or "/" in cls or not is_video_name(video)
            or (index is not None and not index.isdigit())
        ):
            raise ValueError(
                f"{path}:{lineno}: expected `<class>/<video>.<ext>` (ext one of {', '.join(VIDEO_EXTENSIONS)}), "
                f"optionally followed by an integer label index, got {line!r}"
            )
        entries.append(SplitEntry(video, cls, subset, path, lineno, int(index) if index is not None else None))
    return entries


def parse_class_index(path: str) -> list[str]:
    """UCF101's `classInd.txt` (`<index> <class>` lines, 1..N) -> class names in index order."""
    by_index: dict[int, tuple[str, int]] = {}
    for lineno, line, parts in list_lines(path):
        if len(parts) != 2 or not parts[0].isdigit():
            raise ValueError(f"{path}:{lineno}: expected `<index> <class>`, got {line!r}")
        index = int(parts[0])
        if index in by_index:
            raise ValueError(f"{path}:{lineno}: index {index} already given at line {by_index[index][1]}")
        by_index[index] = (parts[1], lineno)
    if sorted(by_index) != list(range(1, len(by_index) + 1)):
        raise ValueError(f"{path}: indices must run 1..N without gaps, got {sorted(by_index)[:10]}...")
    names = [by_index[i][0] for i in range(1, len(by_index) + 1)]
    if len(set(names)) != len(names):
        dupes = [n for n, c in collections.Counter(names).items() if c > 1]
        raise ValueError(f"{path}: class {dupes[0]!r} listed twice")
    return names


@dataclasses.dataclass(frozen=True)
class SplitSet:
    """One numbered set of split lists (UCF101 `*list0k.txt` or HMDB51 `*_test_splitk.txt`) in one folder."""

    kind: str  # "ucf101" or "hmdb51"
    number: int
    folder: str
    list_files: tuple[str, ...]  # file names in `folder`

    def describe(self) -> str:
        """E.g. `trainlist01.txt, testlist01.txt in DIR` or `3 *_test_split1.txt files in DIR`."""
        if self.kind == "ucf101":
            return f"{', '.join(self.list_files)} in {self.folder}"
        return f"{len(self.list_files)} *_test_split{self.number}.txt files in {self.folder}"


def _split_sets_in(folder: str) -> list[SplitSet]:
    names = sorted(files.listdir(folder))
    groups: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    for name in names:
        m = UCF_LIST_RE.match(name)
        if m:
            groups[("ucf101", int(m["k"]))].append(name)
            continue
        m = HMDB_SPLIT_FILE_RE.match(name)
        if m:
            groups[("hmdb51", int(m["k"]))].append(name)
    sets = []
    for (kind, number), found in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if kind == "ucf101":  # trainlist first
            found = sorted(found, key=lambda n: (not n.lower().startswith("train"), n))
        sets.append(SplitSet(kind, number, folder, tuple(found)))
    return sets


def find_split_sets(manual_dir: str) -> list[SplitSet]:
    """Split-list sets in manual_dir or in one of its subfolders (one folder only), by number."""
    folders = [manual_dir] + [
        files.join(manual_dir, d) for d in sorted(files.listdir(manual_dir))
        if not is_hidden(d) and not is_video_name(d) and files.isdir(files.join(manual_dir, d))
    ]
    with_lists = [(folder, sets) for folder in folders if (sets := _split_sets_in(folder))]
    if len(with_lists) > 1:
        raise LayoutError(
            f"split lists in more than one folder: {[f for f, _ in with_lists]}; keep the lists in one folder"
        )
    return with_lists[0][1] if with_lists else []


def parse_split_set_name(value: str | int | None) -> int | str | None:
    """`split_set` config value -> None (first set found), `NO_SPLIT_SET` (hashed split) or a set number."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    text = str(value).strip().lower()
    if text == NO_SPLIT_SET:
        return NO_SPLIT_SET
    m = re.fullmatch(r"(?:split|set)?_?0*(\d+)", text)
    if not m:
        raise LayoutError(
            f"split_set {value!r}: expected a set number such as 1 (trainlist01.txt, *_test_split1.txt), "
            f"{NO_SPLIT_SET!r} for a hashed split, or nothing for the first set found"
        )
    return int(m[1])


def choose_split_set(sets: Sequence[SplitSet], requested: str | int | None) -> SplitSet | None:
    """The set a config asks for: None = the first found (logged), "none" = no lists, k = set k."""
    wanted = parse_split_set_name(requested)
    if wanted == NO_SPLIT_SET:
        return None
    if not sets:
        if wanted is not None:
            raise LayoutError(f"split_set {requested!r} asked for, but manual_dir holds no split lists.\n{EXPECTED_LAYOUT}")
        return None
    number = sets[0].number if wanted is None else wanted
    matching = [s for s in sets if s.number == number]
    if not matching:
        available = sorted({s.number for s in sets})
        raise LayoutError(f"split_set {requested!r}: no such set; found sets {available} ({sets[0].folder})")
    if len(matching) > 1:
        raise LayoutError(
            f"split set {number} exists as UCF101 lists ({matching[0].describe()}) and as HMDB51 split files "
            f"({matching[1].describe()}); keep one format"
        )
    chosen = matching[0]
    if wanted is None:
        logger.warning(
            "Using split set %d (%s lists: %s); set the config's split_set to choose another set, or %r for a hashed split",
            chosen.number, chosen.kind, chosen.describe(), NO_SPLIT_SET,
        )
    return chosen


def read_split_set(split_set: SplitSet) -> list[SplitEntry]:
    """Every train/test entry of a set; a video listed twice is an error naming both lines."""
    entries: list[SplitEntry] = []
    for name in split_set.list_files:
        path = files.join(split_set.folder, name)
        if split_set.kind == "ucf101":
            entries.extend(parse_ucf_list(path, UCF_LIST_RE.match(name)["subset"].lower()))
        else:
            entries.extend(parse_hmdb_split_file(path, HMDB_SPLIT_FILE_RE.match(name)["cls"]))
    first: dict[tuple[str, str], SplitEntry] = {}
    for e in entries:
        key = (e.class_name, e.video)
        if key in first:
            f = first[key]
            raise LayoutError(
                f"{e.split_file}:{e.line}: {e.class_name}/{e.video} is already listed at {f.split_file}:{f.line}"
            )
        first[key] = e
    return entries


def check_label_indices(entries: Iterable[SplitEntry], names: Sequence[str] | None) -> None:
    """UCF101 label indices: as `classInd.txt` gives them when present, else one index per class throughout."""
    position = {n: i + 1 for i, n in enumerate(names)} if names is not None else None
    seen: dict[str, SplitEntry] = {}
    for e in entries:
        if e.label_index is None:
            continue
        if position is not None:
            if position.get(e.class_name, e.label_index) != e.label_index:
                raise LayoutError(
                    f"{e.split_file}:{e.line}: label index {e.label_index} for {e.class_name!r}, "
                    f"but {UCF_CLASS_INDEX} gives {position[e.class_name]}"
                )
            continue
        f = seen.setdefault(e.class_name, e)
        if f.label_index != e.label_index:
            raise LayoutError(
                f"{e.split_file}:{e.line}: label index {e.label_index} for {e.class_name!r}, "
                f"but {f.split_file}:{f.line} gives {f.label_index}"
            )


# --------------------------------------------------------------------------------------------
# Hashed splits
# --------------------------------------------------------------------------------------------


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """Split fractions: each in [0, 1], summing to 1; splits with 0 are left out."""
    bad = {k: v for k, v in fractions.items() if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0)}
    if bad:
        raise LayoutError(f"split fractions must lie in [0, 1], got {bad}")
    total = sum(fractions.values())
    if abs(total - 1.0) > 1e-6:
        raise LayoutError(f"split fractions must sum to 1, got {dict(fractions)} (sum {total:g})")
    return {k: float(v) for k, v in fractions.items() if v > 0}


def compile_group_regex(pattern: str | None) -> re.Pattern | None:
    """The config's group regex, checked (an invalid one is an error naming it)."""
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise LayoutError(f"group_regex {pattern!r} is not a valid regular expression: {e}") from None


def group_of(file_name: str, pattern: re.Pattern | None) -> str | None:
    """The group a file name belongs to: the regex's first capture group (or whole match), None if no match."""
    if pattern is None:
        return None
    m = pattern.search(file_name)
    if m is None:
        return None
    return m.group(1) if pattern.groups else m.group(0)


# --------------------------------------------------------------------------------------------
# CSV lists
# --------------------------------------------------------------------------------------------


def resolve(manual_dir: str, path: str) -> str:
    """The file to read: the listed path itself when absolute, else joined onto manual_dir (a path or a URL)."""
    if is_absolute(path):
        return path
    return files.join(manual_dir, *posixpath.normpath(path.replace("\\", "/")).split("/"))


def listed_id(manual_dir: str, path: str) -> str:
    """A stable id with no local absolute path and no URL secret: the path relative to manual_dir, or a hash-tagged name for outside files."""
    if not is_absolute(path):
        return redact.url(posixpath.normpath(path.replace("\\", "/")))  # a query (`?sig=..`) is never kept
    bare = redact.without_query(path)
    try:
        rel = files.relpath(bare, manual_dir)
    except ValueError:  # a URL and a local path, or two URL schemes
        rel = None
    if rel is not None and rel != os.pardir and not rel.startswith((os.pardir + os.sep, os.pardir + "/")):
        return redact.url(posixpath.normpath(rel.replace(os.sep, "/")) + ("?" + redact.MASK if bare != path else ""))
    digest = hashlib.sha256(name_bytes(path)).hexdigest()[:12]
    return f"external/{digest}/{files.basename(redact.url(path))}"  # no URL secret in a key or video_id


# --------------------------------------------------------------------------------------------
# The whole collection
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VideoEntry:
    """One example to write: a video (or a clip of one), its label, split, and where it was named."""

    path: str  # file to read (path or URL)
    # The `video_id` feature: `<class>/<file>` or the CSV path. Names as the filesystem gave them: one that
    # is not UTF-8 keeps `os.fsdecode`'s surrogates here (split hashing takes its bytes); the builder writes
    # it, and the label, as `vidvol.core.names.shown` shows them.
    video_id: str
    label: str
    split: str
    origin: str  # `file:line` of the list or CSV row, or the class folder
    start: float | None = None
    end: float | None = None

    @property
    def key(self) -> str:
        """The example key: the video id, plus the time range for a clip."""
        if self.start is None:
            return self.video_id
        return f"{self.video_id}@{self.start!r}-{self.end!r}"


@dataclasses.dataclass(frozen=True)
class Options:
    """How to read a collection (the `video_folder` config's layout fields)."""

    split_set: str | int | None = None
    csv_file: str | None = None
    fractions: Mapping[str, float] = dataclasses.field(default_factory=lambda: {"train": 0.8, "validation": 0.1, "test": 0.1})
    group_regex: str | None = None


@dataclasses.dataclass
class Collection:
    """What a manual_dir holds: label names (in ClassLabel order), entries by split, and how it was read."""

    label_names: list[str]
    splits: dict[str, list[VideoEntry]]
    has_times: bool
    layout: str  # "class folders", "class folders + UCF101 lists 1", "CSV DIR/x.csv", ...


def find_csv(manual_dir: str, csv_file: str | None) -> str | None:
    """The CSV to read: the config's `csv_file` (relative to manual_dir, or absolute), else the one
    top-level `*.csv` whose header names `path` and `label`, else None (class folders)."""
    if csv_file:
        path = csv_file if is_absolute(csv_file) else files.join(manual_dir, csv_file)
        if not files.isfile(path):
            raise FileNotFoundError(f"csv_file {csv_file}: {path} not found{files.missing_detail(path)}")
        return path
    if not files.isdir(manual_dir):
        return None
    found = [
        files.join(manual_dir, n) for n in sorted(files.listdir(manual_dir))
        if n.lower().endswith(".csv") and has_video_csv_header(files.join(manual_dir, n))
    ]
    if len(found) > 1:
        raise LayoutError(
            f"manual_dir {manual_dir} holds several video CSVs {[files.basename(p) for p in found]}; "
            "name one with the config's csv_file"
        )
    if found:
        logger.warning("Using the CSV list %s (its header names path and label); csv_file names another", found[0])
    return found[0] if found else None


def _hashed(entries: list[VideoEntry], names: Mapping[str, str], options: Options, what: str) -> dict[str, list[VideoEntry]]:
    """Assigns entries to splits by the hash of their group (`names`: entry key -> file name for the regex)."""
    fractions = check_fractions(options.fractions)
    pattern = compile_group_regex(options.group_regex)
    unmatched = []
    out: dict[str, list[VideoEntry]] = {name: [] for name in fractions}
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for e in entries:
        group = group_of(names[e.key], pattern)
        if pattern is not None and group is None:
            unmatched.append(names[e.key])
        identity = f"group:{group}" if group is not None else e.video_id
        split = hashed_split(identity, fractions)
        groups[split].add(identity)
        out[split].append(dataclasses.replace(e, split=split))
    if unmatched:
        logger.warning(
            "group_regex %r matches no group in %d of %d file names (each is hashed on its own), e.g. %s",
            options.group_regex, len(unmatched), len(entries), unmatched[:3],
        )
    if pattern is None:
        ucf_like = sum(1 for e in entries if re.search(r"_g\d+_c\d+", names[e.key]))
        if entries and ucf_like * 2 >= len(entries):
            logger.warning(
                "%d of %d file names look like UCF101's `v_<class>_g<group>_c<clip>`: clips of one group show the "
                "same people; set group_regex '_g(\\d+)_' so that a group never straddles two splits",
                ucf_like, len(entries),
            )
    unit = "groups" if pattern is not None else "videos"
    logger.info(
        "%s: hashed split of %d %s: %s", what, sum(len(g) for g in groups.values()), unit,
        ", ".join(f"{len(groups[s])} in {s}" for s in out),
    )
    return out


def _from_folders(manual_dir: str, options: Options) -> Collection:
    sets = find_split_sets(manual_dir)
    chosen = choose_split_set(sets, options.split_set)
    exclude = {chosen.folder} if chosen is not None and chosen.folder != manual_dir else set()
    if chosen is None and sets:
        exclude = {sets[0].folder} if sets[0].folder != manual_dir else set()
    root, class_dirs = find_class_folders(manual_dir, exclude)
    names = sorted(class_dirs)
    layout = f"class folders in {root}"
    if chosen is None:
        entries, file_names = [], {}
        for cls, folder in class_dirs.items():
            for video in videos_in(folder):
                e = VideoEntry(files.join(folder, video), f"{cls}/{video}", cls, "", folder)
                entries.append(e)
                file_names[e.key] = video
        splits = _hashed(entries, file_names, options, layout)
        return Collection(names, splits, False, layout + ", hashed split")
    listed = read_split_set(chosen)
    if chosen.kind == "hmdb51":
        check_classes(listed, locate_videos(class_dirs))
    else:
        index_file = files.join(chosen.folder, UCF_CLASS_INDEX)
        if files.isfile(index_file):
            ordered = parse_class_index(index_file)
            unknown = [c for c in names if c not in ordered]
            if unknown:
                raise LayoutError(f"{index_file}: class folder {unknown[0]!r} is not listed; add it or remove the folder")
            names = ordered
        check_label_indices(listed, names if files.isfile(index_file) else None)
    splits: dict[str, list[VideoEntry]] = {"train": [], "test": []}
    for e in listed:
        folder = class_dirs.get(e.class_name) or files.join(root, e.class_name)
        splits[e.subset].append(
            VideoEntry(files.join(folder, e.video), f"{e.class_name}/{e.video}", e.class_name, e.subset, f"{e.split_file}:{e.line}")
        )
    unknown_classes = sorted({e.class_name for e in listed if e.class_name not in class_dirs})
    if unknown_classes:
        logger.warning(
            "split lists name classes with no class folder (their videos will be reported missing): %s", unknown_classes[:5]
        )
    num_listed = len(listed)
    num_videos = sum(len(videos_in(f)) for f in class_dirs.values())
    if num_videos > num_listed:
        logger.info("%d videos in the class folders are in no list of set %d (not written)", num_videos - num_listed, chosen.number)
    return Collection(names, splits, False, f"{layout} + {chosen.kind} split set {chosen.number} ({chosen.describe()})")


def _from_csv(manual_dir: str, csv_path: str, options: Options) -> Collection:
    if parse_split_set_name(options.split_set) not in (None, NO_SPLIT_SET):
        raise LayoutError(
            f"split_set {options.split_set!r} applies to class folders with split lists; {csv_path} is a CSV list "
            "(give it a split column, or leave splits to the hash)"
        )
    rows, columns = read_video_csv(csv_path)
    if not rows:
        raise LayoutError(f"{csv_path}: no rows.\n{EXPECTED_LAYOUT}")
    entries = [
        VideoEntry(
            resolve(manual_dir, r.path), listed_id(manual_dir, r.path), r.label, r.split, r.origin, r.start, r.end,
        )
        for r in rows
    ]
    names = label_names(r.label for r in rows)
    has_times = "start" in columns
    if "split" in columns:
        splits: dict[str, list[VideoEntry]] = collections.defaultdict(list)
        for e in entries:
            splits[e.split].append(e)
        ordered = [s for s in SPLITS if s in splits] + sorted(s for s in splits if s not in SPLITS)
        return Collection(names, {s: splits[s] for s in ordered}, has_times, f"CSV {csv_path}")
    file_names = {e.key: posixpath.basename(e.video_id) for e in entries}
    return Collection(names, _hashed(entries, file_names, options, f"CSV {csv_path}"), has_times, f"CSV {csv_path}, hashed split")


def discover(manual_dir: str, options: Options) -> Collection:
    """Reads a manual_dir as a CSV list or as class folders with optional split lists.

    The layouts:

    - class folders `<class>/<video>.<ext>` (any container OpenCV decodes), directly in manual_dir
      or in one folder below it (`UCF-101/<class>/...`, `hmdb51_org/<class>/...`); labels are the
      sorted folder names (or the order of a UCF101 `classInd.txt` next to the lists);
    - optional split lists next to them: UCF101's `trainlist01.txt` (`<class>/<video> <label index>`)
      and `testlist01.txt` (`<class>/<video>`), or HMDB51's `<class>_test_split<k>.txt`
      (`<video> <id>`, 1 = train, 2 = test, 0 = unused); one numbered *set* of lists is used;
    - without lists, a deterministic hashed train/validation/test split by video, or by a group
      that a regular expression reads from the file name (UCF101's `_g(\\d+)_`), so that one group
      never straddles two splits;
    - or a CSV `path,label[,split][,start,end]` (`csv_list`: the config's `csv_file`, or one
      top-level CSV with a `path,label` header), where `start`/`end` seconds cut a clip out of a
      longer video (Kinetics-style lists).

    Nothing here decodes a video; a listed video that is missing is left for the example function
    to report as a skip.

    Args:
      manual_dir: the folder or URL holding the videos.
      options: the config's layout options (CSV file, split set, hashed fractions, group pattern).

    Returns:
      The `Collection`: the layout found, the label names and each split's videos.

    Raises:
      LayoutError: nothing to write (no video in any split), with the layouts expected.
    """
    csv_path = find_csv(manual_dir, options.csv_file)
    if csv_path is not None:
        collection = _from_csv(manual_dir, csv_path, options)
    else:
        collection = _from_folders(manual_dir, options)
    empty = [s for s, es in collection.splits.items() if not es]
    for s in empty:
        logger.warning("%s: split %r has no video and is left out", collection.layout, s)
    collection.splits = {s: es for s, es in collection.splits.items() if es}
    if not collection.splits:
        raise LayoutError(f"manual_dir {manual_dir}: no video to write ({collection.layout}).\n{EXPECTED_LAYOUT}")
    return collection
