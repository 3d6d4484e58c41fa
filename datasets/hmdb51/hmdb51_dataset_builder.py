"""HMDB51: 51 human action classes, official splits 1-3, fixed-length masked clips."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import beam_writer
from vidvol.builders import clips
from vidvol.builders import configs
from vidvol.builders import files
from vidvol.builders import video
from vidvol.datasets.hmdb51 import layout

_HOMEPAGE = "https://serre-lab.clps.brown.edu/resource/hmdb-a-large-human-motion-database/"


@dataclasses.dataclass
class Hmdb51Config(tfds.core.BuilderConfig):
    """Official split number and the frame geometry, sampling and storage of the clips."""

    split_number: int = 1
    num_frames: int | None = 20  # None: every frame (variable length, for read-time clip sampling)
    height: int = 64
    width: int = 64
    resize_mode: str = "resize"  # "resize" (direct) or "crop" (aspect-preserving resize + center crop)
    sampling: str = "uniform"  # "uniform" or "motion" (key frames with the largest frame difference)
    image_format: str = "jpeg"  # "jpeg" or "png" (lossless)
    jpeg_quality: int = 90
    max_shard_size: int = 128 * 2**20

    @property
    def clip_spec(self) -> clips.ClipSpec:
        """The clip recipe the Beam workers run."""
        return clips.ClipSpec(
            num_frames=self.num_frames, height=self.height, width=self.width, resize_mode=self.resize_mode,
            sampling=self.sampling, image_format=self.image_format, quality=self.jpeg_quality,
        )


_GEOMETRIES = (
    clips.Geometry("20x64x64", num_frames=20, size=64, description="20 evenly spaced frames, direct resize to 64x64 (default)"),
    clips.Geometry("20x64x64_crop", num_frames=20, size=64, resize_mode="crop",
                   description="20 evenly spaced frames, short side to 64 + center crop"),
    clips.Geometry("20x64x64_motion", num_frames=20, size=64, sampling="motion",
                   description="20 key frames with the largest frame difference, 64x64"),
    clips.Geometry("20x64x64_png", num_frames=20, size=64, image_format="png", description="as the default, stored lossless PNG"),
    clips.Geometry("16x112x112", num_frames=16, size=112, resize_mode="crop",
                   description="16 evenly spaced frames, short side to 112 + center crop"),
    clips.Geometry("16x224x224", num_frames=16, size=224, resize_mode="crop",
                   description="16 evenly spaced frames, short side to 224 + center crop"),
    clips.Geometry("all_112x112", num_frames=None, size=112, resize_mode="crop",
                   description="every frame, short side to 112 + center crop, variable length"),
)


def _configs() -> list[Hmdb51Config]:
    """Official splits 1-3 times the frame geometries; split 1, 20x64x64 first (the default, the only one built by default)."""
    return [
        Hmdb51Config(
            name=f"split{k}_{g.name}", description=f"Official split {k}: {g.description}.", split_number=k,
            num_frames=g.num_frames, height=g.size, width=g.size, resize_mode=g.resize_mode, sampling=g.sampling,
            image_format=g.image_format,
        )
        for k in (1, 2, 3)
        for g in _GEOMETRIES
    ]


class Builder(configs.NamedConfigs, beam_writer.StreamingBeamBuilder):
    """DatasetBuilder for HMDB51 (manual download)."""

    name = "hmdb51"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = _configs()[:1]  # `tfds build hmdb51` decodes every video once
    NAMED_CONFIGS = _configs()[1:]  # `tfds build hmdb51/split2_16x112x112` etc.
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
Download the videos (hmdb51_org.rar) and the three official splits (test_train_splits.rar) from
{_HOMEPAGE} and place them in manual_dir, extracted or not.
{layout.EXPECTED_LAYOUT}
Extracting the .rar archives uses `unar`/`unrar`/`bsdtar` when installed, else libarchive-c
(a vidvol dependency, over the system's libarchive13), which reads RAR5 and non-solid RAR3; for
solid RAR3 archives `apt-get install unar`. The extracted layout needs none."""

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.builder_config
        t = cfg.num_frames
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "video": tfds.features.Video((t, cfg.height, cfg.width, 3), encoding_format=cfg.image_format),
                    "mask": tfds.features.Tensor(shape=(t,), dtype=np.uint8),
                    "frame_indices": tfds.features.Tensor(shape=(t,), dtype=np.int32),
                    "label": tfds.features.ClassLabel(names_file=layout.CLASS_NAMES_FILE),
                    "video_id": tfds.features.Text(),
                    "num_frames": tfds.features.Scalar(dtype=np.int32),
                    "fps": tfds.features.Scalar(dtype=np.float32),
                }
            ),
            supervised_keys=("video", "label"),
            homepage=_HOMEPAGE,
        )

    def _estimated_example_bytes(self) -> int:
        cfg = self.builder_config
        frames = cfg.num_frames or 120
        per_frame = cfg.height * cfg.width * 3 // (2 if cfg.image_format == "png" else 10)
        return frames * per_frame

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        found = layout.find_layout(files.manual_dir(dl_manager), str(dl_manager.download_dir / "hmdb51_extracted"))
        entries = layout.split_entries(found, self.builder_config.split_number)
        layout.check_classes(entries, layout.locate_videos(found))
        return {
            subset: self._generate_examples([e for e in entries if e.subset == subset], found)
            for subset in ("train", "test")
        }

    def _generate_examples(self, entries, found):
        sources = [
            (
                entry.video,
                clips.ClipSource(
                    path=layout.video_path(found, entry),
                    key=entry.video,
                    features={"label": entry.class_name, "video_id": entry.video},
                    origin=f"{entry.split_file}:{entry.line}",
                ),
            )
            for entry in entries
        ]
        return beam_writer.ExamplesFromSources(
            sources, functools.partial(clips.clip_example, spec=self.builder_config.clip_spec),
            worker_setup=[video.single_threaded_opencv],
        )
