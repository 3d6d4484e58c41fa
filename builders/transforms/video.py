"""Dataset-agnostic video stages: probe, sample indices, decode (resizing as it goes), key-frame sampling, read images.

Every function works on one video (or one image) at a time and returns numpy arrays in RGB
order, so that builders never see OpenCV's BGR layout. Decoding is always one sequential pass
(see `decode_frames`). A path may also be a URL (`s3://...`, any fsspec URL, see
`vidvol.builders.sources.files`): probing and decoding fetch it into a local temporary file for
the call (OpenCV reads local files only), and `read_image` reads it straight into memory. The
example functions fetch a source once (`files.local_copy`) and hand the local path to these stages.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import math
import os
import time
from collections.abc import Callable, Sequence

import cv2
import numpy as np

from vidvol.builders.sources import files
from vidvol.builders.transforms import frame_ops

logger = logging.getLogger(__name__)

__all__ = [
    "DecodedFrames",
    "ImageDecodeError",
    "ImageNotFoundError",
    "VideoDecodeError",
    "VideoInfo",
    "VideoNotFoundError",
    "count_frames",
    "decode_frames",
    "motion_indices",
    "probe_video",
    "read_image",
    "uniform_indices",
]

# Frame rates outside (0, MAX_SANE_FPS] are container garbage (e.g. a 90 kHz time base).
MAX_SANE_FPS = 1000.0
# Grab budget when the container does not report a frame count.
DEFAULT_MAX_FRAMES_UNKNOWN = 100_000
# Width of the grayscale thumbnails that motion_indices compares.
MOTION_THUMB_WIDTH = 64
# decode_frames preallocates its output for at most this many wanted frames; more (a caller's long range
# sized by a header that may lie) grow with the frames actually decoded.
PREALLOCATE_MAX_FRAMES = 1024


class VideoDecodeError(ValueError):
    """A video file is missing, empty, not a video, or yields no decodable frame."""


class VideoNotFoundError(FileNotFoundError, VideoDecodeError):
    """A video path does not exist (catchable as FileNotFoundError or VideoDecodeError)."""


class ImageDecodeError(ValueError):
    """An image file is empty, corrupt or not an image OpenCV can decode."""


class ImageNotFoundError(FileNotFoundError, ImageDecodeError):
    """An image path does not exist (catchable as FileNotFoundError or ImageDecodeError)."""


@dataclasses.dataclass(frozen=True)
class VideoInfo:
    """Container-reported properties of a video; counts can be wrong, decoding tells the truth."""

    num_frames: int  # CAP_PROP_FRAME_COUNT, 0 if unknown
    fps: float  # 0.0 if unknown or implausible
    height: int
    width: int


@dataclasses.dataclass
class DecodedFrames:
    """Frames kept from one sequential decoding pass, with where and when each came from."""

    frames: np.ndarray  # (n, H, W, 3) uint8 RGB; (0, H, W, 3) when the frames were encoded instead
    indices: np.ndarray  # (n,) int64 source frame index of each frame, increasing
    timestamps: np.ndarray  # (n,) float64 seconds from video start
    num_decoded: int  # frames grabbed from the source: the real length of the video
    fps: float  # container frame rate, 0.0 if unknown
    encoded: list[bytes] | None = None  # with `decode_frames(encode=...)`: each kept frame, encoded as it came


# --------------------------------------------------------------------------------------------
# Opening and probing
# --------------------------------------------------------------------------------------------


def single_threaded_opencv() -> None:
    """Limits OpenCV to one thread in this process (a Beam worker: the workers are the parallelism).

    OpenCV's own thread pool in every worker would oversubscribe the cores; the benchmark's
    2-vs-1-worker build scaling depends on it.
    """
    cv2.setNumThreads(1)


def _check_input_file(path: str, kind: str, not_found: type[OSError], invalid: type[ValueError]) -> None:
    """Raise early, with a clear reason, for a missing, non-regular or empty input file (a local path or a URL)."""
    if files.is_url(path):
        try:
            st = files.stat(path)
        except FileNotFoundError:
            raise not_found(errno.ENOENT, f"{kind.capitalize()} file not found", path) from None
        isfile, size = not st.isdir, st.size
    else:
        if not os.path.exists(path):
            raise not_found(errno.ENOENT, f"{kind.capitalize()} file not found", path)
        isfile = os.path.isfile(path)
        size = os.path.getsize(path) if isfile else 0
    if not isfile:
        raise invalid(f"{path}: expected {'an' if kind[0] in 'aeiou' else 'a'} {kind} file, found a directory or special file")
    if size == 0:
        raise invalid(f"{path}: {kind} file is empty (0 bytes)")


def _check_video_file(path: str) -> None:
    """Raise early, with a clear reason, for paths OpenCV would only report as 'not opened'."""
    _check_input_file(path, "video", VideoNotFoundError, VideoDecodeError)


def _open_capture(path: str, timeout_s: float | None = None) -> cv2.VideoCapture:
    """Open ``path`` with the FFmpeg backend (falling back to any backend) or raise."""
    _check_video_file(path)
    params: list[int] = []
    if timeout_s is not None and timeout_s > 0:
        # Lets FFmpeg's interrupt callback abort a read that blocks inside the demuxer.
        timeout_ms = int(min(timeout_s * 1000.0, 2**31 - 1))
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms]
    # OpenCV takes the name as UTF-8: a name that is not (Latin-1 `caf\xe9.mp4`) is opened through an ASCII link,
    # which may go once the file is open (FFmpeg holds the file itself).
    with files.utf8_path(path) as openable:
        cap = cv2.VideoCapture(openable, cv2.CAP_FFMPEG, params)
        if not cap.isOpened():
            cap.release()
            cap = cv2.VideoCapture(openable, cv2.CAP_ANY)
    if not cap.isOpened():
        cap.release()
        raise VideoDecodeError(f"{path}: OpenCV cannot open this file as a video (not a video, or damaged)")
    return cap


def _sane_fps(value: float) -> float:
    """Return the frame rate if plausible, else 0.0."""
    return float(value) if math.isfinite(value) and 0.0 < value <= MAX_SANE_FPS else 0.0


def _sane_count(value: float) -> int:
    """Return the container frame count if positive and finite, else 0."""
    return int(value) if math.isfinite(value) and value > 0 else 0


def _info_from_capture(cap: cv2.VideoCapture) -> VideoInfo:
    """Read the container properties of an opened capture."""
    height = cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
    width = cap.get(cv2.CAP_PROP_FRAME_WIDTH)
    return VideoInfo(
        num_frames=_sane_count(cap.get(cv2.CAP_PROP_FRAME_COUNT)),
        fps=_sane_fps(cap.get(cv2.CAP_PROP_FPS)),
        height=int(height) if math.isfinite(height) and height > 0 else 0,
        width=int(width) if math.isfinite(width) and width > 0 else 0,
    )


def probe_video(path: str) -> VideoInfo:
    """Return the container's frame count, frame rate and frame size without decoding frames."""
    path = os.fspath(path)
    if files.is_url(path):  # OpenCV needs a local file: fetch one for this call
        _check_video_file(path)
        with files.local_copy(path) as local:
            return probe_video(local)
    cap = _open_capture(path)
    try:
        info = _info_from_capture(cap)
    finally:
        cap.release()
    if info.height <= 0 or info.width <= 0:
        raise VideoDecodeError(f"{path}: opened, but reports no frame size (not a decodable video stream)")
    return info


