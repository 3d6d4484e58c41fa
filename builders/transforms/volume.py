"""Dataset-agnostic NIfTI volume stages: load, canonical RAS, resample, crop/pad with mask, normalize.

Each stage is a small pure function on a :class:`Volume` (or plain arrays) so the mri_volumes builder
only declares parameters. Conventions (nibabel's): an affine maps voxel *centres* ``(i, j, k)`` to
world millimetres in RAS+; data axes are the affine's voxel axes, so a (D, H, W) array after
:func:`reorient_to_ras` runs left->right, posterior->anterior, inferior->superior.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import zlib
from collections.abc import Sequence

import nibabel as nib
import numpy as np
from nibabel.arrayproxy import ArrayProxy
from nibabel.filebasedimages import ImageFileError
from nibabel.spatialimages import SpatialImage
from scipy import ndimage

from vidvol.builders.sources import files

logger = logging.getLogger(__name__)

NORMALIZATION_MODES = ("none", "zscore", "minmax")
# "crop": keep the voxel size, centre-crop/pad; "whole": shrink each scan isotropically until it fits, pad the rest.
FIT_MODES = ("crop", "whole")

# Exceptions nibabel (and gzip/zlib underneath it) raises for unreadable, truncated or foreign bytes.
_READ_ERRORS = (ImageFileError, EOFError, zlib.error, OSError, ValueError)


class VolumeError(ValueError):
    """A volume file that cannot become an example; the message names the path and the problem."""


@dataclasses.dataclass
class Volume:
    """One 3-D intensity volume with its voxel->world geometry."""

    data: np.ndarray  # float32, 3-D
    affine: np.ndarray  # (4, 4) float64, voxel centre -> world (RAS mm)
    spacing: np.ndarray  # (3,) float32, voxel size in mm along the data axes
    original_shape: tuple[int, int, int]  # spatial shape in the file, before any transform
    num_nonfinite: int = 0  # NaN/Inf voxels replaced by 0


@dataclasses.dataclass
class CroppedVolume:
    """A fixed-shape volume, its validity mask and the affine of the output grid."""

    data: np.ndarray  # float32, spatial_size
    mask: np.ndarray  # uint8, spatial_size: 1 = voxel from the image, 0 = padding
    affine: np.ndarray  # (4, 4) float64, output voxel -> world (RAS mm)


def _voxel_sizes(affine: np.ndarray) -> np.ndarray:
    """Voxel size along each voxel axis (column norms of the affine's 3x3 part), float32."""
    return np.sqrt(np.sum(np.square(affine[:3, :3]), axis=0)).astype(np.float32)


def _read_float32(dataobj: object, slicer: tuple) -> np.ndarray:
    """Read ``dataobj[slicer]`` as native float32 with scl_slope/scl_inter applied, without a float64 copy."""
    if type(dataobj) is ArrayProxy:
        slope, inter = float(dataobj.slope), float(dataobj.inter)
        # A twin proxy on the same bytes with unit scaling reads only the requested raw voxels;
        # scaling is then applied in float32 (nibabel's own path upcasts to float64 first).
        raw_proxy = ArrayProxy(
            dataobj.file_like,
            (dataobj.shape, dataobj.dtype, dataobj.offset, 1.0, 0.0),
            order=dataobj.order,
        )
        raw = raw_proxy[slicer]
        out = np.asarray(raw).astype(np.float32, order="C")  # native-endian C-order copy, also for '>f4'
        del raw
        if slope != 1.0:
            out *= np.float32(slope)
        if inter != 0.0:
            out += np.float32(inter)
        return out
    # Other proxies (MINC, PAR/REC) and in-memory arrays: let nibabel scale, then cast.
    return np.ascontiguousarray(np.asarray(dataobj[slicer]), dtype=np.float32)


def load_volume(path: str | os.PathLike, *, volume_index: int = 0) -> Volume:
    """Read one 3-D volume (float32, scaled) from a NIfTI or other nibabel spatial image through its proxy."""
    path = os.fspath(path)
    if files.is_url(path):  # nibabel reads local files: fetch one (keeping its .nii/.nii.gz suffix) for this call
        if not files.exists(path):
            raise FileNotFoundError(f"{path}: volume file does not exist")
        with files.local_copy(path) as local:
            return load_volume(local, volume_index=volume_index)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: volume file does not exist")
    if not os.path.isfile(path):
        raise VolumeError(f"{path}: expected a NIfTI file (.nii/.nii.gz), found a directory or special file")
    try:
        img = nib.load(path)
    except _READ_ERRORS as err:
        raise VolumeError(
            f"{path}: not a readable NIfTI/nibabel image ({type(err).__name__}: {err})"
        ) from err
    if not isinstance(img, SpatialImage):
        raise VolumeError(f"{path}: expected a spatial image, nibabel opened it as {type(img).__name__}")
    shape = tuple(int(n) for n in img.shape)
    if len(shape) < 3:
        raise VolumeError(f"{path}: expected a 3-D or 4-D image, got {len(shape)}-D shape {shape}")
    if len(shape) > 4:
        raise VolumeError(f"{path}: expected a 3-D or 4-D image, got {len(shape)}-D shape {shape}")
    if min(shape) < 1:
        raise VolumeError(f"{path}: image has an empty dimension, shape {shape}")
    num_volumes = shape[3] if len(shape) == 4 else 1
    if not 0 <= volume_index < num_volumes:
        raise VolumeError(
            f"{path}: volume_index {volume_index} out of range for {num_volumes} volume(s) (shape {shape})"
        )
    affine = img.affine
    if affine is None:
        raise VolumeError(f"{path}: image has no affine (voxel->world transform)")
    affine = np.asarray(affine, dtype=np.float64)
    if not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise VolumeError(f"{path}: affine is singular or not finite:\n{affine}")
    on_disk = img.get_data_dtype()
    if on_disk.kind not in "biuf":
        raise VolumeError(f"{path}: unsupported voxel data type {on_disk} (expected integer or real float)")
    slicer = (..., volume_index) if len(shape) == 4 else (...,)
    try:
        data = _read_float32(img.dataobj, slicer)
    except _READ_ERRORS as err:
        raise VolumeError(
            f"{path}: voxel data cannot be read, file truncated or corrupt ({type(err).__name__}: {err})"
        ) from err
    del img
    if data.shape != shape[:3]:
        raise VolumeError(f"{path}: read data shape {data.shape}, expected {shape[:3]}")
    finite = np.isfinite(data)
    num_nonfinite = int(data.size - np.count_nonzero(finite))
    if num_nonfinite:
        data[~finite] = 0.0
        logger.debug("%s: replaced %d NaN/Inf voxels by 0", path, num_nonfinite)
    del finite
    return Volume(
        data=data,
        affine=affine,
        spacing=_voxel_sizes(affine),
        original_shape=(shape[0], shape[1], shape[2]),
        num_nonfinite=num_nonfinite,
    )


def reorient_to_ras(volume: Volume) -> Volume:
    """Flip/permute voxel axes to the closest canonical RAS+ order; every voxel keeps its world position."""
    ornt = nib.orientations.io_orientation(volume.affine)
    if np.any(np.isnan(ornt)):
        raise ValueError(f"cannot determine orientation of affine:\n{volume.affine}")
    identity = np.column_stack([np.arange(3), np.ones(3)])
    if np.array_equal(ornt, identity):
        return volume
    data = np.ascontiguousarray(nib.orientations.apply_orientation(volume.data, ornt))
    affine = volume.affine @ nib.orientations.inv_ornt_aff(ornt, volume.data.shape)
    spacing = np.empty(3, dtype=np.float32)
    spacing[ornt[:, 0].astype(int)] = volume.spacing
    return dataclasses.replace(volume, data=data, affine=affine, spacing=spacing)


def resample_to_spacing(
    volume: Volume, pixdim: Sequence[float] | None, *, order: int = 1
) -> Volume:
    """Resample to voxel size ``pixdim`` (mm, data-axis order) so all examples share one physical scale.

    Convention: the centre of voxel (0, 0, 0) keeps its world position and the new spacing is exactly
    ``pixdim``; new voxel ``k`` samples old continuous index ``k * pixdim / spacing``. The new shape is
    ``round(shape * spacing / pixdim)`` (at least 1), so the field of view is kept to within a voxel;
    samples past the last old voxel centre take the edge value (``mode="nearest"``). This is
    ``scipy.ndimage.zoom``'s interpolation with exact spacing (``affine_transform`` with a diagonal
    matrix runs the same zoom/shift kernel); ``order`` is the spline order (0 nearest, 1 linear, 3 cubic).
    """
    if pixdim is None:
        return volume
    target = np.asarray(pixdim, dtype=np.float64)
    if target.shape != (3,) or not np.all(np.isfinite(target)) or np.any(target <= 0):
        raise ValueError(f"pixdim must be 3 positive finite numbers (mm), got {pixdim!r}")
    if not 0 <= order <= 5:
        raise ValueError(f"order must be a spline order in 0..5, got {order}")
    old_spacing = volume.spacing.astype(np.float64)
    old_shape = np.asarray(volume.data.shape, dtype=np.float64)
    new_shape = tuple(int(n) for n in np.maximum(np.round(old_shape * old_spacing / target), 1))
    scale = target / old_spacing  # old voxel steps per new voxel
    if new_shape == volume.data.shape and np.allclose(scale, 1.0, rtol=1e-6, atol=0.0):
        return volume
    data = volume.data
    if order > 1:
        # Prefilter in float32 ourselves; ndimage would otherwise build a float64 coefficient copy.
        data = ndimage.spline_filter(data, order=order, output=np.float32, mode="nearest")
    resampled = ndimage.affine_transform(
        data,
        scale,
        offset=0.0,
        output_shape=new_shape,
        output=np.float32,
        order=order,
        mode="nearest",
        prefilter=False,
    )
    del data
    affine = volume.affine @ np.diag([*scale, 1.0])
    return dataclasses.replace(
        volume, data=resampled, affine=affine, spacing=target.astype(np.float32)
    )


def _crop_pad_offsets(in_size: int, out_size: int) -> tuple[slice, slice, int]:
    """Source slice, destination slice and source index of output voxel 0 for one axis."""
    if in_size >= out_size:
        start = in_size // 2 - out_size // 2  # MONAI CenterSpatialCrop
        return slice(start, start + out_size), slice(0, out_size), start
    before = (out_size - in_size) // 2  # MONAI SpatialPad(method="symmetric")
    return slice(0, in_size), slice(before, before + in_size), -before


def crop_or_pad(volume: Volume, spatial_size: Sequence[int]) -> CroppedVolume:
    """Center-crop or zero-pad each axis to ``spatial_size`` and mark the real voxels in a mask.

    Follows MONAI's ResizeWithPadOrCrop: a cropped axis keeps ``[n//2 - size//2, n//2 - size//2 + size)``
    (for an odd surplus the extra removed voxel is at the end when ``n`` is odd, at the start when ``n``
    is even and ``size`` odd); a padded axis gets ``(size - n)//2`` zeros before and the rest (the odd
    extra voxel) after. The output affine maps output voxels to the world position of their source voxel.
    """
    size = tuple(int(n) for n in spatial_size)
    if len(size) != 3 or min(size) < 1:
        raise ValueError(f"spatial_size must be 3 positive ints, got {spatial_size!r}")
    if volume.data.ndim != 3:
        raise ValueError(f"expected 3-D volume data, got shape {volume.data.shape}")
    src, dst, offset = zip(*(_crop_pad_offsets(n, s) for n, s in zip(volume.data.shape, size)))
    data = np.zeros(size, dtype=np.float32)
    mask = np.zeros(size, dtype=np.uint8)
    data[dst] = volume.data[src]
    mask[dst] = 1
    shift = np.eye(4)
    shift[:3, 3] = offset
    return CroppedVolume(data=data, mask=mask, affine=volume.affine @ shift)


def fit_spacing(volume: Volume, spatial_size: Sequence[int]) -> tuple[float, float, float]:
    """The isotropic voxel size (mm) at which the whole field of view fits ``spatial_size``.

    The axis whose physical extent (``shape * spacing``) is largest relative to its output size sets
    it, so the aspect ratio is kept and the other axes are padded (and masked) rather than cut.
    """
    size = np.asarray([int(n) for n in spatial_size], dtype=np.float64)
    extent = np.asarray(volume.data.shape, dtype=np.float64) * volume.spacing.astype(np.float64)
    step = float(np.max(extent / size))
    return (step, step, step)


def normalize_intensity(data: np.ndarray, mask: np.ndarray, *, mode: str = "none") -> np.ndarray:
    """Normalize intensities from statistics inside ``mask == 1`` (padding stays 0), float32 out.

    ``"none"`` returns the data as float32; ``"zscore"`` gives (x - mean) / std inside the mask (only
    centred when std is 0); ``"minmax"`` maps the masked range to [0, 1] (0 when constant).
    """
    if mode not in NORMALIZATION_MODES:
        raise ValueError(f"unknown normalization mode {mode!r}, expected one of {NORMALIZATION_MODES}")
    data = np.asarray(data)
    if mode == "none":
        return data.astype(np.float32, copy=False)
    if data.shape != np.shape(mask):
        raise ValueError(f"data shape {data.shape} and mask shape {np.shape(mask)} differ")
    inside = np.asarray(mask) == 1
    out = np.zeros(data.shape, dtype=np.float32)
    if not inside.any():
        return out
    values = data[inside].astype(np.float64)
    if mode == "zscore":
        mean = values.mean()
        std = values.std()
        values -= mean
        if std > 0:
            values /= std
    else:
        low, high = values.min(), values.max()
        values -= low
        if high > low:
            values /= high - low
    out[inside] = values
    return out


def preprocess_volume(
    path: str | os.PathLike,
    *,
    spatial_size: Sequence[int] = (128, 128, 128),
    pixdim: Sequence[float] | None = None,
    volume_index: int = 0,
    normalization: str = "none",
    fit: str = "crop",
) -> tuple[CroppedVolume, Volume]:
    """Run load -> RAS -> resample -> crop/pad -> normalize on one file for the mri_volumes builder.

    ``fit="crop"`` keeps the voxel size (``pixdim`` or the file's own) and centre-crops or pads;
    ``fit="whole"`` resamples each scan to the isotropic voxel size at which its whole field of view
    fits ``spatial_size`` (:func:`fit_spacing`), then pads the shorter axes (mask 0 there).

    Returns the fixed-shape output and the metadata of the reoriented, resampled :class:`Volume`
    (``affine``, ``spacing``, ``original_shape``, ``num_nonfinite``); its ``data`` is released (an empty
    (0, 0, 0) array) so that only the output volume stays in memory.
    """
    if normalization not in NORMALIZATION_MODES:
        raise ValueError(
            f"unknown normalization mode {normalization!r}, expected one of {NORMALIZATION_MODES}"
        )
    volume = load_volume(path, volume_index=volume_index)
    volume = reorient_to_ras(volume)
    if fit not in FIT_MODES:
        raise ValueError(f"unknown fit mode {fit!r}, expected one of {FIT_MODES}")
    if fit == "whole":
        if pixdim is not None:
            raise ValueError("fit='whole' chooses each scan's voxel size; leave pixdim unset")
        pixdim = fit_spacing(volume, spatial_size)
    volume = resample_to_spacing(volume, pixdim)
    cropped = crop_or_pad(volume, spatial_size)
    metadata = dataclasses.replace(volume, data=np.empty((0, 0, 0), dtype=np.float32))
    del volume
    cropped.data = normalize_intensity(cropped.data, cropped.mask, mode=normalization)
    return cropped, metadata
