"""fire_hrr manual_dir layouts: labels.csv over frame images, or videos beside (time, hrr) CSVs.

manual_dir may be a local folder or a URL (`s3://bucket/fire`, any fsspec URL): listings, existence
checks and CSV reads go through `vidvol.builders.sources.files`; frame paths resolve against it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
from collections.abc import Iterator, Sequence

from vidvol.builders.sources import csv_files
from vidvol.builders.sources import files

logger = logging.getLogger(__name__)

LABELS_FILE = "labels.csv"
LABEL_COLUMNS = ("experiment", "frame", "hrr")
OPTIONAL_LABEL_COLUMNS = ("time", "split")
SERIES_COLUMNS = ("time", "hrr")
VIDEO_EXTENSIONS = (".mp4", ".avi")
SPLITS = ("train", "validation", "test")
DEFAULT_SPLIT = "train"
FORM_FRAMES = "frames"
FORM_VIDEO = "video"

EXPECTED_LAYOUT = """\
Expected in manual_dir one of two layouts:
  1. frames + labels: labels.csv with header `experiment,frame,hrr` (optional columns `time`, `split`),
     one row per frame in time order within an experiment; `frame` is an image path relative to
     manual_dir (or absolute), `hrr` the heat release rate in kW (NaN for a missing value), `time`
     seconds, `split` one of train/validation/test for the whole experiment (default: train).
  2. video + time series: per experiment a video `<experiment>.mp4` or `<experiment>.avi` beside
     `<experiment>.csv` with header `time,hrr` (time in seconds from the video start, increasing);
     every experiment goes to train."""


class LayoutNotFoundError(FileNotFoundError):
    """manual_dir (or labels.csv) is missing, or holds neither known layout."""


class LabelsError(ValueError):
    """A labels or time-series CSV is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class FrameExperiment:
    """One experiment of the frames layout: its frames in time order and per-frame HRR."""

    name: str
    split: str
    frames: tuple[str, ...]  # as written in labels.csv
    paths: tuple[str, ...]  # resolved against manual_dir (URLs under a URL manual_dir)
    hrr: tuple[float, ...]  # kW, NaN = missing
    time: tuple[float, ...] | None  # seconds, NaN = unknown; None without a `time` column
    origin: str  # labels.csv:line of its first row


@dataclasses.dataclass(frozen=True)
class VideoExperiment:
    """One experiment of the video layout: the video and its (time, hrr) series."""

    name: str
    video: str  # path (may not exist: an orphan series, reported by the example function)
    video_name: str  # relative to manual_dir
    series_path: str  # "" when the video has no series beside it
    time: tuple[float, ...]
    hrr: tuple[float, ...]
    split: str = DEFAULT_SPLIT


@dataclasses.dataclass(frozen=True)
class Layout:
    """Which input form manual_dir holds, and its experiments."""

    form: str  # FORM_FRAMES or FORM_VIDEO
    experiments: tuple[FrameExperiment | VideoExperiment, ...]

    def splits(self) -> dict[str, list[FrameExperiment | VideoExperiment]]:
        """Experiments per split, in the order of SPLITS, empty splits left out."""
        by_split = {s: [e for e in self.experiments if e.split == s] for s in SPLITS}
        return {s: es for s, es in by_split.items() if es}


# --------------------------------------------------------------------------------------------
# CSV reading
# --------------------------------------------------------------------------------------------


def _header_text(required: Sequence[str], optional: Sequence[str]) -> str:
    """'`a,b,c` (optional `d`, `e`)' for messages."""
    text = f"`{','.join(required)}`"
    return text + (f" (optional {', '.join(f'`{c}`' for c in optional)})" if optional else "")


