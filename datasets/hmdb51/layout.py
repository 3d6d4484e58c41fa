"""HMDB51 manual_dir layouts: find the videos and official split files, or extract the .rar archives.

manual_dir may be a local folder or a URL (`s3://bucket/hmdb51`, any fsspec URL): every listing,
existence check and split-file read goes through `vidvol.builders.sources.files`.
"""

from __future__ import annotations

import dataclasses
import os
import re

from vidvol.builders.sources import files
from vidvol.builders.sources import labels

CLASS_NAMES_FILE = os.path.join(os.path.dirname(__file__), "class_names.txt")
ORG_DIR = "hmdb51_org"
SPLITS_DIR = "testTrainMulti_7030_splits"
ORG_RAR = "hmdb51_org.rar"
SPLITS_RAR = "test_train_splits.rar"
SPLIT_FILE_RE = re.compile(r"^(?P<cls>.+)_test_split(?P<k>[123])\.txt$")

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
class Layout:
    """Where the class folders and the split files are."""

    class_dirs: dict[str, str]  # class name -> folder (path or URL) holding its .avi files
    splits_dir: str


def _class_dirs_in(folder: str, names: set[str]) -> dict[str, str]:
    """Official-class subfolders of folder (a per-class archive's `<class>/<class>/` nesting resolved)."""
    return labels.class_folders_in(folder, names)


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
        from vidvol.builders.sources import archive  # here, not at import: registering hmdb51 needs no RAR backend

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


def split_entries(layout: Layout, split_number: int) -> list[labels.SplitEntry]:
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
        entries.extend(labels.parse_hmdb_split_file(files.join(layout.splits_dir, fname), m["cls"]))
    if not entries:
        raise FileNotFoundError(f"No `*_test_split{split_number}.txt` entries in {layout.splits_dir}.\n{EXPECTED_LAYOUT}")
    return entries


def locate_videos(layout: Layout) -> dict[str, str]:
    """Video file name -> class folder it sits in (a name in two folders is an error)."""
    return labels.locate_videos(layout.class_dirs)


def video_path(layout: Layout, entry: labels.SplitEntry) -> str:
    """Where the entry's video is expected (it may be missing: the example function reports it)."""
    folder = layout.class_dirs.get(entry.class_name) or files.join(files.dirname(next(iter(layout.class_dirs.values()))), entry.class_name)
    return files.join(folder, entry.video)
