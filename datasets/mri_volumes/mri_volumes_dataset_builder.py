"""mri_volumes: NIfTI MRI scans listed in labels.csv -> fixed-shape, masked float32 volumes with a class label."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow_datasets as tfds

from vidvol.builders import configs
from vidvol.builders import dataset_builder
from vidvol.builders import isolation
from vidvol.builders.sources import files
from vidvol.builders.sources import labels
from vidvol.builders.transforms import volume_examples
from vidvol.core import features as vidvol_features
from vidvol.datasets.mri_volumes import layout

@dataclasses.dataclass
class MriVolumesConfig(tfds.core.BuilderConfig):
    """Output grid, voxel size, 4-D volume index, intensity normalization and where the labels are."""

    spatial_size: tuple[int, int, int] = (128, 128, 128)
    pixdim: tuple[float, float, float] | None = None  # mm; None keeps each file's own voxel size
    volume_index: int = 0  # which volume of a 4-D file
    normalization: str = "none"  # "none", "zscore" or "minmax" (statistics inside the mask)
    fit: str = "crop"  # "crop": voxel size kept, centre crop/pad; "whole": whole field of view, isotropic, padded
    # The most voxel bytes a scan's header may claim (up to the volume read; 3-D: shape x itemsize): larger is a skip.
    max_source_bytes: int = volume_examples.DEFAULT_MAX_SOURCE_BYTES
    label_column: str = layout.DEFAULT_LABEL_COLUMN
    label_names: tuple[str, ...] | None = None  # None: the CSV's distinct labels, sorted

    def __post_init__(self):
        self.volume_spec  # noqa: B018  (fails early on a bad shape, pixdim, index or normalization)
        if not str(self.label_column).strip():
            raise ValueError(f"config {self.name!r}: label_column must name a CSV column, got {self.label_column!r}")

    @property
    def volume_spec(self) -> volume_examples.VolumeSpec:
        """The per-volume recipe the Beam workers run (validates the parameters)."""
        return volume_examples.VolumeSpec(
            spatial_size=tuple(self.spatial_size), pixdim=self.pixdim,
            volume_index=self.volume_index, normalization=self.normalization, fit=self.fit,
            max_source_bytes=self.max_source_bytes,
        )


class Builder(configs.NamedConfigs, dataset_builder.StreamingBeamBuilder):
    """DatasetBuilder for NIfTI MRI volumes with per-scan labels (manual data)."""

    name = "mri_volumes"
    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {
        "1.0.0": "Initial release.",
        "2.0.0": "Same tensors, compact storage: volume as int16 when exact (WholeNumberVolume), mask as its box "
                 "corners (BoxMask): fewer bytes per example, so reads move and parse less.",
    }
    BUILDER_CONFIGS = [  # `tfds build mri_volumes` reads every scan once
        MriVolumesConfig(name="128", description="128x128x128 voxels at each file's own voxel size (default)."),
    ]
    NAMED_CONFIGS = [  # by name: `tfds build mri_volumes/small_32`
        MriVolumesConfig(name="small_32", spatial_size=(32, 32, 32), description="32x32x32 voxels, for quick trials."),
        MriVolumesConfig(name="128_whole", fit="whole",
                         description="128x128x128 voxels holding each scan's whole field of view: resampled "
                                     "isotropically so its longest axis fits, the rest padded and masked."),
        MriVolumesConfig(name="small_32_whole", spatial_size=(32, 32, 32), fit="whole",
                         description="32x32x32 voxels holding each scan's whole field of view, for quick trials."),
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
{layout.EXPECTED_LAYOUT}
Another label column: --config '{{"name": "128_dx", "label_column": "diagnosis"}}' (any MriVolumesConfig field)."""

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.builder_config
        shape = tuple(int(n) for n in cfg.spatial_size)
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    "volume": vidvol_features.WholeNumberVolume(shape),  # float32; int16 on disk when exact
                    "mask": vidvol_features.BoxMask(shape),  # uint8 0/1; a crop/pad box, stored as its corners
                    # Names come from the CSV in _split_generators unless the config fixes them.
                    "label": tfds.features.ClassLabel(names=list(cfg.label_names) if cfg.label_names else None),
                    "path": tfds.features.Text(),
                    "subject": tfds.features.Text(),
                    "original_shape": tfds.features.Tensor(shape=(3,), dtype=np.int32),
                    "spacing": tfds.features.Tensor(shape=(3,), dtype=np.float32),
                    "affine": tfds.features.Tensor(shape=(4, 4), dtype=np.float32),
                }
            ),
            supervised_keys=(("volume", "mask"), "label"),
        )

    def _estimated_example_bytes(self) -> int:
        return 4 * int(np.prod(self.builder_config.spatial_size)) + 4096  # float32 volumes at worst

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        manual_dir = files.manual_dir(dl_manager)
        rows = layout.read_labels_csv(files.join(manual_dir, layout.LABELS_CSV), label_column=cfg.label_column)
        if cfg.label_names:
            names = list(cfg.label_names)
            layout.check_labels(rows, names)
        else:
            names = labels.label_names(row.label for row in rows)
            self.info.features["label"].names = names  # saved as label.labels.txt, reloaded with the dataset
        # A split with no row is still returned, with why: the build leaves it unregistered and says why.
        return {
            split: self._generate_examples(split_rows, manual_dir, names, empty_reason=why)
            for split, (split_rows, why) in layout.splits_with_reasons(rows).items()
        }

    def _generate_examples(self, rows: list[layout.Row], manual_dir: str, names: list[str], empty_reason: str = ""):
        index = {name: i for i, name in enumerate(names)}
        sources = []
        for row in rows:
            key = layout.example_key(manual_dir, row)
            features = {"label": index[row.label], "path": layout.listed_path(manual_dir, row), "subject": row.subject}
            sources.append(
                (key, volume_examples.VolumeSource(layout.local_path(manual_dir, row), key, features, row.origin))
            )
        # Read in a child process the worker can lose (`isolation.InChild`), as videos are: a read stalled in the
        # kernel (a hung NFS mount) meets the source's deadline (VIDVOL_DECODE_TIMEOUT_S) and is one skip, and a
        # decoder that crashes (zlib, nibabel, scipy) takes only its source.
        return dataset_builder.ExamplesFromSources(
            sources,
            isolation.InChild(functools.partial(volume_examples.volume_example, spec=self.builder_config.volume_spec)),
            empty_reason=empty_reason,
        )
