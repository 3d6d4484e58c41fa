"""Ordered frames with a per-frame float target -> fixed-length, masked windows (one frame at a time).

Two kinds of source, one recipe: `FrameSeriesSource` (image files in time order, each with its
target and optionally a time) and `VideoSeriesSource` (one video plus a `(time, value)` series;
each decoded frame's target is the series linearly interpolated at the frame's timestamp). How a
sequence becomes windows, and what a masked slot holds, is in `series_example`.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import functools
import logging
import math
from typing import Any
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from vidvol.builders import example_io
from vidvol.builders.sources import files
from vidvol.builders.transforms import frame_ops
from vidvol.builders.transforms import video

logger = logging.getLogger(__name__)

__all__ = [
    "FrameSeriesSource",
    "VideoSeriesSource",
    "WindowSpec",
    "check_series",
    "frame_series_example",
    "interpolate_series",
    "series_example",
    "video_series_example",
    "window_bounds",
    "window_key",
    "zero_frame_bytes",
]


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """Window length, frame geometry and storage of the examples, and the target's feature name."""

    max_len: int
    height: int
    width: int
    image_format: str = "jpeg"  # "jpeg" or "png" (lossless)
    quality: int = 90  # JPEG quality
    resize_mode: str = "resize"  # "resize" (direct) or "crop" (aspect-preserving resize + center crop)
    target_name: str = "target"  # feature name of the per-frame target, e.g. "hrr"
    timeout_s: float = 600.0  # wall-clock limit of one video decoding pass

    def __post_init__(self):
        if self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")
        if self.height < 1 or self.width < 1:
            raise ValueError(f"height and width must be >= 1, got {self.height}x{self.width}")
        if self.image_format not in ("jpeg", "png"):
            raise ValueError(f"image_format must be 'jpeg' or 'png', got {self.image_format!r}")
        if not 0 <= self.quality <= 100:
            raise ValueError(f"quality must be in [0, 100], got {self.quality}")
        if self.resize_mode not in frame_ops.RESIZE_MODES:
            raise ValueError(f"resize_mode must be one of {frame_ops.RESIZE_MODES}, got {self.resize_mode!r}")


@dataclasses.dataclass(frozen=True)
class FrameSeriesSource:
    """One sequence as image files in time order, each with a target (NaN = unknown, masked)."""

    key: str  # example key prefix (no absolute path), e.g. the experiment name
    frames: tuple[str, ...]  # image paths or URLs to read (a URL is read frame by frame into memory)
    targets: tuple[float, ...]
    times: tuple[float, ...] | None = None  # seconds (NaN = unknown); None = not given
    names: tuple[str, ...] | None = None  # how each frame is named in the listing (for skips); None = frames
    features: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # constant per-example features


@dataclasses.dataclass(frozen=True)
class VideoSeriesSource:
    """One video whose frames take their targets from a (time, value) series in seconds from video start."""

    key: str
    video: str  # path or URL to decode (a URL is fetched once into a temporary local file)
    series_times: tuple[float, ...]  # finite, strictly increasing
    series_values: tuple[float, ...]  # NaN values mask the frames they would be interpolated into
    name: str = ""  # how the video is named (for skips); "" = video
    series_origin: str = ""  # the file the series came from, for messages
    features: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Slot:
    """One source frame on its way into a window: the image (or why there is none), target and time."""

    name: str
    target: float
    time: float
    image: np.ndarray | None = None
    problem: str = ""  # non-empty: the slot is masked for this reason


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def window_bounds(num_frames: int, max_len: int) -> list[tuple[int, int]]:
    """Consecutive `[start, stop)` windows of at most `max_len` frames that cover `0..num_frames`."""
    if num_frames < 0 or max_len < 1:
        raise ValueError(f"need num_frames >= 0 and max_len >= 1, got {num_frames} and {max_len}")
    return [(start, min(start + max_len, num_frames)) for start in range(0, num_frames, max_len)]


