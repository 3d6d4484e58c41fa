"""video_folder: your own labelled videos (class folders, UCF101/HMDB51 split lists, or a CSV with time ranges)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import clip_builder
from vidvol.builders.sources import files
from vidvol.builders.transforms import clips
from vidvol.core import features as vfeatures
from vidvol.core import tfds_api
from vidvol.core.names import shown
from vidvol.datasets.video_folder import layout

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class VideoFolderConfig(clip_builder.ClipConfig):
    """How to read manual_dir (split lists, CSV, hashed-split fractions and groups), plus the clip geometry (`ClipConfig`).

    split_set: None = the first set of split lists found (if any), "none" = ignore the lists and
      hash, 1/2/3/... = that set (`trainlist0k.txt`/`testlist0k.txt` or `*_test_splitk.txt`).
    csv_file: a CSV list to read (relative to manual_dir, or absolute); None = the one top-level
      CSV whose header names `path` and `label`, else class folders.
    train/validation/test_fraction: the hashed split when there are no lists or split column
      (sum 1; a split with 0 is left out).
    group_regex: videos whose file names give the same group (the first capture group, else the
      whole match) land in the same split, e.g. UCF101's `_g(\\d+)_`.
    """

    split_set: str | None = None
    csv_file: str | None = None
    train_fraction: float = 0.8
    validation_fraction: float = 0.1
    test_fraction: float = 0.1
    group_regex: str | None = None

    @property
    def layout_options(self) -> layout.Options:
        """The layout fields as `vidvol.datasets.video_folder.layout.Options`."""
        return layout.Options(
            split_set=self.split_set,
            csv_file=self.csv_file,
            fractions={"train": self.train_fraction, "validation": self.validation_fraction, "test": self.test_fraction},
            group_regex=self.group_regex,
        )


def _configs() -> list[VideoFolderConfig]:
    """One config per frame geometry; 20x64x64 first (the default, the only one built by default)."""
    return [VideoFolderConfig(name=g.name, description=f"{g.description}.", **clip_builder.geometry_fields(g)) for g in clip_builder.GEOMETRIES]


class Builder(clip_builder.ClipBuilder):
    """DatasetBuilder for a labelled video collection in manual_dir."""

    name = "video_folder"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = _configs()[:1]  # `tfds build video_folder` decodes every video once
    NAMED_CONFIGS = _configs()[1:]  # `tfds build video_folder/16x112x112` etc.
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
Point --manual_dir at your videos.
{layout.EXPECTED_LAYOUT}
Config fields (split_set, csv_file, *_fraction, group_regex, geometry) go in
`--config '{{"name": "mine", "split_set": "2"}}'` or `VideoFolderConfig(...)`; see the card."""

    def _info(self) -> tfds.core.DatasetInfo:
        # The label names (and start/end for a CSV with time ranges) come from manual_dir at build
        # time; a prepared dataset has them in its features.json and label.labels.txt.
        features = self._saved_features() or clip_builder.clip_features(self.builder_config, tfds.features.ClassLabel())
        return self.dataset_info_from_configs(features=features, supervised_keys=("video", "label"))

    def _saved_features(self) -> tfds.features.FeaturesDict | None:
        """The features a prepared dataset was written with (None before a build)."""
        path = self.data_path
        if (path / "dataset_info.json").exists() and (path / "features.json").exists():
            return vfeatures.with_fast_videos(tfds.features.FeatureConnector.from_config(path))
        return None

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        manual_dir = files.manual_dir(dl_manager)
        collection = layout.discover(manual_dir, self.builder_config.layout_options)
        extra = (
            {"start": tfds.features.Scalar(dtype=np.float32), "end": tfds.features.Scalar(dtype=np.float32)}
            if collection.has_times else {}
        )
        # Names that are not UTF-8 (class folders, files) are written as `shown` shows them: `caf\xe9`.
        label = tfds.features.ClassLabel(names=[shown(n) for n in collection.label_names])
        tfds_api.replace_features(self.info, clip_builder.clip_features(self.builder_config, label, extra))
        logger.info(
            "video_folder: %s; %d labels; %s", collection.layout, len(collection.label_names),
            ", ".join(f"{s}: {len(es)} videos" for s, es in collection.splits.items()),
        )
        return {split: self._generate_examples(entries) for split, entries in collection.splits.items()}

    def _generate_examples(self, entries):
        sources = []
        for e in entries:
            features = {"label": shown(e.label), "video_id": shown(e.video_id)}
            if e.start is not None:
                features.update(start=np.float32(e.start), end=np.float32(e.end))
            key = shown(e.key)
            sources.append(
                (key, clips.ClipSource(path=e.path, key=key, features=features, origin=e.origin, start=e.start, end=e.end))
            )
        return self._clip_examples(sources)
