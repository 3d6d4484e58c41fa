"""One NIfTI path + feature values -> one fixed-shape, masked volume example (Beam example function)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from vidvol.builders import example_io
from vidvol.builders.sources import files
from vidvol.builders.transforms import volume

DEFAULT_MAX_SOURCE_BYTES = volume.DEFAULT_MAX_SOURCE_BYTES  # 4 GiB


@dataclasses.dataclass(frozen=True)
class VolumeSpec:
    """How every volume is brought to one grid: output shape, voxel size, 4-D index, intensity scaling."""

    spatial_size: tuple[int, int, int] = (128, 128, 128)
    pixdim: tuple[float, float, float] | None = None  # None keeps each file's own voxel size
    volume_index: int = 0  # which volume of a 4-D file
    normalization: str = "none"  # "none", "zscore" or "minmax" (statistics inside the mask)
    fit: str = "crop"  # "crop": keep the voxel size, centre-crop/pad; "whole": the whole field of view, padded
    # The most voxel bytes a header may claim (up to the volume read); a larger claim is a skip, unread.
    max_source_bytes: int = volume.DEFAULT_MAX_SOURCE_BYTES

    def __post_init__(self):
        size = tuple(int(n) for n in self.spatial_size)
        if len(size) != 3 or min(size) < 1:
            raise ValueError(f"spatial_size must be 3 positive ints, got {self.spatial_size!r}")
        object.__setattr__(self, "spatial_size", size)
        if self.pixdim is not None:
            pixdim = tuple(float(v) for v in self.pixdim)
            if len(pixdim) != 3 or not all(np.isfinite(pixdim)) or min(pixdim) <= 0:
                raise ValueError(f"pixdim must be None or 3 positive numbers (mm), got {self.pixdim!r}")
            object.__setattr__(self, "pixdim", pixdim)
        if int(self.volume_index) < 0:
            raise ValueError(f"volume_index must be >= 0, got {self.volume_index}")
        if self.fit not in volume.FIT_MODES:
            raise ValueError(f"fit must be one of {volume.FIT_MODES}, got {self.fit!r}")
        if self.fit == "whole" and self.pixdim is not None:
            raise ValueError("fit='whole' chooses each scan's voxel size (the whole field of view in the grid): "
                             "leave pixdim unset, or use fit='crop' with pixdim")
        if isinstance(self.max_source_bytes, bool) or int(self.max_source_bytes) != self.max_source_bytes \
                or self.max_source_bytes < 1:
            raise ValueError(f"max_source_bytes must be a positive whole number of bytes, got {self.max_source_bytes!r}")
        object.__setattr__(self, "max_source_bytes", int(self.max_source_bytes))
        if self.normalization not in volume.NORMALIZATION_MODES:
            raise ValueError(
                f"normalization must be one of {volume.NORMALIZATION_MODES}, got {self.normalization!r}"
            )


@dataclasses.dataclass(frozen=True)
class VolumeSource:
    """One volume file to turn into one example, with the feature values known before reading it."""

    path: str  # file to read: a local path or a URL (fetched into a temporary local file)
    key: str  # example key; never an absolute local path
    features: Mapping[str, Any]  # e.g. label, path as listed, subject
    origin: str = ""  # where the file was named (e.g. "labels.csv:12"), for error messages


def nonfinite_reason(num_nonfinite: int) -> str:
    """Skip-report reason for NaN/Inf voxels that were set to 0 inside a written example."""
    return f"{num_nonfinite} non-finite voxels set to 0"


def volume_features(cropped: volume.CroppedVolume, metadata: volume.Volume) -> dict[str, np.ndarray]:
    """Feature arrays of one preprocessed volume: data, mask, output affine, its voxel size, file shape."""
    return {
        "volume": np.ascontiguousarray(cropped.data, dtype=np.float32),
        "mask": np.ascontiguousarray(cropped.mask, dtype=np.uint8),
        "affine": np.asarray(cropped.affine, dtype=np.float32),
        "spacing": np.asarray(metadata.spacing, dtype=np.float32),
        "original_shape": np.asarray(metadata.original_shape, dtype=np.int32),
    }


def volume_example(
    source: VolumeSource, spec: VolumeSpec
) -> Iterator[tuple[str, dict[str, Any]] | example_io.Skip]:
    """Reads one file through `volume.preprocess_volume` and yields its (key, example); NaN/Inf are reported.

    A URL source is fetched into a local temporary file, deleted once the volume is read.
    """
    if not files.exists(source.path):
        where = f" (listed at {source.origin})" if source.origin else ""
        raise FileNotFoundError(f"{source.path}: volume file not found{where}")
    with files.local_copy(source.path) as path:
        cropped, metadata = volume.preprocess_volume(
            path,
            spatial_size=spec.spatial_size,
            pixdim=spec.pixdim,
            volume_index=spec.volume_index,
            normalization=spec.normalization,
            fit=spec.fit,
            max_source_bytes=spec.max_source_bytes,
        )
    if metadata.num_nonfinite:
        yield example_io.Skip(source=source.key, reason=nonfinite_reason(metadata.num_nonfinite), example=source.key)
    example = {**source.features, **volume_features(cropped, metadata)}
    del cropped
    yield source.key, example

