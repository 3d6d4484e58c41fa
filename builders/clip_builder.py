"""The TFDS side every video-clip dataset shares: configs, named geometries, features, the builder base.

The video-clip datasets are hmdb51 and video_folder.

`ClipConfig` holds the fields of a clip geometry (frame count, size, resize, sampling, storage),
`GEOMETRIES` the named ones offered as configs, `clip_features` the feature set, and
`ClipBuilder` the builder base whose splits run `vidvol.builders.transforms.clips.clip_example`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import configs
from vidvol.builders import dataset_builder
from vidvol.builders import isolation
from vidvol.builders.transforms import clips
from vidvol.builders.transforms import video
from vidvol.core import features as vfeatures


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
    def clip_spec(self) -> clips.ClipSpec:
        """The clip recipe the Beam workers run."""
        return clips.ClipSpec(
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
        clips.check_raw_length(config.image_format, config.num_frames)
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
    """Base of the video-clip datasets: a `ClipConfig` builder whose sources are `clips.ClipSource`s.

    A subclass provides `_info` (usually through `clip_features`) and `_split_generators`, whose
    splits are `self._clip_examples(sources)`.
    """

    def _estimated_example_bytes(self) -> int:
        cfg = self.builder_config
        frames = cfg.num_frames or 120
        per_frame = cfg.height * cfg.width * 3 // {"png": 2, "raw": 1}.get(cfg.image_format, 10)
        return frames * per_frame

    def _clip_examples(self, sources: Sequence[tuple[str, clips.ClipSource]]) -> dataset_builder.ExamplesFromSources:
        """`(source id, clips.ClipSource)` pairs -> the split's examples, one video decoded per Beam element.

        Each video is decoded in a child process the worker can lose (`isolation.InChild`): a decoder
        that crashes on a damaged file is that file's skip, not a dead build.
        """
        return dataset_builder.ExamplesFromSources(
            sources,
            isolation.InChild(
                functools.partial(clips.clip_example, spec=self.builder_config.clip_spec),
                setup=[video.single_threaded_opencv],
            ),
            worker_setup=[video.single_threaded_opencv],
        )