def _rows(path: str, required: Sequence[str], optional: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: value}) for each non-blank row; header and row widths are checked."""
    records = csv_files.rows(path, error=LabelsError)
    header = next(records, (0, None))[1]
    expected = _header_text(required, optional)
    if header is None:
        raise LabelsError(f"{path}: the file is empty; expected the header {expected}")
    columns = [c.strip().lower() for c in header]
    missing = [c for c in required if c not in columns]
    if missing:
        raise LabelsError(
            f"{path}:1: missing column(s) {', '.join(missing)}; expected the header {expected}, got `{','.join(header)}`"
        )
    for line, row in records:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            raise LabelsError(f"{path}:{line}: expected {len(columns)} fields like the header, got {len(row)}")
        yield line, {c: v.strip() for c, v in zip(columns, row)}


def _number(value: str, *, path: str, line: int, column: str, allow_nan: bool) -> float:
    """A CSV cell as a float: NaN allowed where `allow_nan`, infinities never."""
    try:
        number = float(value)
    except ValueError:
        hint = " (write NaN for a missing value)" if allow_nan else ""
        raise LabelsError(f"{path}:{line}: column `{column}` must be a number{hint}, got {value!r}") from None
    if math.isinf(number) or (math.isnan(number) and not allow_nan):
        raise LabelsError(f"{path}:{line}: column `{column}` must be a finite number, got {value!r}")
    return number


def _resolve(root: str, frame: str) -> str:
    """A frame path from labels.csv: absolute (or a URL) as is, else relative to manual_dir."""
    return frame if files.isabs(frame) else files.normpath(files.join(root, frame))


def read_labels(path: str, root: str) -> list[FrameExperiment]:
    """Parses labels.csv into experiments (first-appearance order); any malformed row is an error with file:line."""
    path = os.fspath(path)
    rows: dict[str, dict] = {}
    split_of: dict[str, tuple[str, int]] = {}
    has_time = has_split = False
    for line, row in _rows(path, LABEL_COLUMNS, OPTIONAL_LABEL_COLUMNS):
        has_time, has_split = "time" in row, "split" in row
        name = row["experiment"]
        if not name:
            raise LabelsError(f"{path}:{line}: empty experiment name")
        if not row["frame"]:
            raise LabelsError(f"{path}:{line}: empty frame path for experiment {name!r}")
        hrr = _number(row["hrr"], path=path, line=line, column="hrr", allow_nan=True)
        time = _number(row["time"], path=path, line=line, column="time", allow_nan=True) if has_time else math.nan
        split = DEFAULT_SPLIT
        if has_split:
            split = row["split"].lower()
            if split not in SPLITS:
                raise LabelsError(f"{path}:{line}: split must be one of {', '.join(SPLITS)}, got {row['split']!r}")
        if name in split_of and split_of[name][0] != split:
            first_split, first_line = split_of[name]
            raise LabelsError(
                f"{path}:{line}: experiment {name!r} is in split {split!r} here but in {first_split!r} "
                f"at line {first_line}; an experiment belongs to one split"
            )
        entry = rows.setdefault(name, {"frames": [], "hrr": [], "time": [], "line": line, "last": -math.inf})
        split_of.setdefault(name, (split, line))
        if not math.isnan(time):
            if time < entry["last"]:
                raise LabelsError(
                    f"{path}:{line}: time {time:g} s of experiment {name!r} goes back from {entry['last']:g} s; "
                    "rows must be in time order within an experiment"
                )
            entry["last"] = time
        entry["frames"].append(row["frame"])
        entry["hrr"].append(hrr)
        entry["time"].append(time)
    if not rows:
        raise LabelsError(f"{path}: no data rows after the header")
    return [
        FrameExperiment(
            name=name, split=split_of[name][0], frames=tuple(e["frames"]),
            paths=tuple(_resolve(root, f) for f in e["frames"]), hrr=tuple(e["hrr"]),
            time=tuple(e["time"]) if has_time else None, origin=f"{path}:{e['line']}",
        )
        for name, e in rows.items()
    ]


def read_series(path: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Parses an experiment's `time,hrr` CSV: times finite and strictly increasing, hrr numeric or NaN."""
    path = os.fspath(path)
    times: list[float] = []
    values: list[float] = []
    for line, row in _rows(path, SERIES_COLUMNS):
        t = _number(row["time"], path=path, line=line, column="time", allow_nan=False)
        if times and t <= times[-1]:
            raise LabelsError(f"{path}:{line}: time {t:g} s does not increase (previous {times[-1]:g} s)")
        times.append(t)
        values.append(_number(row["hrr"], path=path, line=line, column="hrr", allow_nan=True))
    if not times:
        raise LabelsError(f"{path}: no data rows after the header `{','.join(SERIES_COLUMNS)}`")
    return tuple(times), tuple(values)


