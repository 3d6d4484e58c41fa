"""Video file -> fixed-length, masked clip example: decode once, sample, resize, pad, encode."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

import numpy as np

from vidvol.builders import files
from vidvol.builders import video


@dataclasses.dataclass(frozen=True)
class ClipSpec:
    """How a clip is cut from a video: frame count, geometry, sampling and storage."""

    num_frames: int | None  # None keeps every frame (variable length)
    height: int
    width: int
    resize_mode: str = "resize"  # "resize" (direct) or "crop" (aspect-preserving resize + center crop)
    sampling: str = "uniform"  # "uniform" or "motion"
    image_format: str = "jpeg"
    quality: int = 90
    timeout_s: float = 300.0

    def __post_init__(self):
        if self.sampling not in ("uniform", "motion"):
            raise ValueError(f"sampling must be 'uniform' or 'motion', got {self.sampling!r}")
        if self.resize_mode not in ("resize", "crop"):
            raise ValueError(f"resize_mode must be 'resize' or 'crop', got {self.resize_mode!r}")
        if self.image_format not in ("jpeg", "png"):
            raise ValueError(f"image_format must be 'jpeg' or 'png', got {self.image_format!r}")


@dataclasses.dataclass(frozen=True)
class Geometry:
    """A named clip geometry a dataset offers as configs: frame count, square size, resize, sampling, storage."""

    name: str  # config-name suffix, e.g. "20x64x64"
    num_frames: int | None  # None keeps every frame (variable length)
    size: int  # height = width
    resize_mode: str = "resize"
    sampling: str = "uniform"
    image_format: str = "jpeg"
    description: str = ""


@dataclasses.dataclass(frozen=True)
class ClipSource:
    """One video to turn into one example, with the feature values known before decoding."""

    path: str
    key: str
    features: Mapping[str, Any]
    origin: str = ""  # where the video was named (e.g. "split file X line N"), for error messages


def sample_indices(path: str, info: video.VideoInfo, spec: ClipSpec) -> np.ndarray | None:
    """Source frame indices to keep (None = all frames)."""
    if spec.num_frames is None or info.num_frames <= 0:
        return None
    if spec.sampling == "motion":
        return video.motion_indices(path, spec.num_frames, info=info, timeout_s=spec.timeout_s)
    return video.uniform_indices(info.num_frames, spec.num_frames)


def clip_example(source: ClipSource, spec: ClipSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """Decodes one video in a single sequential pass and yields its (key, example).

    A URL source is fetched into a local temporary file, deleted once the frames are decoded.
    """
    if not files.exists(source.path):
        where = f" (named by {source.origin})" if source.origin else ""
        raise FileNotFoundError(f"{source.path}: video not found{where}")
    with files.local_copy(source.path) as path:
        info = video.probe_video(path)
        indices = sample_indices(path, info, spec)
        decoded = video.decode_frames(
            path, indices, size=(spec.height, spec.width), resize_mode=spec.resize_mode, timeout_s=spec.timeout_s
        )
    frames, kept = decoded.frames, decoded.indices
    if spec.num_frames is not None and indices is None and len(frames) > spec.num_frames:
        # Container gave no frame count: sample after the pass (frames are already reduced in size).
        pick = video.uniform_indices(len(frames), spec.num_frames)
        frames, kept = frames[pick], kept[pick]
    length = spec.num_frames if spec.num_frames is not None else len(frames)
    clip, mask = video.pad_and_mask(frames, length, frame_shape=(spec.height, spec.width, 3))
    frame_indices = np.full((length,), -1, np.int32)
    frame_indices[: len(kept)] = kept
    yield source.key, {
        **source.features,
        "video": video.encode_frames(clip, image_format=spec.image_format, quality=spec.quality),
        "mask": mask,
        "frame_indices": frame_indices,
        "num_frames": np.int32(decoded.num_decoded),
        "fps": np.float32(decoded.fps),
    }