def window_key(key: str, window: int) -> str:
    """Example key of window `window` of the sequence `key` (e.g. `exp_a/w000`)."""
    return f"{key}/w{window:03d}"


def check_series(times: Sequence[float], values: Sequence[float], *, origin: str = "series") -> None:
    """Raise ValueError unless times are finite and strictly increasing, one value per time."""
    t = np.asarray(times, np.float64)
    if t.ndim != 1 or len(t) != len(values):
        raise ValueError(f"{origin}: expected one value per time, got {len(t)} times and {len(values)} values")
    if len(t) == 0:
        raise ValueError(f"{origin}: the time series is empty")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{origin}: time {t[~np.isfinite(t)][0]} at point {int(np.argmin(np.isfinite(t)))} is not finite")
    steps = np.diff(t)
    if np.any(steps <= 0):
        i = int(np.argmax(steps <= 0))
        raise ValueError(f"{origin}: times must increase strictly, but point {i + 1} ({t[i + 1]:g} s) follows {t[i]:g} s")


def interpolate_series(
    times: np.ndarray, series_times: Sequence[float], series_values: Sequence[float]
) -> np.ndarray:
    """Series value at each time by linear interpolation; NaN outside the series' range or at NaN times."""
    times = np.asarray(times, np.float64)
    xp = np.asarray(series_times, np.float64)
    fp = np.asarray(series_values, np.float64)
    out = np.full(times.shape, np.nan)
    inside = np.isfinite(times) & (times >= xp[0]) & (times <= xp[-1])
    out[inside] = np.interp(times[inside], xp, fp)
    return out


@functools.lru_cache(maxsize=8)
def _zero_frame_bytes(height: int, width: int, image_format: str, quality: int) -> bytes:
    """Encoded all-zero frame (cached: padding reuses one bytes object)."""
    return frame_ops.encode_frame(np.zeros((height, width, 3), np.uint8), image_format=image_format, quality=quality)


def zero_frame_bytes(spec: WindowSpec) -> bytes:
    """The encoded black frame every padded or masked slot holds."""
    return _zero_frame_bytes(spec.height, spec.width, spec.image_format, spec.quality)


def _summarise(reasons: collections.Counter) -> str:
    """'3 x reason; 1 x other' for the most common reasons."""
    top = reasons.most_common(3)
    text = "; ".join(f"{n} x {r}" for r, n in top)
    rest = sum(reasons.values()) - sum(n for _, n in top)
    return text + (f"; {rest} more" if rest else "")


# --------------------------------------------------------------------------------------------
# Windows out of slots
# --------------------------------------------------------------------------------------------


def _assemble(key: str, window: int, slots: Iterable[_Slot], spec: WindowSpec) -> tuple[dict[str, Any], list[example_io.Skip]]:
    """Encodes a window's slots one at a time into a padded example; returns it and its masked parts."""
    zero = zero_frame_bytes(spec)
    encoded: list[bytes] = []
    mask = np.zeros((spec.max_len,), np.uint8)
    target = np.zeros((spec.max_len,), np.float32)
    time = np.zeros((spec.max_len,), np.float32)
    skips: list[example_io.Skip] = []
    for i, slot in enumerate(slots):
        if i >= spec.max_len:
            raise ValueError(f"{key}: window {window} has more than max_len={spec.max_len} frames")
        problem = slot.problem
        if not problem and not math.isfinite(slot.target):
            problem = f"NaN {spec.target_name}"
        if not problem and slot.image is None:
            problem = "no image"
        if problem:
            encoded.append(zero)
            skips.append(example_io.Skip(source=slot.name, reason=problem, example=key))
        else:
            encoded.append(frame_ops.encode_frame(slot.image, image_format=spec.image_format, quality=spec.quality))
            mask[i] = 1
            target[i] = slot.target
        slot.image = None  # drop the decoded frame now, not when the slot goes
        time[i] = slot.time if math.isfinite(slot.time) else 0.0
    num_frames = len(encoded)
    encoded.extend([zero] * (spec.max_len - num_frames))
    example = {
        "video": encoded,
        "mask": mask,
        spec.target_name: target,
        "time": time,
        "window": np.int32(window),
        "num_frames": np.int32(num_frames),
    }
    return example, skips


