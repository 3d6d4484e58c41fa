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
from collections.abc import Sequence

import nibabel as nib
import numpy as np

from vidvol.builders.sources import files
from vidvol.builders.transforms import volume_io
from vidvol.builders.transforms import volume_window
from vidvol.builders.transforms.volume_io import DEFAULT_MAX_SOURCE_BYTES, VolumeError

logger = logging.getLogger(__name__)

NORMALIZATION_MODES = ("none", "zscore", "minmax")
# "crop": keep the voxel size, centre-crop/pad; "whole": shrink each scan isotropically until it fits, pad the rest.
FIT_MODES = ("crop", "whole")

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


def _checked_affine(opened: volume_io.OpenedImage) -> np.ndarray:
    """The image's voxel->world affine as float64; VolumeError when missing, singular or not finite."""
    affine = opened.img.affine
    if affine is None:
        raise VolumeError(f"{opened.path}: image has no affine (voxel->world transform)")
    affine = np.asarray(affine, dtype=np.float64)
    if not np.all(np.isfinite(affine)) or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        raise VolumeError(f"{opened.path}: affine is singular or not finite:\n{affine}")
    if np.any(np.isnan(nib.orientations.io_orientation(affine))):  # e.g. two voxel axes along one world axis
        # found by the fuzz lane (tests/test_fuzz.py): it was a ValueError that did not name the file
        raise VolumeError(f"{opened.path}: cannot determine the orientation of its affine (no voxel axis is "
                          f"closest to each world axis); fix the header's sform/qform or leave the file out:\n{affine}")
    return affine


