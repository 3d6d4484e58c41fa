"""Test helper: a hostile MRI corpus written at test time (nibabel headers, real gzip streams), with what each must become.

`write_corpus(folder)` writes good scans beside broken and lying ones and returns, per file, either
an example or the phrases its skip reason must hold (the claimed and the actual numbers where the
issue is a claim). Small shapes keep it fast; the large inputs are gzip streams of zeros (repeated
gzip members), so a 2 GiB claim costs a 2 MB file.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct

import nibabel as nib
import numpy as np

from vidvol.datasets.mri_volumes import make_dummy_data as dummy

MIB = 2**20
BOMB_SHAPE = (20000, 20000, 20000)  # int16: 16e12 voxel bytes
ZERO_MEMBER = gzip.compress(b"\0" * (8 * MIB), compresslevel=9)  # one gzip member inflating to 8 MiB


@dataclasses.dataclass(frozen=True)
class Case:
    """One file of the corpus: an example, or a skip whose reason holds every phrase."""

    name: str
    example: bool
    phrases: tuple[str, ...] = ()
    nonfinite: int = 0  # NaN/Inf voxels reported for a written example


def header(shape, dtype=np.int16, affine=None) -> nib.Nifti1Header:
    """A single-file NIfTI-1 header (voxels at byte 352) for `shape` and `dtype`."""
    hdr = nib.Nifti1Header()
    hdr.set_data_shape(shape)
    hdr.set_data_dtype(dtype)
    hdr.set_sform(np.eye(4) if affine is None else affine, code="scanner")
    hdr.set_data_offset(352)
    return hdr


def header_bytes(shape, dtype=np.int16) -> bytes:
    """Header plus the 4-byte extension flag: what precedes the voxels."""
    return header(shape, dtype).binaryblock + b"\0" * 4


def write_streamed(path: str, shape, *, compresslevel: int = 1) -> str:
    """An int16 .nii.gz of `shape` (a block-patterned ball in zeros) written plane by plane, never held whole."""
    nx, ny, nz = shape
    i = np.arange(nx, dtype=np.float32)[:, None]
    j = np.arange(ny, dtype=np.float32)[None, :]
    centre, radius = (np.asarray(shape, np.float32) - 1) / 2, 0.45 * np.asarray(shape, np.float32)
    with gzip.open(path, "wb", compresslevel=compresslevel) as f:
        f.write(header_bytes(shape))
        for k in range(nz):
            r = ((i - centre[0]) / radius[0]) ** 2 + ((j - centre[1]) / radius[1]) ** 2 + ((k - centre[2]) / radius[2]) ** 2
            plane = np.where(r <= 1, 100 + (i.astype(np.int16) // 16 + k // 16) % 4 * 25, 0).astype(np.int16)
            f.write(plane.T.tobytes())  # F order
    return path


def write_corpus(folder: str, *, max_source_bytes: int, big_shape=(512, 512, 512)) -> list[Case]:
    """Writes the corpus into folder; `max_source_bytes` is the limit the build will use (the gzip bomb exceeds it)."""
    os.makedirs(folder, exist_ok=True)
    path = lambda name: os.path.join(folder, name)
    cases = []

    # Good scans.
    dummy.write_nifti(path("good_ras.nii.gz"), dummy.head_like((20, 20, 20), 1), dummy.affine_for((20, 20, 20), (1, 1, 1)))
    dummy.write_nifti(path("good_lps.nii"), dummy.head_like((18, 22, 20), 2), dummy.affine_for((18, 22, 20), (1, 1, 1.5), "LPS"),
                      dtype=np.float32)
    four = np.stack([dummy.head_like((12, 12, 12), s) for s in range(3)], axis=-1).astype(np.float32)
    nib.save(nib.Nifti1Image(four, np.eye(4)), path("four_d.nii.gz"))
    nan = np.full((16, 16, 16), 5.0, np.float32)
    nan[8, 8, 8], nan[7, 9, 8], nan[9, 7, 7] = np.nan, np.inf, -np.inf
    nib.save(nib.Nifti1Image(nan, np.eye(4)), path("nan.nii.gz"))
    write_streamed(path("big.nii.gz"), big_shape)
    small = dummy.head_like((16, 16, 16), 3).astype(np.float32)
    with open(path("long_stream.nii.gz"), "wb") as f:  # a true claim, then 512 MiB more that must never be inflated
        f.write(gzip.compress(header_bytes(small.shape, np.float32) + small.tobytes(order="F")))
        f.write(ZERO_MEMBER * 64)
    cases += [Case("good_ras.nii.gz", True), Case("good_lps.nii", True), Case("four_d.nii.gz", True),
              Case("nan.nii.gz", True, nonfinite=3), Case("big.nii.gz", True), Case("long_stream.nii.gz", True)]

    # Claims the file cannot hold, or over the limit: the reason names both numbers.
    bomb = header_bytes(BOMB_SHAPE) + b"\0" * 1024
    with open(path("header_bomb.nii"), "wb") as f:
        f.write(bomb)
    claim = 20000**3 * 2
    cases.append(Case("header_bomb.nii", False, (str(claim + 352), str(len(bomb)), "truncated, or a corrupt header")))
    with open(path("header_bomb.nii.gz"), "wb") as f:
        f.write(gzip.compress(bomb))
    cases.append(Case("header_bomb.nii.gz", False, (str(claim), str(max_source_bytes), "max_source_bytes")))
    bomb_shape = (1024, 1024, 1024)  # 2 GiB of int16 zeros, really in the stream
    with open(path("gzip_bomb.nii.gz"), "wb") as f:
        f.write(gzip.compress(header_bytes(bomb_shape)))
        f.write(ZERO_MEMBER * 256)
    cases.append(Case("gzip_bomb.nii.gz", False, (str(2 * 1024**3), str(max_source_bytes), "max_source_bytes")))
    cut = header_bytes((64, 64, 64), np.float32) + np.ones(64**3, np.float32).tobytes()[: 64**3 * 2]
    with open(path("truncated.nii"), "wb") as f:
        f.write(cut)
    cases.append(Case("truncated.nii", False, (str(352 + 4 * 64**3), str(len(cut)), "truncated")))

    # Broken bytes.
    whole = open(path("good_ras.nii.gz"), "rb").read()
    with open(path("truncated.nii.gz"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    with open(path("corrupt.nii.gz"), "wb") as f:
        f.write(whole[:10] + bytes(range(256)) * 8)
    open(path("empty.nii"), "wb").close()
    with open(path("notes.nii"), "w", encoding="utf-8") as f:
        f.write("subject,notes\nsub-01,not an image\n" * 20)
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4, 2, 2), np.float32), np.eye(4)), path("five_d.nii"))
    bad_type = bytearray(header((8, 8, 8)).binaryblock)
    bad_type[70:72] = struct.pack("<h", 9999)  # datatype code nibabel does not know
    with open(path("bad_dtype.nii"), "wb") as f:
        f.write(bytes(bad_type) + b"\0" * (4 + 1024))
    ext = header((8, 8, 8))
    ext.set_data_offset(352 + 16)
    with open(path("extension_bomb.nii.gz"), "wb") as f:  # one extension claiming 2 GiB
        f.write(gzip.compress(ext.binaryblock + b"\1\0\0\0" + struct.pack("<ii", 2**31 - 16, 4) + b"\0" * 1032))
    nan_affine = np.eye(4)
    nan_affine[0, 0] = np.nan
    with open(path("nan_affine.nii"), "wb") as f:
        f.write(header((8, 8, 8), affine=nan_affine).binaryblock + b"\0" * (4 + 1024))
    cases += [Case("truncated.nii.gz", False, ("truncated or corrupt",)),
              Case("corrupt.nii.gz", False, ("not a readable NIfTI",)),
              Case("empty.nii", False, ("Empty file",)),
              Case("notes.nii", False, ("not a readable NIfTI",)),
              Case("five_d.nii", False, ("expected a 3-D or 4-D image, got 5-D",)),
              Case("bad_dtype.nii", False, ("not a readable NIfTI", "9999")),
              Case("extension_bomb.nii.gz", False, ("not a readable NIfTI", "extension")),
              Case("nan_affine.nii", False, ("affine is singular or not finite",))]
    return cases
