"""HMDB51: 51 human action classes, official splits 1-3, fixed-length masked clips."""

from __future__ import annotations

import dataclasses

import tensorflow_datasets as tfds

from vidvol.builders import clip_builder
from vidvol.builders.sources import files
from vidvol.builders.sources import labels
from vidvol.builders.transforms import clips
from vidvol.datasets.hmdb51 import layout

_HOMEPAGE = "https://serre-lab.clps.brown.edu/resource/hmdb-a-large-human-motion-database/"


@dataclasses.dataclass
class Hmdb51Config(clip_builder.ClipConfig):
    """Official split number, plus the frame geometry, sampling and storage of the clips (`ClipConfig`)."""

    split_number: int = 1


def _configs() -> list[Hmdb51Config]:
    """Official splits 1-3 times the frame geometries; split 1, 20x64x64 first (the default, the only one built by default)."""
    return [
        Hmdb51Config(
            name=f"split{k}_{g.name}", description=f"Official split {k}: {g.description}.", split_number=k,
            **clip_builder.geometry_fields(g),
        )
        for k in (1, 2, 3)
        for g in clip_builder.GEOMETRIES
    ]


class Builder(clip_builder.ClipBuilder):
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
        return self.dataset_info_from_configs(
            features=clip_builder.clip_features(self.builder_config, tfds.features.ClassLabel(names_file=layout.CLASS_NAMES_FILE)),
            supervised_keys=("video", "label"),
            homepage=_HOMEPAGE,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        found = layout.find_layout(files.manual_dir(dl_manager), str(dl_manager.download_dir / "hmdb51_extracted"))
        entries = layout.split_entries(found, self.builder_config.split_number)
        labels.check_classes(entries, layout.locate_videos(found))
        return {
            subset: self._generate_examples([e for e in entries if e.subset == subset], found)
            for subset in ("train", "test")
        }

    def _generate_examples(self, entries, found):
        return self._clip_examples(
            [
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
        )