def _emit_windows(
    key: str,
    features: Mapping[str, Any],
    windows: Iterable[Iterable[_Slot]],
    spec: WindowSpec,
    empty_context: Callable[[], str] = lambda: "",
) -> Iterator[example_io.KeyExample | example_io.Skip]:
    """Yields each window with a usable frame (plus its masked parts); a window with none is a skip.

    Raises ValueError (a whole-input skip) when no window has a usable frame; skips of dropped
    windows are only yielded once some window was written, so a skipped input leaves one record.
    """
    pending: list[example_io.Skip] = []
    reasons: collections.Counter = collections.Counter()
    emitted = 0
    total = 0
    for w, slots in enumerate(windows):
        wkey = window_key(key, w)
        example, skips = _assemble(wkey, w, slots, spec)
        total += int(example["num_frames"])
        if example["mask"].any():
            yield from pending
            pending.clear()
            yield from skips
            yield wkey, {**features, **example}
            emitted += 1
        else:
            why = collections.Counter(s.reason for s in skips)
            reasons.update(why)
            pending.append(example_io.Skip(source=wkey, reason=f"no usable frame in window {w}: {_summarise(why)}"))
        del example, skips
    if not emitted:
        context = empty_context()
        raise ValueError(
            f"{key}: no usable frame among {total} frames ({_summarise(reasons) or 'no frames'})"
            + (f"; {context}" if context else "")
        )
    yield from pending


# --------------------------------------------------------------------------------------------
# Image-file sequences
# --------------------------------------------------------------------------------------------


def _image_slots(source: FrameSeriesSource, start: int, stop: int, spec: WindowSpec) -> Iterator[_Slot]:
    """Reads (and resizes) frames start..stop-1 lazily, one at a time; unreadable ones become masked slots."""
    names = source.names or source.frames
    for j in range(start, stop):
        t = source.times[j] if source.times is not None else math.nan
        slot = _Slot(name=names[j], target=float(source.targets[j]), time=float(t))
        if math.isfinite(slot.target):  # a NaN-target frame is masked anyway: do not read it
            try:
                slot.image = video.read_image(source.frames[j], size=(spec.height, spec.width), resize_mode=spec.resize_mode)
            except (ValueError, OSError) as e:
                slot.problem = f"{type(e).__name__}: {e}"
        yield slot


def frame_series_example(source: FrameSeriesSource, spec: WindowSpec) -> Iterator[example_io.KeyExample | example_io.Skip]:
    """Turns one image sequence into its windows: read, resize and encode one frame at a time."""
    n = len(source.frames)
    if n == 0:
        raise ValueError(f"{source.key}: the sequence has no frames")
    if len(source.targets) != n or (source.times is not None and len(source.times) != n) or (
        source.names is not None and len(source.names) != n
    ):
        raise ValueError(f"{source.key}: frames, targets, times and names must have the same length ({n})")
    windows = (_image_slots(source, start, stop, spec) for start, stop in window_bounds(n, spec.max_len))
    yield from _emit_windows(source.key, source.features, windows, spec)


# --------------------------------------------------------------------------------------------
# Video + time series
# --------------------------------------------------------------------------------------------


def _video_slots(
    source: VideoSeriesSource, decoded: video.DecodedFrames, start: int, stop: int, spec: WindowSpec, seen: list[float]
) -> Iterator[_Slot]:
    """Slots start..stop-1 of a decoded window, targets interpolated at the frames' timestamps."""
    name = source.name or source.video
    lo, hi = source.series_times[0], source.series_times[-1]
    position = {int(index): k for k, index in enumerate(decoded.indices)}
    for index in range(start, stop):
        k = position.get(index)
        if k is None:
            t = index / decoded.fps if decoded.fps > 0 else math.nan
        else:
            t = float(decoded.timestamps[k])
        value = float(interpolate_series(np.array([t]), source.series_times, source.series_values)[0])
        slot = _Slot(name=f"{name}#{index}", target=value, time=t)
        if math.isfinite(t):
            seen[0], seen[1] = min(seen[0], t), max(seen[1], t)
        if k is None:
            slot.problem = "frame could not be decoded"
        elif not math.isfinite(t):
            slot.problem = "unknown timestamp"
        elif not lo <= t <= hi:
            slot.problem = f"outside the time series ({lo:g}..{hi:g} s)"
        else:
            slot.image = decoded.frames[k]
        yield slot


