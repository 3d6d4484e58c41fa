"""TFDS's stock video storage as a peer: a tiny `GeneratorBasedBuilder` whose examples are `tfds.features.Video`."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import tensorflow_datasets as tfds

from vidvol.testing import samples

from common import inputs
from peers import jobs as peer_jobs

NAME = "vidvol_bench_stock_video"
FRAMES, SIZE = 20, 64
CONFIG = f"{FRAMES}x{SIZE}x{SIZE}"


class VidvolBenchStockVideo(tfds.core.GeneratorBasedBuilder):
    """hmdb51's split-1 train clips as TFDS stock `Video` features (JPEG frames), label and video id."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=CONFIG, description=f"{FRAMES} evenly spaced frames at {SIZE}x{SIZE}")]
    MANUAL_DOWNLOAD_INSTRUCTIONS = "manual_dir: an extracted HMDB51 layout (benchmarks/common/inputs.py writes one)."

    def _info(self) -> tfds.core.DatasetInfo:
        # DatasetInfo itself: dataset_info_from_configs looks for metadata files in a package, and this is a script.
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "video": tfds.features.Video(shape=(FRAMES, SIZE, SIZE, 3), encoding_format="jpeg"),
            "label": tfds.features.ClassLabel(names=list(samples.HMDB51_CLASSES)),
            "video_id": tfds.features.Text(),
        }), supervised_keys=("video", "label"))

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Any]:
        return {"train": self._generate_examples(os.fspath(dl_manager.manual_dir))}

    def _generate_examples(self, root: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for path, class_name in inputs.hmdb51_split_videos(root, 1, "train"):
            name = os.path.basename(path)
            yield name, {"video": peer_jobs.clip_uint8("opencv", path, FRAMES, SIZE), "label": class_name,
                         "video_id": name}


def build(manual_dir: str, data_dir: str) -> dict[str, Any]:
    """Prepares the dataset under data_dir from an HMDB51 layout; returns its name, examples and build seconds."""
    start = time.perf_counter()
    builder = tfds.builder(f"{NAME}/{CONFIG}", data_dir=data_dir)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    return {"name": NAME, "config": CONFIG, "data_dir": data_dir, "build_s": round(time.perf_counter() - start, 1),
            "examples": builder.info.splits["train"].num_examples}


def first_clip(data_dir: str) -> tuple[str, Any]:
    """(video id, uint8 clip) of the first example plain `tfds.load` gives (unshuffled), for the frame check."""
    ds = tfds.load(f"{NAME}/{CONFIG}", split="train", data_dir=data_dir, download=False)
    example = next(iter(tfds.as_numpy(ds.take(1))))
    return example["video_id"].decode(), example["video"]
