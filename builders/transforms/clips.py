"""Video file -> fixed-length, masked clip example: decode once, sample, resize, pad, encode.

The example stage every video-clip dataset runs (hmdb51, video_folder): `clip_example` turns one
`ClipSource` into its example by the recipe of a `ClipSpec`. The TFDS side they share (configs,
named geometries, features, the builder base) is `vidvol.builders.clip_builder`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any
from collections.abc import Iterator, Mapping

import numpy as np

from vidvol.builders.sources import files
from vidvol.builders.transforms import frame_ops
from vidvol.builders.transforms import video


# How clip frames are stored: one JPEG or PNG per frame (TFDS Video), or the whole uint8 clip as raw bytes.
IMAGE_FORMATS = ("jpeg", "png", "raw")


def check_raw_length(image_format: str, num_frames: int | None) -> None:
    """Raw storage holds fixed-length clips only (every frame of a long video uncompressed would be huge)."""
    if image_format == "raw" and num_frames is None:
        raise ValueError(
            "image_format='raw' stores fixed-length clips only; set num_frames (e.g. 20), or keep every frame "
            "with image_format='jpeg'"
        )


@dataclasses.dataclass(frozen=True)
class ClipSpec:
    """How a clip is cut from a video: frame count, geometry, sampling and storage."""

    num_frames: int | None  # None keeps every frame (variable length)
    height: int
    width: int
    resize_mode: str = "resize"  # "resize" (direct) or "crop" (aspect-preserving resize + center crop)
    sampling: str = "uniform"  # "uniform" or "motion"
    image_format: str = "jpeg"  # "jpeg", "png" (lossless) or "raw" (uncompressed uint8, fixed num_frames only)
    quality: int = 90
    timeout_s: float = 300.0

    def __post_init__(self):
        if self.sampling not in ("uniform", "motion"):
            raise ValueError(f"sampling must be 'uniform' or 'motion', got {self.sampling!r}")
        if self.resize_mode not in ("resize", "crop"):
            raise ValueError(f"resize_mode must be 'resize' or 'crop', got {self.resize_mode!r}")
        if self.image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, got {self.image_format!r}")
        check_raw_length(self.image_format, self.num_frames)


@dataclasses.dataclass(frozen=True, slots=True)  # slots: a million of them stay small on a driver
class ClipSource:
    """One video to turn into one example, with the feature values known before decoding."""

    path: str
    key: str
    features: Mapping[str, Any]
    origin: str = ""  # where the video was named (e.g. "split file X line N"), for error messages
    start: float | None = None  # seconds: cut the clip [start, end) out of the video (both or neither)
    end: float | None = None


def sample_indices(path: str, info: video.VideoInfo, spec: ClipSpec) -> np.ndarray | None:
    """Source frame indices to keep (None = all frames).

    A container that reports no frame count is counted in a first pass that keeps nothing, so that
    only the sampled frames are ever held, however long the video.
    """
    if spec.num_frames is None:
        return None
    if spec.sampling == "motion":
        return video.motion_indices(path, spec.num_frames, info=info, timeout_s=spec.timeout_s)
    num_frames = info.num_frames if info.num_frames > 0 else video.count_frames(path, timeout_s=spec.timeout_s)
    return video.uniform_indices(num_frames, spec.num_frames)


def _resampled(path: str, info: video.VideoInfo, spec: ClipSpec, indices: np.ndarray | None,
               decoded: video.DecodedFrames) -> tuple[np.ndarray | None, video.DecodedFrames]:
    """A header that claimed more frames than the video has (a million, say) sampled past the real end:
    sample again over the real length, in a second pass. Returns the indices and frames kept."""
    if indices is None or spec.sampling != "uniform" or decoded.num_decoded >= info.num_frames:
        return indices, decoded
    real = video.uniform_indices(decoded.num_decoded, spec.num_frames)
    if np.array_equal(real, decoded.indices):
        return indices, decoded
    del decoded  # only the second pass's frames are held
    again = video.decode_frames(
        path, real, size=(spec.height, spec.width), resize_mode=spec.resize_mode, timeout_s=spec.timeout_s,
    )
    return real, again


def _frame_encoder(spec: ClipSpec):
    """Every-frame clips (variable length) keep each frame encoded as it is decoded: never the raw video."""
    if spec.num_frames is not None:
        return None
    return functools.partial(frame_ops.encode_frame, image_format=spec.image_format, quality=spec.quality)


def frame_range(start: float, end: float, fps: float) -> tuple[int, int]:
    """Source frames `first .. stop - 1` whose timestamps `i / fps` lie in [start, end) seconds."""
    eps = 1e-6  # timestamps written as decimals (1.04 s at 25 fps is frame 26 exactly)
    return max(0, math.ceil(start * fps - eps)), max(0, math.ceil(end * fps - eps))


def _check_times(source: ClipSource) -> None:
    """A start/end pair that cannot name a clip is a bad input (a skip with the reason)."""
    start, end = source.start, source.end
    where = f" (named by {source.origin})" if source.origin else ""
    if start is None or end is None:
        raise ValueError(f"{source.path}: start and end go together, got start={start} end={end}{where}")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"{source.path}: start {start} / end {end} are not finite seconds{where}")
    if start >= end:
        raise ValueError(f"{source.path}: start {start:g} s >= end {end:g} s{where}")
    if start < 0:
        raise ValueError(f"{source.path}: start {start:g} s is before the video's beginning{where}")


def _check_range_in_video(source: ClipSource, first: int, stop: int, num_decoded: int, fps: float) -> None:
    """After decoding (which stops at `stop`): the range must lie inside the video, within one frame period."""
    where = f" (named by {source.origin})" if source.origin else ""
    length = f"{num_decoded} frames at {fps:g} fps = {num_decoded / fps:.3f} s"
    if num_decoded <= first:
        raise ValueError(f"{source.path}: start {source.start:g} s is at or past the end of the video ({length}){where}")
    if num_decoded < stop and source.end > (num_decoded + 1) / fps:
        raise ValueError(f"{source.path}: end {source.end:g} s is past the end of the video ({length}){where}")


def _range_indices(path: str, info: video.VideoInfo, spec: ClipSpec, first: int, stop: int) -> np.ndarray:
    """Source frame indices to keep from frames `first .. stop - 1`."""
    if spec.num_frames is None:
        return np.arange(first, stop, dtype=np.int64)
    if spec.sampling == "motion":
        return video.motion_indices(path, spec.num_frames, info=info, timeout_s=spec.timeout_s, frame_range=(first, stop))
    return first + video.uniform_indices(stop - first, spec.num_frames)


def clip_example(source: ClipSource, spec: ClipSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """Decodes one video in a single sequential pass and yields its (key, example).

    Only the kept frames are held (every-frame clips: each encoded as it is decoded). A second pass
    happens only when the container says nothing of its length (a counting pass first) or claims
    more frames than it has (the sample is taken again over the real length).

    A URL source is fetched into a local temporary file, deleted once the frames are decoded.
    With `source.start`/`end` the clip is cut out of the video: frames whose timestamps lie in
    [start, end) are sampled like a whole video's, the pass stops at `end`, and `num_frames` is
    the length of the cut (frames in the range); `frame_indices` stay indices into the video.
    A range that is empty, reversed or outside the video raises ValueError (a recorded skip).
    """
    if not files.exists(source.path):
        where = f" (named by {source.origin})" if source.origin else ""
        raise FileNotFoundError(f"{source.path}: video not found{where}")
    ranged = source.start is not None or source.end is not None
    if ranged:
        _check_times(source)
    with files.local_copy(source.path) as path:
        info = video.probe_video(path)
        if ranged:
            if info.fps <= 0:
                raise ValueError(f"{source.path}: the container reports no frame rate, so start/end seconds cannot be cut")
            first, stop = frame_range(source.start, source.end, info.fps)
            if stop <= first:
                raise ValueError(
                    f"{source.path}: [{source.start:g} s, {source.end:g} s) holds no frame at {info.fps:g} fps"
                )
            # An end up to one frame past the video is accepted (rounded timestamps): sample within the
            # container's count then; the pass still runs to `stop`, so the real length decides the checks.
            last = min(stop, info.num_frames) if info.num_frames > first else stop
            indices = _range_indices(path, info, spec, first, last)
            decoded = video.decode_frames(
                path, indices, size=(spec.height, spec.width), resize_mode=spec.resize_mode, timeout_s=spec.timeout_s,
                stop_at=stop, encode=_frame_encoder(spec),
            )
            _check_range_in_video(source, first, stop, decoded.num_decoded, info.fps)
            num_frames = min(stop, decoded.num_decoded) - first
        else:
            indices = sample_indices(path, info, spec)
            decoded = video.decode_frames(
                path, indices, size=(spec.height, spec.width), resize_mode=spec.resize_mode, timeout_s=spec.timeout_s,
                encode=_frame_encoder(spec),
            )
            indices, decoded = _resampled(path, info, spec, indices, decoded)
            num_frames = decoded.num_decoded
    kept = decoded.indices
    if decoded.encoded is not None:  # every frame, already encoded one by one as it was decoded
        length = len(decoded.encoded)
        stored, mask = decoded.encoded, np.ones((length,), np.uint8)
    else:
        length = spec.num_frames if spec.num_frames is not None else len(decoded.frames)
        clip, mask = frame_ops.pad_and_mask(decoded.frames, length, frame_shape=(spec.height, spec.width, 3))
        # Raw storage: the uint8 clip itself (TFDS's Tensor feature writes its bytes); else one image per frame.
        stored = clip if spec.image_format == "raw" else frame_ops.encode_frames(
            clip, image_format=spec.image_format, quality=spec.quality
        )
    frame_indices = np.full((length,), -1, np.int32)
    frame_indices[: len(kept)] = kept
    yield source.key, {
        **source.features,
        "video": stored,
        "mask": mask,
        "frame_indices": frame_indices,
        "num_frames": np.int32(num_frames),
        "fps": np.float32(decoded.fps),
    }
