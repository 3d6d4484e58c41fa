"""fire_hrr: fire-test recordings with per-frame heat release rate (kW), fixed-length masked windows."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import configs
from vidvol.builders import dataset_builder
from vidvol.builders import isolation
from vidvol.builders.sources import files
from vidvol.builders.transforms import frame_series
from vidvol.builders.transforms import video
from vidvol.core import features as vfeatures
from vidvol.core.names import shown
from vidvol.datasets.fire_hrr import layout


@dataclasses.dataclass
class FireHrrConfig(tfds.core.BuilderConfig):
    """Window length, frame size (direct resize) and frame storage of the examples."""

    max_len: int = 161
    height: int = 540
    width: int = 960
    image_format: str = "jpeg"  # "jpeg" or "png" (lossless)
    jpeg_quality: int = 90
    max_shard_size: int = 256 * 2**20  # bytes; `tfds build --max_shard_size_mb` overrides it

    @property
    def window_spec(self) -> frame_series.WindowSpec:
        """The window recipe the Beam workers run."""
        return frame_series.WindowSpec(
            max_len=self.max_len, height=self.height, width=self.width, image_format=self.image_format,
            quality=self.jpeg_quality, resize_mode="resize", target_name="hrr",
        )


def _configs() -> list[FireHrrConfig]:
    """Full resolution first (the default), then direct-resize reductions and a lossless variant."""
    return [
        FireHrrConfig(name="full_161x540x960", description="161-frame windows at full 540x960 resolution, JPEG q90 (default)."),
        FireHrrConfig(name="161x270x480", height=270, width=480, description="161-frame windows, frames directly resized to 270x480, JPEG q90."),
        FireHrrConfig(name="161x135x240", height=135, width=240, description="161-frame windows, frames directly resized to 135x240, JPEG q90."),
        FireHrrConfig(
            name="161x135x240_png", height=135, width=240, image_format="png",
            description="161-frame windows, frames directly resized to 135x240, stored lossless PNG.",
        ),
    ]


class Builder(configs.NamedConfigs, dataset_builder.StreamingBeamBuilder):
    """DatasetBuilder for fire-test videos/frames with heat release rate (manual download)."""

    name = "fire_hrr"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = _configs()[:1]  # `tfds build fire_hrr` decodes every recording once
    NAMED_CONFIGS = _configs()[1:]  # `tfds build fire_hrr/161x135x240` etc.
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
The fire-test recordings and their calorimetry (heat release rate) are user-supplied.
{layout.EXPECTED_LAYOUT}"""

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.builder_config
        t = cfg.max_len
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "video": vfeatures.VideoFrames((t, cfg.height, cfg.width, 3), encoding_format=cfg.image_format),
                    "mask": tfds.features.Tensor(shape=(t,), dtype=np.uint8),
                    "hrr": tfds.features.Tensor(shape=(t,), dtype=np.float32),
                    "time": tfds.features.Tensor(shape=(t,), dtype=np.float32),
                    "experiment": tfds.features.Text(),
                    "window": tfds.features.Scalar(dtype=np.int32),
                    "num_frames": tfds.features.Scalar(dtype=np.int32),
                }
            ),
            supervised_keys=(("video", "mask"), "hrr"),
        )

    def _estimated_example_bytes(self) -> int:
        cfg = self.builder_config
        return cfg.max_len * cfg.height * cfg.width * 3 // (2 if cfg.image_format == "png" else 10)

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        found = layout.find_layout(files.manual_dir(dl_manager))
        return {split: self._generate_examples(experiments) for split, experiments in found.splits().items()}

    def _generate_examples(self, experiments):
        # Names as written (`caf\xe9` for a file name that is not UTF-8); each experiment decoded in a
        # child process the worker can lose (`isolation.InChild`): a decoder crash is that experiment's skip.
        sources = [(shown(e.name), _source(e)) for e in experiments]
        return dataset_builder.ExamplesFromSources(
            sources,
            isolation.InChild(
                functools.partial(frame_series.series_example, spec=self.builder_config.window_spec),
                setup=[video.single_threaded_opencv],
            ),
            worker_setup=[video.single_threaded_opencv],
        )


def _source(e: layout.FrameExperiment | layout.VideoExperiment):
    """The stage's source record for one experiment."""
    name = shown(e.name)
    if isinstance(e, layout.VideoExperiment):
        return frame_series.VideoSeriesSource(
            key=name, video=e.video, series_times=e.time, series_values=e.hrr, name=shown(e.video_name),
            series_origin=e.series_path or f"{name}.csv", features={"experiment": name},
        )
    return frame_series.FrameSeriesSource(
        key=name, frames=e.paths, targets=e.hrr, times=e.time, names=tuple(shown(f) for f in e.frames),
        features={"experiment": name},
    )
