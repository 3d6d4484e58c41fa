"""Video file -> fixed-length, masked clip example: decode once, sample, resize, pad, encode.

Also what every video-clip dataset shares on the TFDS side (hmdb51, video_folder): the config
fields of a clip geometry (`ClipConfig`), the named geometries offered as configs (`GEOMETRIES`),
the feature set (`clip_features`) and the builder base (`ClipBuilder`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import configs
from vidvol.builders import dataset_builder
from vidvol.builders import files
from vidvol.builders import video
from vidvol.core import features as vfeatures


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
    """Source frame indices to keep (None = all frames)."""
    if spec.num_frames is None or info.num_frames <= 0:
        return None
    if spec.sampling == "motion":
        return video.motion_indices(path, spec.num_frames, info=info, timeout_s=spec.timeout_s)
    return video.uniform_indices(info.num_frames, spec.num_frames)


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
                stop_at=stop,
            )
            _check_range_in_video(source, first, stop, decoded.num_decoded, info.fps)
            num_frames = min(stop, decoded.num_decoded) - first
        else:
            indices = sample_indices(path, info, spec)
            decoded = video.decode_frames(
                path, indices, size=(spec.height, spec.width), resize_mode=spec.resize_mode, timeout_s=spec.timeout_s
            )
            num_frames = decoded.num_decoded
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
        # Raw storage: the uint8 clip itself (TFDS's Tensor feature writes its bytes); else one image per frame.
        "video": clip if spec.image_format == "raw" else video.encode_frames(
            clip, image_format=spec.image_format, quality=spec.quality
        ),
        "mask": mask,
        "frame_indices": frame_indices,
        "num_frames": np.int32(num_frames),
        "fps": np.float32(decoded.fps),
    }


# --------------------------------------------------------------------------------------------
# The TFDS side shared by video-clip datasets
# --------------------------------------------------------------------------------------------

GEOMETRIES: tuple[Geometry, ...] = (
    Geometry("20x64x64", num_frames=20, size=64, description="20 evenly spaced frames, direct resize to 64x64 (default)"),
    Geometry("20x64x64_crop", num_frames=20, size=64, resize_mode="crop",
             description="20 evenly spaced frames, short side to 64 + center crop"),
    Geometry("20x64x64_motion", num_frames=20, size=64, sampling="motion",
             description="20 key frames with the largest frame difference, 64x64"),
    Geometry("20x64x64_png", num_frames=20, size=64, image_format="png", description="as the default, stored lossless PNG"),
    Geometry("16x112x112", num_frames=16, size=112, resize_mode="crop",
             description="16 evenly spaced frames, short side to 112 + center crop"),
    Geometry("16x224x224", num_frames=16, size=224, resize_mode="crop",
             description="16 evenly spaced frames, short side to 224 + center crop"),
    Geometry("all_112x112", num_frames=None, size=112, resize_mode="crop",
             description="every frame, short side to 112 + center crop, variable length"),
    # Stored raw (uncompressed uint8): small clips read faster than their JPEG frames decode, for disk space.
    Geometry("20x64x64_raw", num_frames=20, size=64, image_format="raw",
             description="as the default, stored raw (uncompressed uint8, 240 KiB per clip): no decode at read time"),
    Geometry("16x112x112_raw", num_frames=16, size=112, resize_mode="crop", image_format="raw",
             description="as 16x112x112, stored raw (uncompressed uint8, 588 KiB per clip): no decode at read time"),
)


@dataclasses.dataclass
class ClipConfig(tfds.core.BuilderConfig):
    """The frame geometry, sampling and storage of a video-clip dataset's examples."""

    num_frames: int | None = 20  # None: every frame (variable length, for read-time clip sampling)
    height: int = 64
    width: int = 64
    resize_mode: str = "resize"  # "resize" (direct) or "crop" (aspect-preserving resize + center crop)
    sampling: str = "uniform"  # "uniform" or "motion" (key frames with the largest frame difference)
    image_format: str = "jpeg"  # "jpeg", "png" (lossless) or "raw" (uncompressed uint8; fixed num_frames only)
    jpeg_quality: int = 90
    max_shard_size: int = 128 * 2**20

    @property
    def clip_spec(self) -> ClipSpec:
        """The clip recipe the Beam workers run."""
        return ClipSpec(
            num_frames=self.num_frames, height=self.height, width=self.width, resize_mode=self.resize_mode,
            sampling=self.sampling, image_format=self.image_format, quality=self.jpeg_quality,
        )


def geometry_fields(geometry: Geometry) -> dict[str, Any]:
    """The `ClipConfig` keyword arguments of a named geometry."""
    return dict(
        num_frames=geometry.num_frames, height=geometry.size, width=geometry.size, resize_mode=geometry.resize_mode,
        sampling=geometry.sampling, image_format=geometry.image_format,
    )


def video_feature(config: ClipConfig) -> tfds.features.FeatureConnector:
    """The `video` feature: TFDS Video (one JPEG/PNG per frame), or a raw uint8 Tensor stored as one bytes value.

    Both read back as uint8 (T, H, W, 3) in `tfds.load`; the raw one decodes with a single
    `tf.io.decode_raw` per clip (per batch in `vidvol.load`).
    """
    shape = (config.num_frames, config.height, config.width, 3)
    if config.image_format == "raw":
        check_raw_length(config.image_format, config.num_frames)
        return tfds.features.Tensor(shape=shape, dtype=np.uint8, encoding=tfds.features.Encoding.BYTES)
    # TFDS's Video (same bytes, same frames out), decoded without a per-example tf.map_fn.
    return vfeatures.VideoFrames(shape, encoding_format=config.image_format)


def clip_features(
    config: ClipConfig, label: tfds.features.ClassLabel, extra: Mapping[str, tfds.features.FeatureConnector] | None = None
) -> tfds.features.FeaturesDict:
    """`video`, `mask`, `frame_indices`, `label`, `video_id`, `num_frames`, `fps` (+ `extra`) of a clip config."""
    t = config.num_frames
    return tfds.features.FeaturesDict(
        {
            "video": video_feature(config),
            "mask": tfds.features.Tensor(shape=(t,), dtype=np.uint8),
            "frame_indices": tfds.features.Tensor(shape=(t,), dtype=np.int32),
            "label": label,
            "video_id": tfds.features.Text(),
            "num_frames": tfds.features.Scalar(dtype=np.int32),
            "fps": tfds.features.Scalar(dtype=np.float32),
            **(extra or {}),
        }
    )


class ClipBuilder(configs.NamedConfigs, dataset_builder.StreamingBeamBuilder, skip_registration=True):
    """Base of the video-clip datasets: a `ClipConfig` builder whose sources are `ClipSource`s.

    A subclass provides `_info` (usually through `clip_features`) and `_split_generators`, whose
    splits are `self._clip_examples(sources)`.
    """

    def _estimated_example_bytes(self) -> int:
        cfg = self.builder_config
        frames = cfg.num_frames or 120
        per_frame = cfg.height * cfg.width * 3 // {"png": 2, "raw": 1}.get(cfg.image_format, 10)
        return frames * per_frame

    def _clip_examples(self, sources: Sequence[tuple[str, ClipSource]]) -> dataset_builder.ExamplesFromSources:
        """`(source id, ClipSource)` pairs -> the split's examples, one video decoded per Beam element."""
        return dataset_builder.ExamplesFromSources(
            sources, functools.partial(clip_example, spec=self.builder_config.clip_spec),
            worker_setup=[video.single_threaded_opencv],
        )