def _video_windows(
    source: VideoSeriesSource, spec: WindowSpec, seen: list[float]
) -> Iterator[Iterator[_Slot]]:
    """One decoding pass per window (sequential, no seeking): at most one window of frames is held."""
    size = (spec.height, spec.width)
    decoded = video.decode_frames(
        source.video, np.arange(spec.max_len), size=size, resize_mode=spec.resize_mode, timeout_s=spec.timeout_s
    )
    bounds = window_bounds(decoded.num_decoded, spec.max_len)
    if len(bounds) > 1:
        logger.info("%s: %d frames, %d windows of %d (one decoding pass each)", source.video, decoded.num_decoded, len(bounds), spec.max_len)
    for w, (start, stop) in enumerate(bounds):
        if w:
            decoded = video.decode_frames(
                source.video, np.arange(start, stop), size=size, resize_mode=spec.resize_mode, timeout_s=spec.timeout_s
            )
        yield _video_slots(source, decoded, start, stop, spec, seen)
        decoded = None


def video_series_example(source: VideoSeriesSource, spec: WindowSpec) -> Iterator[example_io.KeyExample | example_io.Skip]:
    """Turns one video + time series into its windows, each frame's target interpolated at its timestamp.

    A URL video is fetched once into a local temporary file, kept for all its windows (one decoding
    pass each) and deleted after the last one.
    """
    if not files.exists(source.video):
        raise video.VideoNotFoundError(errno.ENOENT, "Video file not found", source.video)
    if not source.series_times:
        raise ValueError(f"{source.video}: no time series (expected {source.series_origin or 'a (time, value) series'})")
    check_series(source.series_times, source.series_values, origin=source.series_origin or source.video)
    seen = [math.inf, -math.inf]  # earliest and latest finite frame time

    def context() -> str:
        lo, hi = source.series_times[0], source.series_times[-1]
        frames = f"{seen[0]:g}..{seen[1]:g} s" if seen[0] <= seen[1] else "unknown times"
        return f"time series {lo:g}..{hi:g} s vs video frames at {frames}"

    with files.local_copy(source.video) as path:
        local = source if path == source.video else dataclasses.replace(source, video=path, name=source.name or source.video)
        yield from _emit_windows(source.key, source.features, _video_windows(local, spec, seen), spec, context)


def series_example(source: FrameSeriesSource | VideoSeriesSource, spec: WindowSpec) -> Iterator[example_io.KeyExample | example_io.Skip]:
    """Either kind of source to its windows (the example function a builder hands to the writer).

    A sequence longer than `WindowSpec.max_len` is cut into consecutive windows of `max_len` frames,
    each its own example (key `<key>/w000`, `<key>/w001`, ...), so no frame is lost; the last window
    is zero-padded. Every slot of a window has `mask` 1 (a usable frame with a finite target) or 0
    (padding, an unreadable frame, a NaN target, a frame outside the series): mask-0 slots hold the
    zero frame and target 0.

    Frames are read (or taken from the decoded window), resized and encoded to JPEG/PNG one at a
    time, so an example function holds at most one window of frames and usually one frame plus the
    encoded bytes; padding reuses one encoded zero frame.
    """
    if isinstance(source, VideoSeriesSource):
        return video_series_example(source, spec)
    if isinstance(source, FrameSeriesSource):
        return frame_series_example(source, spec)
    raise TypeError(f"expected a FrameSeriesSource or VideoSeriesSource, got {type(source).__name__}")