# --------------------------------------------------------------------------------------------
# Which frames to keep
# --------------------------------------------------------------------------------------------


def uniform_indices(num_frames: int, num_samples: int) -> np.ndarray:
    """Return ``num_samples`` frame indices spread evenly over the whole video.

    The video is cut into ``num_samples`` equal segments and the centre frame of each is taken
    (``floor((k + 0.5) * num_frames / num_samples)``, TSN-style test sampling): indices are
    unique, strictly increasing and lie within half a segment of both ends. Videos with no more
    frames than ``num_samples`` return every index.
    """
    if num_frames < 0 or num_samples < 0:
        raise ValueError(f"num_frames and num_samples must be >= 0, got {num_frames} and {num_samples}")
    if num_frames <= num_samples:
        return np.arange(num_frames, dtype=np.int64)
    k = np.arange(num_samples, dtype=np.int64)
    # Exact integer arithmetic: (2k + 1) * N // (2S) == floor((k + 0.5) * N / S).
    return ((2 * k + 1) * int(num_frames)) // (2 * int(num_samples))


# --------------------------------------------------------------------------------------------
# Sequential decoding
# --------------------------------------------------------------------------------------------


def _default_max_frames(container_count: int) -> int:
    """Grab budget: the container count plus 10% and 100 frames of slack, or a fixed cap."""
    if container_count <= 0:
        return DEFAULT_MAX_FRAMES_UNKNOWN
    return container_count + container_count // 10 + 100


