"""Small but real sample inputs for the demo, the builder tests and the benchmark, made offline.

Every generator writes files with the real encoders the builders read back (OpenCV's FFmpeg for
AVI/MP4 and JPEG, nibabel for NIfTI) and is deterministic given `seed`. Frames carry textured,
moving content so that codecs and motion sampling behave as on real footage, plus an index strip
and a colour key that survive lossy coding and resizing, or look like camera footage
(`content="footage"`); `make_frame` describes both.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import cv2
import nibabel as nib
import numpy as np

logger = logging.getLogger(__name__)

# The 51 official HMDB51 action classes, sorted. Defined once here; vidvol/datasets/hmdb51 may own
# this constant later (it currently reads the same names from its class_names.txt).
HMDB51_CLASSES: tuple[str, ...] = (
    "brush_hair", "cartwheel", "catch", "chew", "clap", "climb", "climb_stairs", "dive",
    "draw_sword", "dribble", "drink", "eat", "fall_floor", "fencing", "flic_flac", "golf",
    "handstand", "hit", "hug", "jump", "kick", "kick_ball", "kiss", "laugh", "pick", "pour",
    "pullup", "punch", "push", "pushup", "ride_bike", "ride_horse", "run", "shake_hands",
    "shoot_ball", "shoot_bow", "shoot_gun", "sit", "situp", "smile", "smoke", "somersault",
    "stand", "swing_baseball", "sword", "sword_exercise", "talk", "throw", "turn", "walk", "wave",
)

INDEX_BITS = 10
CONTENTS = ("textured", "flat", "footage")
HMDB51_SPLITS_DIR = "testTrainMulti_7030_splits"
HMDB51_ORG_DIR = "hmdb51_org"
# Codecs that store any frame size; the MPEG-4 family needs even heights and widths.
_ANY_SIZE_FOURCCS = ("MJPG", "FFV1")
_SPLIT_ID_CYCLE = (1, 2, 0)  # HMDB51 split ids: 1 train, 2 test, 0 unused
_HRR_SAMPLE_PERIOD_S = 0.25


class SampleWriteError(ValueError):
    """A sample file could not be written; the message names the path."""


# --------------------------------------------------------------------------------------------
# Frames


def _strip_rows(height: int) -> int:
    """Height in pixels of the index strip and of the colour key (one eighth, at least 2)."""
    return max(2, height // 8)


def _textured_background(index: int, height: int, width: int, seed: int) -> np.ndarray:
    """Float RGB gradient that drifts with `index`, plus two moving shapes."""
    phase = np.random.default_rng(seed).uniform(0.0, 1.0, size=3)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    xn, yn = x / width, y / height
    t = float(index)
    frame = np.empty((height, width, 3), np.float32)
    frame[..., 0] = 128 + 60 * np.sin(2 * np.pi * (1.5 * xn + t / 40 + phase[0]))
    frame[..., 1] = 128 + 60 * np.sin(2 * np.pi * (yn + 0.5 * xn - t / 55 + phase[1]))
    frame[..., 2] = 128 + 50 * np.sin(2 * np.pi * (xn + yn + t / 30 + phase[2]))
    # A disc moving left to right (its x position encodes the index) and a bar bouncing vertically.
    radius = max(2, min(height, width) // 8)
    cx = int(radius + ((index * 0.037 + phase[0]) % 1.0) * max(1, width - 2 * radius))
    cy = height // 2
    cv2.circle(frame, (cx, cy), radius, (230.0, 70.0, 40.0), thickness=-1, lineType=cv2.LINE_AA)
    bar_h = max(2, height // 10)
    travel = max(1, height - 2 * _strip_rows(height) - bar_h)
    bounce = abs(((index * 3 + int(phase[1] * travel)) % (2 * travel)) - travel)
    top = _strip_rows(height) + bounce
    cv2.rectangle(frame, (width // 8, top), (width // 8 + max(2, width // 6), top + bar_h),
                  (30.0, 200.0, 90.0), thickness=-1)
    return frame


class _FootageScene:
    """A textured set, a moving figure and sensor noise of one sample video; `frame(i)` renders frame i cheaply."""

    # Detail per octave (equal contrast at every scale, as in natural images), edges, noise: chosen so
    # that 64x64 quality-90 JPEG frames of these videos match real footage in size and decode time.
    OCTAVE_CELLS = (2, 4, 8, 16, 32, 64, 128)  # texture lattice spacing in pixels of a 320-wide frame
    OCTAVE_CONTRAST = 16.0
    EDGES = 40  # hard-edged shapes (furniture, doors, posters) drawn into the set
    NOISE_SIGMA = 5.0  # sensor noise, grey levels
    NOISE_CHROMA = 1.0  # share of the noise that differs between colour channels
    GRAIN_PX = 0.0  # sensor noise correlation (Gaussian sigma, pixels of a 320-wide frame)

    def __init__(self, height: int, width: int, seed: int):
        rng = np.random.default_rng([seed, 0xF00])
        self.height, self.width = height, width
        scale = width / 320.0
        self.margin = (max(4, int(0.18 * height)), max(4, int(0.18 * width)))
        big_h, big_w = height + 2 * self.margin[0], width + 2 * self.margin[1]
        self.set = self._texture(rng, big_h, big_w, scale, base=rng.uniform(60, 190, 3))
        for _ in range(self.EDGES):
            colour = rng.uniform(0, 255, 3)
            alpha = rng.uniform(0.3, 0.8)
            x0, y0 = int(rng.integers(0, big_w)), int(rng.integers(0, big_h))
            w, h = int(rng.integers(4, max(5, big_w // 5))), int(rng.integers(4, max(5, big_h // 4)))
            patch = self.set[y0:y0 + h, x0:x0 + w]
            patch[:] = (1 - alpha) * patch + alpha * colour
            if rng.uniform() < 0.5:  # a line (a frame edge, a cable)
                pt = (int(rng.integers(0, big_w)), int(rng.integers(0, big_h)))
                cv2.line(self.set, (x0, y0), pt, tuple(float(c) for c in rng.uniform(0, 255, 3)),
                         max(1, int(rng.integers(1, 4) * scale)), lineType=cv2.LINE_AA)
        self.set_u8 = np.clip(self.set, 0, 255).astype(np.uint8)
        self.cloth = np.clip(self._texture(rng, height, width, scale, base=rng.uniform(40, 220, 3)), 0, 255).astype(np.uint8)
        self.path = rng.uniform(0, 2 * np.pi, 8)  # phases of the camera and figure motions
        self.speed = rng.uniform(0.6, 1.4, 4)
        sensor = rng.normal(0.0, 1.0, (height + 32, width + 32, 3)).astype(np.float32)
        sensor = self.NOISE_CHROMA * sensor + (1 - self.NOISE_CHROMA) * sensor[..., :1]  # mostly luminance
        if self.GRAIN_PX > 0:  # grain a few pixels wide: it survives downscaling, as a camera's does
            sensor = cv2.GaussianBlur(sensor, (0, 0), self.GRAIN_PX * scale)
        sensor *= self.NOISE_SIGMA / max(float(sensor.std()), 1e-6)
        self.noise_up = np.clip(np.rint(sensor), 0, 255).astype(np.uint8)  # split by sign: cv2.add/subtract saturate
        self.noise_down = np.clip(np.rint(-sensor), 0, 255).astype(np.uint8)

    def _texture(self, rng: np.random.Generator, height: int, width: int, scale: float, base: np.ndarray) -> np.ndarray:
        """Float RGB texture: coloured value noise with equal contrast per octave, around `base`."""
        out = np.empty((height, width, 3), np.float32)
        out[:] = base
        for cell in self.OCTAVE_CELLS:
            cell_px = max(1.0, cell * scale)
            gh, gw = int(height / cell_px) + 2, int(width / cell_px) + 2
            grid = rng.normal(0.0, self.OCTAVE_CONTRAST, (gh, gw, 3)).astype(np.float32)
            grid += rng.normal(0.0, self.OCTAVE_CONTRAST, (gh, gw, 1)).astype(np.float32)  # mostly luminance
            up = cv2.resize(grid, (int(gw * cell_px), int(gh * cell_px)), interpolation=cv2.INTER_CUBIC)
            out += up[:height, :width]
        return out

    def frame(self, index: int) -> np.ndarray:
        """RGB uint8 frame `index`: the set through the moving camera, the figure, light flicker, noise."""
        h, w = self.height, self.width
        t, p, v = float(index), self.path, self.speed
        my, mx = self.margin
        # Hand-held camera: a slow pan plus shake, a slow zoom.
        dx = 0.8 * mx * np.sin(t / (45 * v[0]) + p[0]) + 1.5 * np.sin(t * 0.9 + p[1])
        dy = 0.6 * my * np.sin(t / (60 * v[1]) + p[2]) + 1.2 * np.sin(t * 1.3 + p[3])
        zoom = 1.0 + 0.06 * np.sin(t / (80 * v[2]) + p[4])
        matrix = np.float32([[zoom, 0, mx + dx - (zoom - 1) * w / 2], [0, zoom, my + dy - (zoom - 1) * h / 2]])
        img = cv2.warpAffine(self.set_u8, matrix, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                             borderMode=cv2.BORDER_REFLECT)
        # A figure: body and swinging limbs, textured, walking across and back.
        cx = int(w * (0.5 + 0.35 * np.sin(t / (50 * v[3]) + p[5])) - dx)
        cy = int(h * 0.55 - dy)
        mask = np.zeros((h, w), np.uint8)
        bw, bh = max(3, w // 14), max(5, h // 5)
        cv2.ellipse(mask, (cx, cy), (bw, bh), 0, 0, 360, 255, -1)
        cv2.circle(mask, (cx, cy - bh - bw // 2), max(2, int(bw * 0.8)), 255, -1)
        for side, phase in ((-1, 0.0), (1, np.pi)):
            swing = 0.6 * np.sin(t / 5.0 + phase + p[6])
            for y0, length in ((cy - bh // 2, bh), (cy + bh - 2, int(1.2 * bh))):
                end = (int(cx + side * bw + length * np.sin(swing)), int(y0 + length * np.cos(swing)))
                cv2.line(mask, (cx + side * bw // 2, y0), end, 255, max(2, bw // 2), lineType=cv2.LINE_AA)
        ys, xs = np.nonzero(mask[::4, ::4])  # blend the figure's bounding box only
        if len(ys):
            y0, y1 = max(0, 4 * int(ys.min()) - 4), min(h, 4 * int(ys.max()) + 8)
            x0, x1 = max(0, 4 * int(xs.min()) - 4), min(w, 4 * int(xs.max()) + 8)
            shift = (index * 3) % max(1, w // 2)  # the figure's clothes move with it
            cloth = self.cloth[y0:y1, (np.arange(x0, x1) - shift) % w]
            alpha = (mask[y0:y1, x0:x1].astype(np.float32) / 255.0)[..., None]
            img[y0:y1, x0:x1] = (img[y0:y1, x0:x1] * (1 - alpha) + cloth * alpha).astype(np.uint8)
        img = cv2.convertScaleAbs(img, alpha=1.0 + 0.04 * np.sin(t / 7.0 + p[7]))  # light flicker
        oy, ox = (index * 13) % 32, (index * 7) % 32
        img = cv2.add(img, self.noise_up[oy: oy + h, ox: ox + w])
        return cv2.subtract(img, self.noise_down[oy: oy + h, ox: ox + w])


@functools.lru_cache(maxsize=2)
def _footage_scene(height: int, width: int, seed: int) -> _FootageScene:
    return _FootageScene(height, width, seed)


def make_frame(index: int, *, height: int = 240, width: int = 320, seed: int = 0,
               content: str = "textured") -> np.ndarray:
    """The RGB uint8 frame `index` of a sample video: content, index strip and colour key.

    The default content is a drifting colour gradient, moving shapes and mild noise, plus two
    strips: an index strip along the top eighth (`INDEX_BITS` equal cells across the full width,
    white for 1 and black for 0, most significant bit first, encoding the frame index modulo
    2**INDEX_BITS; `decode_frame_index` reads it back, also after a resize to any size) and a colour
    key along the bottom eighth (pure red, green and blue thirds, left to right in RGB, so a BGR/RGB
    mix-up is visible: `colour_key_ok`).

    `content="footage"` frames look like camera footage instead and carry no strips: a textured set
    with detail at every scale and hard edges, seen by a hand-held camera (pan, shake, slow zoom), a
    textured figure moving across it, flickering light and sensor noise. Stored as small JPEG frames
    (64x64, quality 90) they are about as large and as slow to decode as frames of real videos (the
    benchmark's hmdb51 inputs; `benchmarks/RESULTS.md` lists the stored KiB per frame and the decode
    rate).
    """
    if content not in CONTENTS:
        raise ValueError(f"content must be one of {CONTENTS}, got {content!r}")
    if content == "footage":
        if height < 16 or width < 16:
            raise ValueError(f"frame size {height}x{width} too small for footage: need at least 16x16")
        return _footage_scene(height, width, seed).frame(index)
    if height < 16 or width < 2 * INDEX_BITS:
        raise ValueError(f"frame size {height}x{width} too small: need height >= 16 and "
                         f"width >= {2 * INDEX_BITS} for the index strip")
    if content == "textured":
        frame = _textured_background(index, height, width, seed)
        noise = np.random.default_rng([seed, index]).normal(0.0, 3.0, size=frame.shape)
        frame = frame + noise.astype(np.float32)
    else:
        frame = np.full((height, width, 3), 128.0, np.float32)
    frame = np.clip(np.rint(frame), 0, 255).astype(np.uint8)

    rows = _strip_rows(height)
    code = index % (1 << INDEX_BITS)
    edges = np.linspace(0, width, INDEX_BITS + 1).round().astype(int)
    for bit in range(INDEX_BITS):
        on = (code >> (INDEX_BITS - 1 - bit)) & 1
        frame[:rows, edges[bit]:edges[bit + 1]] = 255 if on else 0
    thirds = np.linspace(0, width, 4).round().astype(int)
    for channel in range(3):
        colour = np.zeros(3, np.uint8)
        colour[channel] = 255
        frame[height - rows:, thirds[channel]:thirds[channel + 1]] = colour
    return frame


def decode_frame_index(frame: np.ndarray) -> int:
    """Frame index (mod 2**INDEX_BITS) read from the index strip of a (possibly resized) frame."""
    frame = np.asarray(frame)
    if frame.ndim == 3:
        frame = frame.mean(axis=-1)
    height, width = frame.shape[:2]
    top = max(1, height // 8)
    rows = frame[top // 4: max(top // 4 + 1, (3 * top) // 4 + 1)]
    code = 0
    for bit in range(INDEX_BITS):
        lo, hi = bit * width / INDEX_BITS, (bit + 1) * width / INDEX_BITS
        a, b = int(math.floor(lo + (hi - lo) / 4)), int(math.ceil(hi - (hi - lo) / 4))
        cell = rows[:, a:max(b, a + 1)]
        code = (code << 1) | int(cell.mean() > 127.5)
    return code


def colour_key_ok(frame_rgb: np.ndarray, *, tolerance: int = 60) -> bool:
    """Whether the bottom colour key reads red, green, blue left to right (i.e. RGB order)."""
    frame_rgb = np.asarray(frame_rgb, np.float32)
    height, width = frame_rgb.shape[:2]
    rows = frame_rgb[height - max(1, height // 16):]
    for channel in range(3):
        lo, hi = channel * width / 3, (channel + 1) * width / 3
        cell = rows[:, int(lo + (hi - lo) / 4): int(math.ceil(hi - (hi - lo) / 4))]
        expected = np.zeros(3, np.float32)
        expected[channel] = 255
        if np.abs(cell.reshape(-1, 3).mean(axis=0) - expected).max() > tolerance:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Videos


def write_video(path: str, num_frames: int, *, height: int = 240, width: int = 320,
                fps: float = 30.0, fourcc: str = "XVID", seed: int = 0,
                content: str = "textured") -> str:
    """Write frames `make_frame(0..num_frames-1)` with cv2.VideoWriter; returns `path`."""
    path = os.fspath(path)
    if num_frames < 1:
        raise ValueError(f"{path}: num_frames must be >= 1, got {num_frames}")
    if fourcc not in _ANY_SIZE_FOURCCS and (height % 2 or width % 2):
        raise ValueError(f"{path}: fourcc {fourcc} needs an even frame size, got {height}x{width}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), float(fps), (width, height))
    if not writer.isOpened():
        raise SampleWriteError(
            f"{path}: cv2.VideoWriter cannot open it with fourcc {fourcc!r} "
            "(expected e.g. XVID or MJPG for .avi, mp4v for .mp4)")
    try:
        for i in range(num_frames):
            rgb = make_frame(i, height=height, width=width, seed=seed, content=content)
            writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise SampleWriteError(f"{path}: cv2.VideoWriter wrote no data (fourcc {fourcc!r})")
    return path


def _frame_counts(num_frames: int | Sequence[int], count: int, rng: np.random.Generator) -> list[int]:
    """`count` frame counts: all equal to an int, or drawn uniformly from an inclusive (lo, hi)."""
    if isinstance(num_frames, int):
        return [num_frames] * count
    lo, hi = num_frames
    if not 1 <= lo <= hi:
        raise ValueError(f"num_frames range must satisfy 1 <= lo <= hi, got {num_frames}")
    return [int(n) for n in rng.integers(lo, hi + 1, size=count)]


def hmdb51_video_name(class_name: str, clip: int) -> str:
    """HMDB-like file name of sample clip `clip` of `class_name`."""
    return f"{class_name}_clip{clip}_f_cm_np1_le_med_{clip}.avi"


def write_hmdb51_layout(root: str, *, classes: Sequence[str] | None = None, videos_per_class: int = 3,
                        num_frames: int | Sequence[int] = (30, 60), height: int = 240,
                        width: int = 320, splits: Iterable[int] = (1, 2, 3), seed: int = 0,
                        nested_org: bool = True, content: str = "textured") -> dict[int, dict[str, list[str]]]:
    """Write an extracted HMDB51 layout (videos + official-style split files); returns the splits.

    Videos go to `root/hmdb51_org/<class>/` (`root/<class>/` if not `nested_org`), split files to
    `root/testTrainMulti_7030_splits/<class>_test_split<k>.txt` with lines `<video>.avi <id> `
    (trailing space as in the official files). Ids cycle 1, 2, 0 (train, test, unused), shifted by
    split and class, so every split has train, test and unused videos. Returns
    `{k: {"train": [...], "test": [...]}}` with sorted video file names. `content`: as in `make_frame`
    ("footage" for videos whose frames look like real footage, without the index strip).
    """
    root = os.fspath(root)
    classes = list(HMDB51_CLASSES[:3] if classes is None else classes)
    splits = list(splits)
    rng = np.random.default_rng(seed)
    videos_root = os.path.join(root, HMDB51_ORG_DIR) if nested_org else root
    splits_dir = os.path.join(root, HMDB51_SPLITS_DIR)
    os.makedirs(splits_dir, exist_ok=True)
    expected: dict[int, dict[str, list[str]]] = {k: {"train": [], "test": []} for k in splits}
    counts = _frame_counts(num_frames, len(classes) * videos_per_class, rng)
    for c, class_name in enumerate(classes):
        names = [hmdb51_video_name(class_name, j) for j in range(videos_per_class)]
        for j, name in enumerate(names):
            write_video(os.path.join(videos_root, class_name, name), counts[c * videos_per_class + j],
                        height=height, width=width, fps=30.0, seed=seed * 1000 + c * 100 + j, content=content)
        for k in splits:
            lines = []
            for j, name in enumerate(names):
                split_id = _SPLIT_ID_CYCLE[(j + k + c) % len(_SPLIT_ID_CYCLE)]
                lines.append(f"{name} {split_id} \n")
                if split_id:
                    expected[k]["train" if split_id == 1 else "test"].append(name)
            with open(os.path.join(splits_dir, f"{class_name}_test_split{k}.txt"), "w",
                      encoding="utf-8") as f:
                f.writelines(lines)
    for subsets in expected.values():
        for names in subsets.values():
            names.sort()
    logger.info("Wrote HMDB51 sample layout with %d classes under %s", len(classes), root)
    return expected


# --------------------------------------------------------------------------------------------
# Fire heat-release-rate (HRR) series


def hrr_curve(time_s: np.ndarray, *, peak_kw: float, peak_time_s: float) -> np.ndarray:
    """Smooth fire HRR in kW: t-squared growth, peak `peak_kw` at `peak_time_s`, then decay (+5 kW)."""
    ratio2 = (np.clip(np.asarray(time_s, np.float64), 0, None) / peak_time_s) ** 2
    return peak_kw * ratio2 * np.exp(1.0 - ratio2) + 5.0


def _experiment_curve(seed: int, duration_s: float) -> dict[str, float]:
    """Per-experiment HRR curve parameters drawn from `seed`."""
    rng = np.random.default_rng(seed)
    return {"peak_kw": float(rng.uniform(200.0, 800.0)),
            "peak_time_s": float(max(duration_s, 1e-3) * rng.uniform(0.4, 0.6))}


def _write_csv(path: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Write a CSV with `header` and `rows`."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def write_fire_hrr_frames(root: str, *, experiments: Sequence[tuple[str, int]] = (("exp_a", 12), ("exp_b", 7)),
                          height: int = 54, width: int = 96, seed: int = 0, with_split: bool = False,
                          quality: int = 95, fps: float = 1.0) -> dict[str, dict[str, list[Any]]]:
    """Write fire_hrr's frames layout: JPEG frames and labels.csv; returns the series per experiment.

    `root/frames/<experiment>/frame_%04d.jpg` (frame i shows `make_frame(i)`, so its index is
    readable) and `root/labels.csv` with header `experiment,frame,hrr,time` (+ `split`: the last
    experiment is "test", the others "train"), one row per frame in time order, `time = i / fps`.
    """
    root = os.fspath(root)
    header = ["experiment", "frame", "hrr", "time"] + (["split"] if with_split else [])
    rows: list[list[Any]] = []
    expected: dict[str, dict[str, list[Any]]] = {}
    for e, (experiment, num_frames) in enumerate(experiments):
        times = [round(i / fps, 6) for i in range(num_frames)]
        curve = _experiment_curve(seed * 1000 + e, num_frames / fps)
        hrr = [round(float(v), 3) for v in hrr_curve(np.array(times), **curve)]
        split = "test" if e == len(experiments) - 1 and len(experiments) > 1 else "train"
        frames = []
        for i in range(num_frames):
            rel = f"frames/{experiment}/frame_{i:04d}.jpg"
            path = os.path.join(root, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            rgb = make_frame(i, height=height, width=width, seed=seed * 1000 + e)
            if not cv2.imwrite(path, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, int(quality)]):
                raise SampleWriteError(f"{path}: cv2.imwrite failed to write a JPEG")
            frames.append(rel)
            rows.append([experiment, rel, hrr[i], times[i]] + ([split] if with_split else []))
        expected[experiment] = {"frames": frames, "hrr": hrr, "time": times}
        if with_split:
            expected[experiment]["split"] = [split] * num_frames
    _write_csv(os.path.join(root, "labels.csv"), header, rows)
    return expected


def write_fire_hrr_videos(root: str, *, experiments: Sequence[tuple[str, int]] = (("test_1", 20),),
                          height: int = 54, width: int = 96, fps: float = 10.0, seed: int = 0,
                          series_offset_s: float = 0.0) -> dict[str, dict[str, Any]]:
    """Write fire_hrr's video layout: `<experiment>.avi` (XVID) + `<experiment>.csv` (time,hrr).

    The series is sampled every 0.25 s over `[series_offset_s, series_offset_s + duration]`,
    times in seconds from the video start, duration = num_frames / fps. Returns per experiment
    `{"video", "csv", "num_frames", "fps", "frame_time", "time", "hrr"}` (paths relative to root).
    """
    root = os.fspath(root)
    expected: dict[str, dict[str, Any]] = {}
    for e, (experiment, num_frames) in enumerate(experiments):
        duration = num_frames / fps
        video_rel, csv_rel = f"{experiment}.avi", f"{experiment}.csv"
        write_video(os.path.join(root, video_rel), num_frames, height=height, width=width, fps=fps,
                    fourcc="XVID", seed=seed * 1000 + e)
        steps = int(math.floor(duration / _HRR_SAMPLE_PERIOD_S + 1e-9))
        times = [round(series_offset_s + s * _HRR_SAMPLE_PERIOD_S, 6) for s in range(steps + 1)]
        if times[-1] < series_offset_s + duration - 1e-9:
            times.append(round(series_offset_s + duration, 6))
        curve = _experiment_curve(seed * 1000 + e, duration)
        hrr = [round(float(v), 3) for v in hrr_curve(np.array(times), **curve)]
        _write_csv(os.path.join(root, csv_rel), ["time", "hrr"], zip(times, hrr))
        expected[experiment] = {
            "video": video_rel, "csv": csv_rel, "num_frames": num_frames, "fps": fps,
            "frame_time": [i / fps for i in range(num_frames)], "time": times, "hrr": hrr,
        }
    return expected


# --------------------------------------------------------------------------------------------
# MRI volumes


def _head_volume(shape: Sequence[int], seed: int) -> np.ndarray:
    """Float32 anatomy-like volume in RAS voxel order: ellipsoid head, smooth blobs, mild noise.

    A bright marker blob always sits on the subject's right (high first index), so a correct
    reorientation to RAS can be checked by where it lands.
    """
    rng = np.random.default_rng(seed)
    nx, ny, nz = shape
    x, y, z = np.meshgrid(*(np.linspace(-1.0, 1.0, n, dtype=np.float32) for n in shape), indexing="ij")
    radii = rng.uniform(0.75, 0.9, size=3)
    r2 = (x / radii[0]) ** 2 + (y / radii[1]) ** 2 + (z / radii[2]) ** 2
    head = 1.0 / (1.0 + np.exp((r2 - 1.0) * 12.0))  # soft-edged ellipsoid
    volume = 400.0 * head
    for _ in range(4):
        centre = rng.uniform(-0.45, 0.45, size=3)
        width = rng.uniform(0.15, 0.3)
        d2 = (x - centre[0]) ** 2 + (y - centre[1]) ** 2 + (z - centre[2]) ** 2
        volume += rng.uniform(150.0, 350.0) * np.exp(-d2 / (2 * width ** 2)) * head
    d2 = (x - 0.55 * radii[0]) ** 2 + y ** 2 + z ** 2
    volume += 600.0 * np.exp(-d2 / (2 * 0.12 ** 2)) * head  # right-side marker
    volume += rng.normal(0.0, 8.0, size=shape) * (0.2 + head)
    return np.clip(volume, 0.0, None).astype(np.float32)  # magnitude images are non-negative


def _affine(shape: Sequence[int], spacing: Sequence[float], orientation: str) -> np.ndarray:
    """Centred voxel-to-world affine for RAS or LAS (first axis runs right to left) storage."""
    affine = np.diag([*map(float, spacing), 1.0])
    affine[:3, 3] = -0.5 * (np.asarray(shape) - 1) * np.asarray(spacing, np.float64)
    if orientation == "LAS":
        affine[0, 0] = -affine[0, 0]
        affine[0, 3] = -affine[0, 3]
    return affine


def write_mri_volumes(root: str, *, num_subjects: int = 4, scans_per_subject: int = 1,
                      shape: Sequence[int] = (40, 48, 36), spacing: Sequence[float] = (1.0, 1.2, 1.5),
                      seed: int = 0, label_column: str = "label", labels: Sequence[str] = ("0", "1"),
                      with_split: bool = False, gz: bool = True) -> dict[str, Any]:
    """Write NIfTI volumes (int16 + scl_slope/scl_inter, RAS and LAS) and labels.csv.

    Files `root/volumes/sub-XXX_scan-K.nii[.gz]`; scans alternate RAS and LAS storage of the
    same anatomy (LAS flips the first voxel axis and the affine). labels.csv has header
    `path,<label_column>,subject` (+ `split`: the last quarter of subjects, at least one when
    there are two or more, is "test"). Returns `{"header", "rows", "volumes"}`: the CSV rows as
    written and, per path, shape, spacing, orientation, affine and label.
    """
    root = os.fspath(root)
    if len(shape) != 3 or len(spacing) != 3:
        raise ValueError(f"shape and spacing must have 3 entries, got {shape} and {spacing}")
    header = ["path", label_column, "subject"] + (["split"] if with_split else [])
    num_test = max(1, round(num_subjects / 4)) if num_subjects > 1 else 0
    rows: list[dict[str, str]] = []
    volumes: dict[str, dict[str, Any]] = {}
    scan_number = 0
    for s in range(num_subjects):
        subject = f"sub-{s + 1:03d}"
        label = str(labels[s % len(labels)])
        split = "test" if s >= num_subjects - num_test else "train"
        for k in range(scans_per_subject):
            orientation = "RAS" if scan_number % 2 == 0 else "LAS"
            scan_number += 1
            data = _head_volume(shape, seed * 100_000 + s * 100 + k)
            if orientation == "LAS":
                data = data[::-1]
            affine = _affine(shape, spacing, orientation)
            image = nib.Nifti1Image(np.ascontiguousarray(data), affine)
            image.set_data_dtype(np.int16)  # nibabel picks scl_slope/scl_inter to fit int16
            image.header.set_xyzt_units("mm", "sec")
            rel = f"volumes/{subject}_scan-{k}.nii" + (".gz" if gz else "")
            path = os.path.join(root, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            nib.save(image, path)
            row = {"path": rel, label_column: label, "subject": subject}
            if with_split:
                row["split"] = split
            rows.append(row)
            volumes[rel] = {"shape": tuple(int(n) for n in shape), "spacing": tuple(map(float, spacing)),
                            "orientation": orientation, "affine": affine.tolist(), "label": label}
    with open(os.path.join(root, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return {"header": header, "rows": rows, "volumes": volumes}