# --------------------------------------------------------------------------------------------
# Discovery
# --------------------------------------------------------------------------------------------


def _files_by_stem(root: str) -> tuple[dict[str, str], dict[str, str], collections.Counter]:
    """Videos and CSVs under root by relative stem (posix), plus a count of every file extension seen."""
    videos: dict[str, str] = {}
    csvs: dict[str, str] = {}
    seen: collections.Counter = collections.Counter()
    for folder, dirs, names in files.walk(root):
        dirs.sort()
        for fname in sorted(names):
            stem, ext = os.path.splitext(fname)
            ext = ext.lower()
            seen[ext or "(no extension)"] += 1
            rel = files.relpath(files.join(folder, stem), root).replace(os.sep, "/")
            if ext in VIDEO_EXTENSIONS:
                if rel in videos:
                    raise LabelsError(f"{files.join(folder, fname)}: experiment {rel!r} has two videos ({videos[rel]})")
                videos[rel] = files.join(folder, fname)
            elif ext == ".csv":
                csvs[rel] = files.join(folder, fname)
    return videos, csvs, seen


def find_video_experiments(root: str) -> list[VideoExperiment]:
    """Video + time-series experiments under root; [] when no video has its CSV beside it.

    Orphans (a video without a CSV, a CSV without a video) are returned too, with no series or a
    missing video, so the build reports them as skipped inputs.
    """
    videos, csvs, _ = _files_by_stem(root)
    if not set(videos) & set(csvs):
        return []
    experiments = []
    for stem in sorted(set(videos) | set(csvs)):
        video_path = videos.get(stem, files.join(root, *stem.split("/")) + VIDEO_EXTENSIONS[0])
        series_path = csvs.get(stem, "")
        if not series_path or stem not in videos:
            logger.warning("fire_hrr: %s has no %s beside it; it will be reported as skipped",
                           video_path if stem in videos else series_path, "time series" if stem in videos else "video")
        times, hrr = read_series(series_path) if series_path and stem in videos else ((), ())
        experiments.append(
            VideoExperiment(
                name=stem, video=video_path, video_name=files.relpath(video_path, root).replace(os.sep, "/"),
                series_path=series_path, time=times, hrr=hrr,
            )
        )
    return experiments


def find_layout(manual_dir: str) -> Layout:
    """labels.csv -> frames layout; else video + CSV pairs -> video layout; else an error saying what was found."""
    manual_dir = os.fspath(manual_dir)
    if not files.isdir(manual_dir):
        raise LayoutNotFoundError(
            f"fire_hrr manual_dir {manual_dir} does not exist{files.missing_detail(manual_dir)}.\n{EXPECTED_LAYOUT}"
        )
    labels = files.join(manual_dir, LABELS_FILE)
    if files.isfile(labels):
        return Layout(FORM_FRAMES, tuple(read_labels(labels, manual_dir)))
    experiments = find_video_experiments(manual_dir)
    if experiments:
        return Layout(FORM_VIDEO, tuple(experiments))
    _, _, seen = _files_by_stem(manual_dir)
    found = ", ".join(f"{n} {ext}" for ext, n in sorted(seen.items())) or "nothing"
    raise LayoutNotFoundError(
        f"fire_hrr: {labels} not found (header `{','.join(LABEL_COLUMNS)}` expected) and no "
        f"<experiment>.mp4|.avi beside <experiment>.csv in {manual_dir}; found {found}.\n{EXPECTED_LAYOUT}"
    )