def _scan(
    path: str,
    wanted: np.ndarray | None,
    on_frame: Callable[[int, np.ndarray, float], None],
    *,
    max_frames: int | None,
    timeout_s: float,
    stop_at: int | None = None,
) -> tuple[int, VideoInfo]:
    """Grab every frame of ``path`` once, hand wanted BGR frames to ``on_frame``; return the count.

    ``wanted`` is a sorted unique int64 array (None = every frame). ``on_frame`` receives
    ``(index, bgr_frame, pos_msec)``. Returns ``(num_decoded, info)``. Raises VideoDecodeError
    when no frame decodes or the wall-clock ``timeout_s`` runs out. ``stop_at`` ends the pass
    after that many grabs, silently: the caller needs no frame beyond it (a time range).
    """
    start = time.monotonic()
    cap = _open_capture(path, timeout_s)
    try:
        info = _info_from_capture(cap)
        budget = _default_max_frames(info.num_frames) if max_frames is None else int(max_frames)
        if stop_at is not None:
            budget = min(budget, int(stop_at)) if max_frames is not None else int(stop_at)
        next_wanted = 0  # position in ``wanted`` of the next index to keep
        index = 0
        while index < budget:
            if time.monotonic() - start > timeout_s:
                raise VideoDecodeError(
                    f"{path}: decoding timed out after {timeout_s:g} s at frame {index} (damaged or huge file?)"
                )
            if not cap.grab():
                break
            keep = wanted is None or (next_wanted < len(wanted) and wanted[next_wanted] == index)
            if keep:
                pos_msec = float(cap.get(cv2.CAP_PROP_POS_MSEC))
                ok, frame = cap.retrieve()
                if ok and frame is not None and frame.size:
                    on_frame(index, frame, pos_msec)
                else:
                    logger.warning("%s: frame %d was grabbed but could not be retrieved; left out", path, index)
                if wanted is not None:
                    next_wanted += 1
            index += 1
        else:
            if stop_at is None or budget < stop_at:
                logger.warning(
                    "%s: stopped after max_frames=%d grabs (container reports %d frames); length may be truncated",
                    path,
                    budget,
                    info.num_frames,
                )
    finally:
        cap.release()
    if index == 0:
        raise VideoDecodeError(f"{path}: no decodable frame (file opens but the first frame cannot be read)")
    if info.num_frames and index != info.num_frames and (stop_at is None or index < stop_at):
        logger.info("%s: container reports %d frames, decoded %d", path, info.num_frames, index)
    return index, info


def _to_rgb(frame: np.ndarray) -> np.ndarray:
    """Convert an OpenCV BGR (or gray, or BGRA) frame to RGB uint8 (H, W, 3)."""
    if frame.ndim == 2:
        return cv2.cvtColor(frame, cv2.COLOR_GRAY2RGB)
    if frame.shape[2] == 4:
        return cv2.cvtColor(frame, cv2.COLOR_BGRA2RGB)
    if frame.shape[2] == 1:
        return cv2.cvtColor(frame[:, :, 0], cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)


