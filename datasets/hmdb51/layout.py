"""HMDB51 manual_dir layouts: find the videos and official split files, or extract the .rar archives.

manual_dir may be a local folder or a URL (`s3://bucket/hmdb51`, any fsspec URL): every listing,
existence check and split-file read goes through `vidvol.builders.files`.
"""

from __future__ import annotations

import dataclasses
import os
import re

from vidvol.builders import archive
from vidvol.builders import files

CLASS_NAMES_FILE = os.path.join(os.path.dirname(__file__), "class_names.txt")
ORG_DIR = "hmdb51_org"
SPLITS_DIR = "testTrainMulti_7030_splits"
ORG_RAR = "hmdb51_org.rar"
SPLITS_RAR = "test_train_splits.rar"
SPLIT_FILE_RE = re.compile(r"^(?P<cls>.+)_test_split(?P<k>[123])\.txt$")
SPLIT_IDS = {"0": None, "1": "train", "2": "test"}
# Containers OpenCV's bundled FFmpeg decodes; the official release is .avi only.
VIDEO_EXTENSIONS = (".avi", ".mp4", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg")


def is_video_name(name: str) -> bool:
    """Whether a file name has a video container extension vidvol decodes."""
    return name.lower().endswith(VIDEO_EXTENSIONS)

EXPECTED_LAYOUT = f"""\
Expected in manual_dir, either the extracted layout:
  {ORG_DIR}/<class>/<video>.avi          (class folders may also sit directly in manual_dir;
                                          any container OpenCV decodes: .avi, .mp4, .mkv, .webm, .mov)
  {SPLITS_DIR}/<class>_test_split<k>.txt  (lines `<video>.<ext> <id>`, id 1 = train, 2 = test, 0 = unused)
or the original archives:
  {ORG_RAR}  (one nested <class>.rar per class)
  {SPLITS_RAR}"""


def class_names() -> list[str]:
    """The 51 official HMDB51 class names, sorted."""
    with open(CLASS_NAMES_FILE) as f:
        return [line.strip() for line in f if line.strip()]


@dataclasses.dataclass(frozen=True)
class SplitEntry:
    """One line of an official split file."""

    video: str
    class_name: str
    subset: str  # "train" or "test"
    split_file: str
    line: int


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the class folders and the split files are."""

    class_dirs: dict[str, str]  # class name -> folder (path or URL) holding its .avi files
    splits_dir: str


def _class_dirs_in(folder: str, names: set[str]) -> dict[str, str]:
    """Official-class subfolders of folder."""
    if not files.isdir(folder):
        return {}
    found = {}
    for d in sorted(files.listdir(folder)):
        path = files.join(folder, d)
        if d not in names or not files.isdir(path):
            continue
        # The official per-class archives hold `<class>/<video>.avi`, so extraction may nest one level.
        if not any(is_video_name(f) for f in files.listdir(path)) and files.isdir(files.join(path, d)):
            path = files.join(path, d)
        found[d] = path
    return found


def _find_splits_dir(root: str) -> str | None:
    """The folder holding `<class>_test_split<k>.txt` files, searched one level deep."""
    for cand in (files.join(root, SPLITS_DIR), root):
        if files.isdir(cand) and any(SPLIT_FILE_RE.match(f) for f in files.listdir(cand)):
            return cand
    return None


def find_layout(manual_dir: str, extract_dir: str) -> Layout:
    """Locates the extracted layout, extracting the original .rar archives first if that is what is there.

    `manual_dir` may be a URL; archives found there are fetched for extraction into `extract_dir` (local).
    """
    names = set(class_names())
    if not files.isdir(manual_dir):
        raise FileNotFoundError(
            f"HMDB51 manual_dir {manual_dir} does not exist{files.missing_detail(manual_dir)}.\n{EXPECTED_LAYOUT}"
        )
    class_dirs = _class_dirs_in(files.join(manual_dir, ORG_DIR), names) or _class_dirs_in(manual_dir, names)
    splits_dir = _find_splits_dir(manual_dir)
    if class_dirs and splits_dir:
        return Layout(class_dirs, splits_dir)
    org_rar, splits_rar = files.join(manual_dir, ORG_RAR), files.join(manual_dir, SPLITS_RAR)
    if files.isfile(org_rar) and files.isfile(splits_rar):
        videos_root = os.path.join(extract_dir, "hmdb51_org")
        splits_root = os.path.join(extract_dir, "test_train_splits")
        archive.extract_rar(org_rar, videos_root, nested=True)
        archive.extract_rar(splits_rar, splits_root)
        class_dirs = _class_dirs_in(videos_root, names) or _class_dirs_in(os.path.join(videos_root, ORG_DIR), names)
        splits_dir = _find_splits_dir(splits_root)
        if class_dirs and splits_dir:
            return Layout(class_dirs, splits_dir)
        raise ValueError(
            f"Extracted {org_rar} and {splits_rar} into {extract_dir} but found "
            f"{len(class_dirs)} class folders and split files: {bool(splits_dir)}.\n{EXPECTED_LAYOUT}"
        )
    found = sorted(files.listdir(manual_dir))[:20]
    raise FileNotFoundError(
        f"HMDB51 manual_dir {manual_dir} matches no known layout: found {found} "
        f"({len(class_dirs)} class folders, split files: {bool(splits_dir)}).\n{EXPECTED_LAYOUT}"
    )


def parse_split_file(path: str, class_name: str) -> list[SplitEntry]:
    """Parses `<video>.<ext> <id>` lines; a malformed line is an error naming file and line."""
    entries = []
    with files.open_text(path, encoding="utf-8", errors="strict") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not is_video_name(parts[0]) or parts[1] not in SPLIT_IDS:
                raise ValueError(
                    f"{path}:{lineno}: expected `<video>.<ext> <id>` (ext one of {', '.join(VIDEO_EXTENSIONS)}) "
                    f"with id 0, 1 or 2, got {line!r}"
                )
            subset = SPLIT_IDS[parts[1]]
            if subset:
                entries.append(SplitEntry(parts[0], class_name, subset, path, lineno))
    return entries


def split_entries(layout: Layout, split_number: int) -> list[SplitEntry]:
    """All train/test entries of one official split, every class checked against the official names."""
    names = set(class_names())
    entries = []
    split_files = sorted(f for f in files.listdir(layout.splits_dir) if SPLIT_FILE_RE.match(f))
    for fname in split_files:
        m = SPLIT_FILE_RE.match(fname)
        if int(m["k"]) != split_number:
            continue
        if m["cls"] not in names:
            raise ValueError(f"{files.join(layout.splits_dir, fname)}: {m['cls']!r} is not an HMDB51 class")
        entries.extend(parse_split_file(files.join(layout.splits_dir, fname), m["cls"]))
    if not entries:
        raise FileNotFoundError(f"No `*_test_split{split_number}.txt` entries in {layout.splits_dir}.\n{EXPECTED_LAYOUT}")
    return entries


def locate_videos(layout: Layout) -> dict[str, str]:
    """Video file name -> class folder it sits in (a name in two folders is an error)."""
    where: dict[str, str] = {}
    for cls, folder in layout.class_dirs.items():
        for fname in files.listdir(folder):
            if is_video_name(fname):
                if fname in where:
                    raise ValueError(f"{fname} appears in two class folders: {where[fname]} and {cls}")
                where[fname] = cls
    return where


def check_classes(entries: list[SplitEntry], located: dict[str, str]) -> None:
    """A video filed under another class than its split file names is an error, not a guess."""
    for e in entries:
        cls = located.get(e.video)
        if cls is not None and cls != e.class_name:
            raise ValueError(
                f"{e.split_file}:{e.line}: {e.video} is listed for class {e.class_name!r} "
                f"but sits in the {cls!r} class folder"
            )


def video_path(layout: Layout, entry: SplitEntry) -> str:
    """Where the entry's video is expected (it may be missing: the example function reports it)."""
    folder = layout.class_dirs.get(entry.class_name) or files.join(files.dirname(next(iter(layout.class_dirs.values()))), entry.class_name)
    return files.join(folder, entry.video)
