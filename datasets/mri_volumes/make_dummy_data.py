"""Writes mri_volumes' dummy_data/: small real NIfTI files in the on-disk forms the builder reads, plus labels.csv.

    python -m vidvol.datasets.mri_volumes.make_dummy_data [OUT_DIR]

The helpers (`head_like`, `affine_for`, `write_nifti`) are reused by the tests to write their inputs.
Subjects are picked so the stable hash puts them into all three splits: train (sub-01, sub-02,
sub-03), validation (sub-20), test (sub-54).
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Sequence

import nibabel as nib
import numpy as np

DUMMY_DIR = os.path.join(os.path.dirname(__file__), "dummy_data")


def head_like(shape: Sequence[int], seed: int) -> np.ndarray:
    """Float32 anatomy-like volume: a soft ellipsoid with a smooth blob and mild noise, non-negative."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*(np.linspace(-1.0, 1.0, n, dtype=np.float32) for n in shape), indexing="ij")
    r2 = sum((g / 0.8) ** 2 for g in grids)
    head = 1.0 / (1.0 + np.exp((r2 - 1.0) * 10.0))
    centre = rng.uniform(-0.3, 0.3, size=3)
    blob = np.exp(-sum((g - c) ** 2 for g, c in zip(grids, centre)) / 0.08)
    data = 300.0 * head + 200.0 * blob * head + rng.normal(0.0, 5.0, size=tuple(shape))
    return np.clip(data, 0.0, None).astype(np.float32)


def affine_for(shape: Sequence[int], spacing: Sequence[float], orientation: str = "RAS") -> np.ndarray:
    """Centred voxel->world affine with voxel axes along R/L, A/P, S/I as `orientation` spells them."""
    signs = {"R": 1.0, "L": -1.0, "A": 1.0, "P": -1.0, "S": 1.0, "I": -1.0}
    axes = np.diag([signs[c] for c in orientation]) * np.asarray(spacing, dtype=np.float64)
    affine = np.eye(4)
    affine[:3, :3] = axes
    affine[:3, 3] = -axes @ ((np.asarray(shape[:3], dtype=np.float64) - 1) / 2)
    return affine


def write_nifti(
    path: str,
    data: np.ndarray,
    affine: np.ndarray,
    *,
    dtype: type | str = np.int16,
    nifti2: bool = False,
    big_endian: bool = False,
) -> str:
    """Saves `data` with nibabel as NIfTI-1/-2 in `dtype` (int16 gets scl_slope/scl_inter), returns path."""
    image_class = nib.Nifti2Image if nifti2 else nib.Nifti1Image
    header_class = nib.Nifti2Header if nifti2 else nib.Nifti1Header
    header = header_class(endianness=">" if big_endian else "<")
    image = image_class(np.asarray(data), affine, header=header)
    image.set_data_dtype(dtype)
    image.header.set_xyzt_units("mm", "sec")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    nib.save(image, path)
    return path


# (path, subject, label, shape, spacing, orientation, dtype, nifti2, big_endian)
DUMMY_FILES = (
    ("volumes/sub-01_T1w.nii.gz", "sub-01", "1", (12, 14, 10), (1.0, 1.2, 1.5), "RAS", "int16", False, False),
    ("volumes/sub-01_T2w.nii", "sub-01", "1", (12, 14, 10), (1.0, 1.2, 1.5), "LAS", "int16", False, False),
    ("volumes/sub-02_T1w.nii", "sub-02", "0", (10, 12, 9), (2.0, 2.0, 2.5), "LPS", "float32", True, True),
    ("volumes/sub-03_T1w.nii.gz", "sub-03", "10", (40, 12, 10), (0.8, 1.0, 1.0), "RAS", "int16", False, False),
    ("volumes/sub-20_bold.nii.gz", "sub-20", "2", (10, 10, 8, 3), (3.0, 3.0, 3.0), "RAS", "int16", False, False),
    ("volumes/sub-54_T1w.nii.gz", "sub-54", "0", (12, 12, 12), (1.0, 1.0, 1.0), "LAS", "float32", False, False),
)


def write_dummy_data(out_dir: str = DUMMY_DIR) -> list[dict[str, str]]:
    """Writes the dummy NIfTI files and labels.csv (header path,label,subject); returns the CSV rows."""
    rows = []
    for seed, (rel, subject, label, shape, spacing, orientation, dtype, nifti2, big_endian) in enumerate(DUMMY_FILES):
        data = head_like(shape[:3], seed)
        if len(shape) == 4:
            data = np.stack([data * (1.0 + 0.1 * t) for t in range(shape[3])], axis=-1)
        write_nifti(
            os.path.join(out_dir, *rel.split("/")), data, affine_for(shape, spacing, orientation),
            dtype=dtype, nifti2=nifti2, big_endian=big_endian,
        )
        rows.append({"path": rel, "label": label, "subject": subject})
    with open(os.path.join(out_dir, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "label", "subject"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


if __name__ == "__main__":
    write_dummy_data(sys.argv[1] if len(sys.argv) > 1 else DUMMY_DIR)