def _sorted_unique_indices(indices: Sequence[int], path: str) -> np.ndarray:
    """Validate requested indices: integral, non-negative; return them sorted and unique."""
    array = np.asarray(indices)
    if array.size == 0:
        return np.zeros((0,), np.int64)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{path}: frame indices must be a 1-D sequence of integers, got {array.dtype} {array.shape}")
    if array.min() < 0:
        raise ValueError(f"{path}: frame indices must be >= 0, got {int(array.min())}")
    return np.unique(array.astype(np.int64))


def _timestamps(pos_msec: list[float], indices: np.ndarray, fps: float) -> np.ndarray:
    """Seconds from start: decoder positions if finite, >= 0 and increasing, else index / fps."""
    pos = np.asarray(pos_msec, dtype=np.float64) / 1000.0
    sane = bool(np.all(np.isfinite(pos)) and np.all(pos >= 0.0) and np.all(np.diff(pos) > 0.0))
    # A lone frame at 0.0 is fine, but several frames all at 0 means positions are not reported.
    if sane and (len(pos) < 2 or pos[-1] > 0.0):
        return pos
    if fps > 0.0:
        return indices.astype(np.float64) / fps
    return np.full(indices.shape, np.nan, dtype=np.float64)


def decode_frames(
    path: str,
    indices: Sequence[int] | None = None,
    *,
    size: tuple[int, int] | None = None,
    resize_mode: str = "resize",
    max_frames: int | None = None,
    timeout_s: float = 120.0,
    stop_at: int | None = None,
    encode: Callable[[np.ndarray], bytes] | None = None,
) -> DecodedFrames:
    """Decode the wanted frames of a video in one sequential pass, as RGB, optionally resized.

    ``indices`` are sorted and deduplicated (None = every frame); wanted indices past the real
    end of the stream are simply absent from the result. The whole stream is grabbed so that
    ``num_decoded`` is the true length, bounded by ``max_frames`` grabs (default: container count
    + 10% + 100, or 100k if unknown) and by ``timeout_s`` wall-clock seconds. With ``stop_at``
    (a clip cut out of a longer video) the pass ends after that many frames, and ``num_decoded``
    is ``min(real length, stop_at)``. Each kept frame is
    resized immediately to ``size`` = (height, width) with :func:`frame_ops.resize_frame`. Timestamps are
    the decoder's positions when finite and increasing, else ``index / fps`` (NaN without fps).
    With ``encode`` each kept frame is encoded at once (``encode(rgb) -> bytes``) into ``encoded``
    and only those bytes are held: every frame of a long video, kept compressed. Nothing is sized
    by the frame count the container claims.

    Why one sequential pass (``grab`` every frame, ``retrieve`` only the wanted ones): seeking in
    DivX/XVID AVI files is slow and lands on the wrong frame, and a single pass also yields the true
    decoded length, which container headers often misreport.
    """
    path = os.fspath(path)
    if files.is_url(path):  # OpenCV needs a local file: fetch one for this call
        _check_video_file(path)
        with files.local_copy(path) as local:
            return decode_frames(
                local, indices, size=size, resize_mode=resize_mode, max_frames=max_frames, timeout_s=timeout_s,
                stop_at=stop_at, encode=encode,
            )
    if resize_mode not in frame_ops.RESIZE_MODES:
        raise ValueError(f"resize_mode must be one of {frame_ops.RESIZE_MODES}, got {resize_mode!r}")
    if size is not None:
        size = frame_ops.check_size(size)
    wanted = None if indices is None else _sorted_unique_indices(indices, path)
    if wanted is not None and wanted.size == 0:
        logger.debug("%s: no frame indices requested; only counting frames", path)

    kept_indices: list[int] = []
    kept_pos: list[float] = []
    kept_frames: list[np.ndarray] = []
    kept_encoded: list[bytes] = []
    # With a few known indices the output is preallocated once, so only one copy of the frames is held.
    preallocate = wanted is not None and encode is None and len(wanted) <= PREALLOCATE_MAX_FRAMES
    buffer: list[np.ndarray | None] = [None]

    def on_frame(index: int, bgr: np.ndarray, pos_msec: float) -> None:
        rgb = _to_rgb(bgr)
        if size is not None:
            rgb = frame_ops.resize_frame(rgb, size, mode=resize_mode)
        if encode is not None:
            kept_encoded.append(encode(rgb))
        elif not preallocate:
            kept_frames.append(rgb)
        else:
            if buffer[0] is None:
                buffer[0] = np.zeros((len(wanted), *rgb.shape), dtype=np.uint8)
            elif buffer[0].shape[1:] != rgb.shape:
                raise VideoDecodeError(
                    f"{path}: frame {index} has shape {rgb.shape}, earlier frames {buffer[0].shape[1:]}; "
                    "pass size= to resize frames of a stream whose size changes"
                )
            buffer[0][len(kept_indices)] = rgb
        kept_indices.append(index)
        kept_pos.append(pos_msec)

    num_decoded, info = _scan(path, wanted, on_frame, max_frames=max_frames, timeout_s=timeout_s, stop_at=stop_at)

    n = len(kept_indices)
    if not preallocate:
        if kept_frames and any(f.shape != kept_frames[0].shape for f in kept_frames):
            raise VideoDecodeError(f"{path}: frame size changes within the stream; pass size= to resize")
        frames = np.stack(kept_frames) if kept_frames else None
        kept_frames.clear()
    else:
        frames = buffer[0]
        if frames is not None and n < len(frames):
            frames = frames[:n].copy()  # only when wanted frames lie past the real end
    if frames is None:
        height, width = size if size is not None else (info.height, info.width)
        frames = np.zeros((0, height, width, 3), dtype=np.uint8)
    index_array = np.asarray(kept_indices, dtype=np.int64)
    return DecodedFrames(
        frames=frames,
        indices=index_array,
        timestamps=_timestamps(kept_pos, index_array, info.fps),
        num_decoded=num_decoded,
        fps=info.fps,
        encoded=kept_encoded if encode is not None else None,
    )