def load_volume(path: str | os.PathLike, *, volume_index: int = 0,
                max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> Volume:
    """Read one whole 3-D volume (float32, scaled) from a NIfTI or other nibabel spatial image through its proxy.

    The header's claim is checked first (`volume_io.open_image`); the whole volume is then held in
    memory (`preprocess_volume` reads only what its output needs).
    """
    path = os.fspath(path)
    if files.is_url(path):  # nibabel reads local files: fetch one (keeping its .nii/.nii.gz suffix) for this call
        if not files.exists(path):
            raise FileNotFoundError(f"{path}: volume file does not exist")
        with files.local_copy(path) as local:
            return load_volume(local, volume_index=volume_index, max_source_bytes=max_source_bytes)
    with volume_io.open_image(path, volume_index=volume_index, max_source_bytes=max_source_bytes) as opened:
        affine = _checked_affine(opened)
        shape = opened.shape
        reader = volume_window.RasReader(opened, None)
        data = reader.read([(0, n) for n in shape[:3]])
    if reader.num_nonfinite:
        logger.debug("%s: replaced %d NaN/Inf voxels by 0", opened.path, reader.num_nonfinite)
    return Volume(
        data=data,
        affine=affine,
        spacing=_voxel_sizes(affine),
        original_shape=(shape[0], shape[1], shape[2]),
        num_nonfinite=reader.num_nonfinite,
    )


def _ras_orientation(affine: np.ndarray) -> np.ndarray | None:
    """nibabel's orientation (axis, flip) per voxel axis to reach RAS+, or None when the axes already are RAS+."""
    ornt = nib.orientations.io_orientation(affine)
    if np.any(np.isnan(ornt)):
        raise ValueError(f"cannot determine orientation of affine:\n{affine}")
    identity = np.column_stack([np.arange(3), np.ones(3)])
    return None if np.array_equal(ornt, identity) else ornt


def _reoriented(ornt: np.ndarray, shape: Sequence[int], affine: np.ndarray,
                spacing: np.ndarray) -> tuple[tuple[int, int, int], np.ndarray, np.ndarray]:
    """Shape, affine and voxel size after `ornt` (what `reorient_to_ras` gives, from the header alone)."""
    axes = ornt[:, 0].astype(int)
    new_shape = [0, 0, 0]
    for axis, n in zip(axes, shape):
        new_shape[axis] = int(n)
    new_spacing = np.empty(3, dtype=np.float32)
    new_spacing[axes] = spacing
    return tuple(new_shape), affine @ nib.orientations.inv_ornt_aff(ornt, tuple(shape)), new_spacing


def reorient_to_ras(volume: Volume) -> Volume:
    """Flip/permute voxel axes to the closest canonical RAS+ order; every voxel keeps its world position."""
    ornt = _ras_orientation(volume.affine)
    if ornt is None:
        return volume
    data = np.ascontiguousarray(nib.orientations.apply_orientation(volume.data, ornt))
    _, affine, spacing = _reoriented(ornt, volume.data.shape, volume.affine, volume.spacing)
    return dataclasses.replace(volume, data=data, affine=affine, spacing=spacing)


def _resample_grid(shape: Sequence[int], spacing: np.ndarray, pixdim: Sequence[float] | None
                   ) -> tuple[tuple[int, ...], np.ndarray, np.ndarray] | None:
    """(new shape, old voxel steps per new voxel, new spacing) of `resample_to_spacing`, or None when it keeps the grid."""
    if pixdim is None:
        return None
    target = np.asarray(pixdim, dtype=np.float64)
    if target.shape != (3,) or not np.all(np.isfinite(target)) or np.any(target <= 0):
        raise ValueError(f"pixdim must be 3 positive finite numbers (mm), got {pixdim!r}")
    old_spacing = spacing.astype(np.float64)
    old_shape = np.asarray(shape, dtype=np.float64)
    new_shape = tuple(int(n) for n in np.maximum(np.round(old_shape * old_spacing / target), 1))
    scale = target / old_spacing  # old voxel steps per new voxel
    if new_shape == tuple(shape) and np.allclose(scale, 1.0, rtol=1e-6, atol=0.0):
        return None
    return new_shape, scale, target


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
    from scipy import ndimage  # here, not at import: registering mri_volumes needs no SciPy

    if not 0 <= order <= 5:
        raise ValueError(f"order must be a spline order in 0..5, got {order}")
    grid = _resample_grid(volume.data.shape, volume.spacing, pixdim)
    if grid is None:
        return volume
    new_shape, scale, target = grid
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
    return _fit_step(volume.data.shape, volume.spacing, spatial_size)


def _fit_step(shape: Sequence[int], spacing: np.ndarray, spatial_size: Sequence[int]) -> tuple[float, float, float]:
    """`fit_spacing` from a shape and a voxel size (the header's, reoriented)."""
    size = np.asarray([int(n) for n in spatial_size], dtype=np.float64)
    extent = np.asarray(shape, dtype=np.float64) * spacing.astype(np.float64)
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
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
    window_bytes: int = volume_window.WINDOW_BYTES,
) -> tuple[CroppedVolume, Volume]:
    """Run load -> RAS -> resample -> crop/pad -> normalize on one file for the mri_volumes builder.

    ``fit="crop"`` keeps the voxel size (``pixdim`` or the file's own) and centre-crops or pads;
    ``fit="whole"`` resamples each scan to the isotropic voxel size at which its whole field of view
    fits ``spatial_size`` (:func:`fit_spacing`), then pads the shorter axes (mask 0 there).

    The output grid is worked out from the header (:func:`reorient_to_ras`, :func:`resample_to_spacing`
    and :func:`crop_or_pad` on the header's geometry) and only the source voxels it needs are read,
    ``window_bytes`` of them at a time (`volume_window`): the result equals those stages run on the
    whole volume, bit for bit, while memory follows the output, not the file. The header's claim is
    checked against the file and ``max_source_bytes`` first (`volume_io.open_image`).

    Returns the fixed-shape output and the metadata of the reoriented, resampled :class:`Volume`
    (``affine``, ``spacing``, ``original_shape``, ``num_nonfinite``: NaN/Inf among the voxels read,
    set to 0); its ``data`` is an empty (0, 0, 0) array.
    """
    if normalization not in NORMALIZATION_MODES:
        raise ValueError(
            f"unknown normalization mode {normalization!r}, expected one of {NORMALIZATION_MODES}"
        )
    path = os.fspath(path)
    if files.is_url(path):
        if not files.exists(path):
            raise FileNotFoundError(f"{path}: volume file does not exist")
        with files.local_copy(path) as local:
            return preprocess_volume(local, spatial_size=spatial_size, pixdim=pixdim, volume_index=volume_index,
                                     normalization=normalization, fit=fit, max_source_bytes=max_source_bytes,
                                     window_bytes=window_bytes)
    size = tuple(int(n) for n in spatial_size)
    if len(size) != 3 or min(size) < 1:
        raise ValueError(f"spatial_size must be 3 positive ints, got {spatial_size!r}")
    with volume_io.open_image(path, volume_index=volume_index, max_source_bytes=max_source_bytes) as opened:
        affine = _checked_affine(opened)
        shape = tuple(opened.shape[:3])
        ras_shape, spacing, ornt = shape, _voxel_sizes(affine), _ras_orientation(affine)
        if ornt is not None:
            ras_shape, affine, spacing = _reoriented(ornt, shape, affine, spacing)
        if fit not in FIT_MODES:
            raise ValueError(f"unknown fit mode {fit!r}, expected one of {FIT_MODES}")
        if fit == "whole":
            if pixdim is not None:
                raise ValueError("fit='whole' chooses each scan's voxel size; leave pixdim unset")
            pixdim = _fit_step(ras_shape, spacing, size)
        grid = _resample_grid(ras_shape, spacing, pixdim)
        grid_shape = ras_shape if grid is None else grid[0]
        src, dst, offset = zip(*(_crop_pad_offsets(n, s) for n, s in zip(grid_shape, size)))
        data = np.zeros(size, dtype=np.float32)
        mask = np.zeros(size, dtype=np.uint8)
        mask[dst] = 1
        reader = volume_window.RasReader(opened, ornt)
        if grid is None:
            volume_window.copy_window(reader, src, data[dst], window_bytes=window_bytes)
        else:
            new_shape, scale, target = grid
            volume_window.resample_window(reader, ras_shape, scale, src, data[dst], window_bytes=window_bytes)
            affine = affine @ np.diag([*scale, 1.0])
            spacing = target.astype(np.float32)
    if reader.num_nonfinite:
        logger.debug("%s: replaced %d NaN/Inf voxels by 0", opened.path, reader.num_nonfinite)
    shift = np.eye(4)
    shift[:3, 3] = offset
    cropped = CroppedVolume(data=normalize_intensity(data, mask, mode=normalization), mask=mask,
                            affine=affine @ shift)
    metadata = Volume(data=np.empty((0, 0, 0), dtype=np.float32), affine=affine, spacing=spacing,
                      original_shape=shape, num_nonfinite=reader.num_nonfinite)
    return cropped, metadata
