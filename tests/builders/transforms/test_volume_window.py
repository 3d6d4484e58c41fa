"""preprocess_volume reads only what its output needs and gives, bit for bit, the stages run on the whole volume."""

from __future__ import annotations

import itertools

import nibabel as nib
import numpy as np
import pytest

from vidvol.builders.transforms import volume as vol

ROTATION = np.array([[0.9, -0.3, 0.1], [0.3, 0.95, 0.0], [-0.1, 0.05, 1.0]])
AXES = {  # voxel axes -> world directions
    "RAS": np.eye(3),
    "LPS": np.diag([-1.0, -1.0, 1.0]),
    "PERMFLIP": np.array([[0, -1, 0], [0, 0, 1], [-1, 0, 0]], float),
    "OBLIQUE": ROTATION,
}
CONFIGS = [  # (spatial_size, pixdim, fit)
    ((16, 12, 20), None, "crop"),  # crop some axes, pad others, no resampling
    ((14, 14, 14), (1.7, 0.6, 2.3), "crop"),  # down- and upsampling at once
    ((24, 20, 16), None, "whole"),
    ((8, 8, 8), (3.1, 3.1, 3.1), "crop"),  # downsampled: planes in between are skipped
]


def _save(path, data, axes, zooms, *, dtype=None):
    affine = np.eye(4)
    affine[:3, :3] = axes @ np.diag(zooms)
    affine[:3, 3] = (-7.0, 3.5, 11.0)
    image = nib.Nifti1Image(data, affine)
    if dtype is not None:
        image.set_data_dtype(dtype)
        image.header.set_slope_inter(0.25, -3.0)
    nib.save(image, str(path))
    return str(path)


def _whole(path, spatial_size, pixdim, fit):
    """The stages on the whole volume (load, RAS, resample, crop/pad): the reference."""
    volume = vol.reorient_to_ras(vol.load_volume(path))
    if fit == "whole":
        pixdim = vol.fit_spacing(volume, spatial_size)
    volume = vol.resample_to_spacing(volume, pixdim)
    return vol.crop_or_pad(volume, spatial_size), volume


@pytest.mark.parametrize("orientation", sorted(AXES))
def test_windowed_output_equals_the_whole_volume_stages_bit_for_bit(tmp_path, orientation):
    rng = np.random.default_rng(sorted(AXES).index(orientation))
    floats = rng.normal(0, 10, (23, 17, 30)).astype(np.float32)
    floats[rng.random(floats.shape) < 0.2] = -0.0  # signed zeros and ties
    ints = np.rint(rng.normal(400, 90, (21, 26, 9))).astype(np.int16)
    files = [_save(tmp_path / f"f_{orientation}.nii", floats, AXES[orientation], (1.0, 1.3, 0.8)),
             _save(tmp_path / f"i_{orientation}.nii.gz", ints, AXES[orientation], (0.9, 0.9, 2.5), dtype=np.int16),
             _save(tmp_path / f"slab_{orientation}.nii.gz", floats[:, :, :1].copy(), AXES[orientation], (1.0, 1.0, 5.0))]
    for path, (size, pixdim, fit), window in itertools.product(files, CONFIGS, (1, 4096, vol.volume_window.WINDOW_BYTES)):
        expected, full = _whole(path, size, pixdim, fit)
        got, meta = vol.preprocess_volume(path, spatial_size=size, pixdim=pixdim, fit=fit, window_bytes=window)
        where = (path, size, pixdim, fit, window)
        assert got.data.tobytes() == expected.data.tobytes(), where
        assert got.mask.tobytes() == expected.mask.tobytes(), where
        assert got.affine.tobytes() == expected.affine.tobytes(), where
        assert meta.affine.tobytes() == full.affine.tobytes() and meta.spacing.tobytes() == full.spacing.tobytes(), where
        assert meta.original_shape == full.original_shape and meta.data.shape == (0, 0, 0)


def test_only_the_voxels_the_output_needs_are_read(tmp_path):
    # NaN everywhere except what the output uses: a voxel read outside it would be counted (and zeroed).
    data = np.full((40, 36, 48), np.nan, np.float32)
    data[12:28, 10:26, 16:32] = 1.0  # the 16^3 centre crop
    path = _save(tmp_path / "crop.nii", data, AXES["LPS"], (1.0, 1.0, 1.0))
    cropped, meta = vol.preprocess_volume(path, spatial_size=(16, 16, 16), window_bytes=4096)
    assert meta.num_nonfinite == 0 and (cropped.data == 1.0).all()
    assert vol.load_volume(path).num_nonfinite == data.size - 16**3  # the whole volume holds them

    # Downsampling by 4 along the slowest axis with linear interpolation: planes 4k and 4k + 1 only.
    data = np.full((8, 8, 40), np.nan, np.float32)
    used = sorted({p for k in range(10) for p in (4 * k, min(4 * k + 1, 39))})
    data[:, :, used] = 2.0
    path = _save(tmp_path / "skip.nii.gz", data, AXES["RAS"], (1.0, 1.0, 1.0))
    cropped, meta = vol.preprocess_volume(path, spatial_size=(8, 8, 10), pixdim=(1.0, 1.0, 4.0), window_bytes=1)
    assert meta.num_nonfinite == 0 and np.allclose(cropped.data, 2.0)
    expected, _ = _whole(path, (8, 8, 10), (1.0, 1.0, 4.0), "crop")  # the reference zeroes every NaN first
    assert cropped.data.tobytes() == expected.data.tobytes()