def count_frames(path: str, *, timeout_s: float = 120.0) -> int:
    """The real length of a video: one pass that grabs every frame and keeps none (for containers with no count)."""
    return decode_frames(path, [], timeout_s=timeout_s).num_decoded


# --------------------------------------------------------------------------------------------
# Key-frame (motion) sampling
# --------------------------------------------------------------------------------------------


def _thumbnail(bgr: np.ndarray, width: int = MOTION_THUMB_WIDTH) -> np.ndarray:
    """Downscaled float32 grayscale copy of a frame, for cheap frame differences."""
    gray = bgr if bgr.ndim == 2 else cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY if bgr.shape[2] == 3 else cv2.COLOR_BGRA2GRAY)
    height = max(1, round(gray.shape[0] * width / gray.shape[1]))
    return cv2.resize(gray, (width, height), interpolation=cv2.INTER_AREA).astype(np.float32)


def motion_indices(
    path: str,
    num_samples: int,
    *,
    num_candidates: int | None = None,
    info: VideoInfo | None = None,
    timeout_s: float = 120.0,
    frame_range: tuple[int, int] | None = None,
) -> np.ndarray:
    """Return the ``num_samples`` frame indices that follow the largest visual changes, in time order.

    Candidates are ``uniform_indices(num_frames, num_candidates or 4 * num_samples)``. Each
    candidate scores the mean absolute difference of its 64-px-wide grayscale thumbnail to the
    previous candidate; the first candidate scores +inf, so the opening frame is always kept.
    The top scores win, ties broken by earlier index (deterministic). Videos with no more than
    ``num_samples`` frames return every index; the frame count comes from ``info`` or a probe
    (a counting pass if the container does not report it), and is re-counted when the container
    count overstates the real length. ``frame_range = (first, stop)`` restricts everything to
    frames ``first .. stop - 1`` (a clip cut out of a longer video; the pass ends at ``stop``).
    """
    path = os.fspath(path)
    if files.is_url(path):  # OpenCV needs a local file: fetch one for this call
        _check_video_file(path)
        with files.local_copy(path) as local:
            return motion_indices(
                local, num_samples, num_candidates=num_candidates, info=info, timeout_s=timeout_s, frame_range=frame_range
            )
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    if num_candidates is not None and num_candidates < num_samples:
        raise ValueError(f"num_candidates ({num_candidates}) must be >= num_samples ({num_samples})")
    if frame_range is not None:
        first, stop = (int(x) for x in frame_range)
        if not 0 <= first < stop:
            raise ValueError(f"frame_range must satisfy 0 <= first < stop, got {frame_range}")
        return _motion_indices(path, num_samples, num_candidates, stop - first, timeout_s, retry=False, offset=first, stop_at=stop)
    info = info if info is not None else probe_video(path)
    num_frames = info.num_frames
    if num_frames <= 0:
        num_frames = decode_frames(path, [], timeout_s=timeout_s).num_decoded
    return _motion_indices(path, num_samples, num_candidates, num_frames, timeout_s, retry=True)


def _motion_indices(
    path: str, num_samples: int, num_candidates: int | None, num_frames: int, timeout_s: float, *, retry: bool,
    offset: int = 0, stop_at: int | None = None,
) -> np.ndarray:
    """Score candidates over ``num_frames`` frames from ``offset``; recount once if the video is shorter."""
    if num_frames <= num_samples:
        return np.arange(offset, offset + num_frames, dtype=np.int64)
    candidates = uniform_indices(num_frames, num_candidates or 4 * num_samples) + offset
    found: list[int] = []
    scores: list[float] = []
    previous: list[np.ndarray | None] = [None]

    def on_frame(index: int, bgr: np.ndarray, pos_msec: float) -> None:
        thumb = _thumbnail(bgr)
        prev = previous[0]
        scores.append(math.inf if prev is None else float(np.mean(np.abs(thumb - prev))))
        previous[0] = thumb
        found.append(index)

    num_decoded, _ = _scan(path, candidates, on_frame, max_frames=None, timeout_s=timeout_s, stop_at=stop_at)
    if len(found) < num_samples:
        if retry and num_decoded < num_frames:
            logger.info("%s: container count %d > decoded %d; re-sampling", path, num_frames, num_decoded)
            return _motion_indices(path, num_samples, num_candidates, num_decoded, timeout_s, retry=False)
        return np.asarray(found, dtype=np.int64)
    # Stable sort on -score keeps the earlier candidate first among equal scores.
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:num_samples]
    return np.sort(np.asarray(found, dtype=np.int64)[order])


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def read_image(
    path: str,
    *,
    size: tuple[int, int] | None = None,
    resize_mode: str = "resize",
) -> np.ndarray:
    """Read an image file as RGB uint8 (H, W, 3), gray inputs expanded to 3 channels, optionally resized."""
    path = os.fspath(path)
    if files.is_url(path):
        # One request per frame, straight into memory (no temporary file); transient errors are retried.
        try:
            data = np.frombuffer(files.read_bytes(path), dtype=np.uint8)
        except FileNotFoundError:
            raise ImageNotFoundError(errno.ENOENT, "Image file not found", path) from None
        if data.size == 0:
            raise ImageDecodeError(f"{path}: image file is empty (0 bytes)")
    else:
        _check_input_file(path, "image", ImageNotFoundError, ImageDecodeError)
        # imdecode on the bytes (rather than imread) works for any path encoding and never warns on stdout.
        data = np.fromfile(path, dtype=np.uint8)
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise ImageDecodeError(f"{path}: OpenCV cannot decode this file as an image (corrupt or unsupported)")
    rgb = _to_rgb(bgr)
    if size is not None:
        rgb = frame_ops.resize_frame(rgb, size, mode=resize_mode)
    return rgb
