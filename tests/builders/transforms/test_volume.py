"""Tests for vidvol.builders.transforms.volume on real NIfTI files written by nibabel."""

import gzip
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from vidvol.builders.transforms import volume as vol

SHAPE = (12, 10, 8)
ZOOMS = (1.0, 2.0, 3.5)


def _affine(axes: np.ndarray, zooms=ZOOMS, origin=(-10.0, 20.0, 5.0)) -> np.ndarray:
    """Affine whose voxel axis i points along column i of `axes` with length zooms[i]."""
    affine = np.eye(4)
    affine[:3, :3] = np.asarray(axes, dtype=np.float64) * np.asarray(zooms)
    affine[:3, 3] = origin
    return affine


def _rotation(angle_deg: float, axis: int) -> np.ndarray:
    c, s = np.cos(np.radians(angle_deg)), np.sin(np.radians(angle_deg))
    i, j = [k for k in range(3) if k != axis]
    rot = np.eye(3)
    rot[i, i], rot[i, j], rot[j, i], rot[j, j] = c, -s, s, c
    return rot


AFFINES = {
    "RAS": _affine(np.eye(3)),
    "LAS": _affine(np.diag([-1.0, 1.0, 1.0])),
    "LPI": _affine(np.diag([-1.0, -1.0, -1.0])),
    # voxel axis 0 -> Posterior, 1 -> Superior, 2 -> Right
    "PSR": _affine(np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),
    "oblique": _affine(_rotation(20.0, axis=2) @ _rotation(-15.0, axis=0) @ np.diag([-1.0, 1.0, 1.0])),
}


def _save(path, data, affine, *, image_class=nib.Nifti1Image, header=None):
    img = image_class(data, affine, header=header)
    nib.save(img, str(path))
    return str(path)


def _world(affine: np.ndarray, index) -> np.ndarray:
    return nib.affines.apply_affine(affine, np.asarray(index, dtype=np.float64))


def _make_volume(data: np.ndarray, affine: np.ndarray) -> vol.Volume:
    return vol.Volume(
        data=data.astype(np.float32),
        affine=affine,
        spacing=nib.affines.voxel_sizes(affine).astype(np.float32),
        original_shape=data.shape,
    )


# ----------------------------------------------------------------------------------------------- load


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_load_float32_roundtrip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    data = rng.normal(size=SHAPE).astype(np.float32)
    path = _save(tmp_path / f"img{suffix}", data, AFFINES["LAS"])

    volume = vol.load_volume(path)

    assert volume.data.dtype == np.float32 and volume.data.dtype.isnative
    assert volume.data.flags.c_contiguous
    np.testing.assert_array_equal(volume.data, data)
    np.testing.assert_allclose(volume.affine, AFFINES["LAS"])
    np.testing.assert_allclose(volume.spacing, ZOOMS, rtol=1e-6)
    assert volume.spacing.dtype == np.float32
    assert volume.original_shape == SHAPE
    assert volume.num_nonfinite == 0


def test_load_int16_applies_slope_and_intercept(tmp_path):
    raw = (np.arange(np.prod(SHAPE)) % 700 - 300).astype(np.int16).reshape(SHAPE)
    img = nib.Nifti1Image(raw, AFFINES["RAS"])
    img.set_data_dtype(np.int16)
    img.header.set_slope_inter(0.37, -12.5)
    path = str(tmp_path / "scaled.nii.gz")
    nib.save(img, path)
    # What the file really holds, read independently of the code under test.
    with gzip.open(path, "rb") as fobj:
        header = nib.Nifti1Header.from_fileobj(fobj)
    slope, inter = float(header["scl_slope"]), float(header["scl_inter"])
    assert header.get_data_dtype() == np.int16
    assert (slope, inter) != (1.0, 0.0)
    on_disk = np.asarray(nib.load(path).dataobj.get_unscaled())
    np.testing.assert_array_equal(on_disk, raw)

    volume = vol.load_volume(path)

    assert volume.data.dtype == np.float32
    np.testing.assert_allclose(volume.data, raw.astype(np.float64) * slope + inter, rtol=1e-6, atol=1e-4)


def test_load_big_endian_float32(tmp_path):
    data = np.random.default_rng(1).normal(size=SHAPE).astype(np.float32)
    header = nib.Nifti1Header(endianness=">")
    header.set_data_dtype(">f4")
    path = _save(tmp_path / "big.nii", data, AFFINES["RAS"], header=header)
    with open(path, "rb") as fobj:
        raw_header = fobj.read(4)
    assert int.from_bytes(raw_header, "big") == 348  # sizeof_hdr stored big-endian
    assert nib.load(path).get_data_dtype().byteorder == ">"

    volume = vol.load_volume(path)

    assert volume.data.dtype == np.float32 and volume.data.dtype.isnative
    np.testing.assert_array_equal(volume.data, data)


def test_load_nifti2(tmp_path):
    data = np.random.default_rng(2).uniform(0, 100, size=SHAPE).astype(np.float32)
    path = _save(tmp_path / "n2.nii", data, AFFINES["PSR"], image_class=nib.Nifti2Image)
    with open(path, "rb") as fobj:
        assert int.from_bytes(fobj.read(4), "little") == 540  # NIfTI-2 header size
    assert isinstance(nib.load(path), nib.Nifti2Image)

    volume = vol.load_volume(path)

    np.testing.assert_array_equal(volume.data, data)
    np.testing.assert_allclose(volume.affine, AFFINES["PSR"])


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_load_4d_picks_volume_index(tmp_path, suffix):
    data = np.random.default_rng(3).normal(size=(*SHAPE, 3)).astype(np.float32)
    data[..., 2] += 1000.0
    path = _save(tmp_path / f"four{suffix}", data, AFFINES["RAS"])

    for index in range(3):
        volume = vol.load_volume(path, volume_index=index)
        assert volume.data.shape == SHAPE
        np.testing.assert_array_equal(volume.data, data[..., index])
        assert volume.original_shape == SHAPE

    for bad in (3, -1):
        with pytest.raises(vol.VolumeError, match="volume_index") as info:
            vol.load_volume(path, volume_index=bad)
        assert path in str(info.value)


def test_load_4d_reads_only_the_picked_volume(tmp_path):
    # Cut the file right after volume 0: volume 0 must still load (only its bytes are read through
    # the proxy), while volume 2 fails as truncated.
    data = np.random.default_rng(10).normal(size=(*SHAPE, 3)).astype(np.float32)
    path = _save(tmp_path / "cut.nii", data, AFFINES["RAS"])
    offset = int(nib.load(path).dataobj.offset)
    payload = Path(path).read_bytes()
    with open(path, "wb") as fobj:
        fobj.write(payload[: offset + data[..., 0].nbytes + 16])

    np.testing.assert_array_equal(vol.load_volume(path, volume_index=0).data, data[..., 0])
    with pytest.raises(vol.VolumeError, match="truncated") as info:
        vol.load_volume(path, volume_index=2)
    assert path in str(info.value)


def test_load_4d_trailing_singleton_and_5d_rejected(tmp_path):
    data = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(*SHAPE, 1)
    path = _save(tmp_path / "single.nii", data, AFFINES["RAS"])
    np.testing.assert_array_equal(vol.load_volume(path).data, data[..., 0])

    five = _save(tmp_path / "five.nii", np.zeros((4, 4, 4, 2, 2), np.float32), AFFINES["RAS"])
    with pytest.raises(vol.VolumeError, match="5-D") as info:
        vol.load_volume(five)
    assert five in str(info.value)


def test_load_counts_and_zeroes_nonfinite(tmp_path):
    data = np.random.default_rng(4).uniform(1, 2, size=SHAPE).astype(np.float32)
    bad = [(0, 0, 0), (5, 3, 2), (11, 9, 7)]
    data[bad[0]], data[bad[1]], data[bad[2]] = np.nan, np.inf, -np.inf
    path = _save(tmp_path / "nan.nii.gz", data, AFFINES["RAS"])

    volume = vol.load_volume(path)

    assert volume.num_nonfinite == 3
    assert np.all(np.isfinite(volume.data))
    for index in bad:
        assert volume.data[index] == 0.0
    good = np.isfinite(data)
    np.testing.assert_array_equal(volume.data[good], data[good])


def test_load_errors_name_the_path(tmp_path):
    real = _save(tmp_path / "real.nii.gz", np.ones((20, 16, 12), np.float32), AFFINES["RAS"])
    payload = Path(real).read_bytes()
    truncated = tmp_path / "truncated.nii.gz"
    truncated.write_bytes(payload[: len(payload) // 2])
    empty = tmp_path / "empty.nii.gz"
    empty.write_bytes(b"")
    text = tmp_path / "notes.nii"
    text.write_text("this is not a NIfTI file\n" * 40)
    flat = _save(tmp_path / "flat.nii", np.ones((6, 5), np.float32), AFFINES["RAS"])

    for path in (str(truncated), str(empty), str(text), flat):
        with pytest.raises(vol.VolumeError) as info:
            vol.load_volume(path)
        assert path in str(info.value)
        assert isinstance(info.value, ValueError)
    with pytest.raises(vol.VolumeError, match="2-D"):
        vol.load_volume(flat)

    missing = str(tmp_path / "missing.nii.gz")
    with pytest.raises(FileNotFoundError) as info:
        vol.load_volume(missing)
    assert missing in str(info.value)


# ------------------------------------------------------------------------------------------- reorient


@pytest.mark.parametrize("name", sorted(AFFINES))
def test_reorient_to_ras_keeps_world_positions(tmp_path, name):
    source_affine = AFFINES[name]
    data = np.zeros(SHAPE, np.float32)
    bright = (3, 7, 5)
    data[bright] = 100.0
    data[0, 0, 0] = 5.0  # a second, dimmer marker
    path = _save(tmp_path / f"{name}.nii.gz", data, source_affine)

    loaded = vol.load_volume(path)
    ras = vol.reorient_to_ras(loaded)

    assert nib.aff2axcodes(ras.affine) == ("R", "A", "S")
    for value, index in ((100.0, bright), (5.0, (0, 0, 0))):
        (new_index,) = np.argwhere(ras.data == value)
        np.testing.assert_allclose(_world(ras.affine, new_index), _world(source_affine, index), atol=1e-9)
    np.testing.assert_allclose(ras.spacing, nib.affines.voxel_sizes(ras.affine), rtol=1e-6)
    assert sorted(ras.spacing.tolist()) == pytest.approx(sorted(ZOOMS))
    assert sorted(ras.data.shape) == sorted(SHAPE)
    assert ras.data.dtype == np.float32 and ras.data.flags.c_contiguous
    assert ras.original_shape == SHAPE


def test_reorient_every_voxel_keeps_its_world_coordinate():
    rng = np.random.default_rng(5)
    data = rng.permutation(np.prod(SHAPE)).reshape(SHAPE).astype(np.float32)  # all values distinct
    source = _make_volume(data, AFFINES["PSR"])

    ras = vol.reorient_to_ras(source)

    src_index = np.argwhere(np.ones(SHAPE, bool))
    src_world = _world(source.affine, src_index)
    order = np.argsort(data.ravel())
    new_index = np.argwhere(np.ones(ras.data.shape, bool))
    new_world = _world(ras.affine, new_index)
    new_order = np.argsort(ras.data.ravel())
    np.testing.assert_allclose(new_world[new_order], src_world[order], atol=1e-9)
    # PSR: data axis 0 (R) came from voxel axis 2, axis 1 (A) from axis 0, axis 2 (S) from axis 1.
    assert ras.data.shape == (SHAPE[2], SHAPE[0], SHAPE[1])
    np.testing.assert_allclose(ras.spacing, (ZOOMS[2], ZOOMS[0], ZOOMS[1]))


def test_reorient_ras_input_is_unchanged():
    data = np.random.default_rng(6).normal(size=SHAPE).astype(np.float32)
    source = _make_volume(data, AFFINES["RAS"])
    ras = vol.reorient_to_ras(source)
    np.testing.assert_array_equal(ras.data, data)
    np.testing.assert_array_equal(ras.affine, source.affine)


# ------------------------------------------------------------------------------------------- resample


def test_resample_shape_spacing_and_origin():
    source = _make_volume(np.ones(SHAPE, np.float32), AFFINES["RAS"])
    pixdim = (2.0, 1.0, 1.75)

    out = vol.resample_to_spacing(source, pixdim)

    expected_shape = tuple(int(round(n * z / p)) for n, z, p in zip(SHAPE, ZOOMS, pixdim))
    assert out.data.shape == expected_shape == (6, 20, 16)
    assert out.data.dtype == np.float32
    np.testing.assert_allclose(out.spacing, pixdim)
    np.testing.assert_allclose(nib.affines.voxel_sizes(out.affine), pixdim)
    np.testing.assert_allclose(_world(out.affine, (0, 0, 0)), _world(source.affine, (0, 0, 0)))
    assert nib.aff2axcodes(out.affine) == nib.aff2axcodes(source.affine)
    assert out.original_shape == SHAPE


@pytest.mark.parametrize("order", [0, 1, 3])
def test_resample_constant_stays_constant(order):
    source = _make_volume(np.full(SHAPE, 7.25, np.float32), AFFINES["LAS"])
    out = vol.resample_to_spacing(source, (0.8, 3.0, 1.0), order=order)
    assert out.data.shape == (15, 7, 28)
    np.testing.assert_allclose(out.data, 7.25, rtol=1e-5)


def test_resample_values_follow_new_affine():
    # Intensity = world x coordinate; linear interpolation of a linear field is exact inside the old grid.
    affine = AFFINES["RAS"]
    index = np.indices(SHAPE).reshape(3, -1).T
    world_x = _world(affine, index)[:, 0].reshape(SHAPE).astype(np.float32)
    source = _make_volume(world_x, affine)

    out = vol.resample_to_spacing(source, (0.5, 2.0, 3.5), order=1)

    assert out.data.shape == (24, 10, 8)
    inside = np.indices(out.data.shape).reshape(3, -1).T
    inside = inside[inside[:, 0] <= 22]  # new voxel 23 lies past the last old voxel centre (edge value)
    expected = _world(out.affine, inside)[:, 0]
    np.testing.assert_allclose(out.data[tuple(inside.T)], expected, atol=1e-4)


def test_resample_none_and_bad_pixdim():
    source = _make_volume(np.ones(SHAPE, np.float32), AFFINES["RAS"])
    assert vol.resample_to_spacing(source, None) is source
    for bad in ((1.0, 1.0), (1.0, 0.0, 1.0), (1.0, -2.0, 1.0)):
        with pytest.raises(ValueError, match="pixdim"):
            vol.resample_to_spacing(source, bad)


def test_resample_to_tiny_volume_keeps_at_least_one_voxel():
    source = _make_volume(np.ones((3, 3, 3), np.float32), AFFINES["RAS"])
    out = vol.resample_to_spacing(source, (50.0, 50.0, 50.0))
    assert out.data.shape == (1, 1, 1)


# ---------------------------------------------------------------------------------------- crop or pad


def test_crop_or_pad_pads_and_crops_independently():
    shape = (10, 20, 16)
    data = np.random.default_rng(7).uniform(1, 2, size=shape).astype(np.float32)
    source = _make_volume(data, AFFINES["oblique"])
    marked = (4, 5, 7)
    data_marked = source.data.copy()
    data_marked[marked] = 50.0
    source.data = data_marked

    out = vol.crop_or_pad(source, (16, 16, 16))

    assert out.data.shape == out.mask.shape == (16, 16, 16)
    assert out.data.dtype == np.float32 and out.mask.dtype == np.uint8
    assert int(out.mask.sum()) == 10 * 16 * 16
    assert np.all(out.data[out.mask == 0] == 0)
    # axis 0: pad 10->16 puts 3 zeros before; axis 1: crop 20->16 starts at 20//2 - 16//2 = 2.
    expected_index = (marked[0] + 3, marked[1] - 2, marked[2])
    assert tuple(np.argwhere(out.data == 50.0)[0]) == expected_index
    np.testing.assert_allclose(
        _world(out.affine, expected_index), _world(source.affine, marked), atol=1e-9
    )
    np.testing.assert_array_equal(out.data[3:13, :, :], data_marked[:, 2:18, :])
    assert out.mask[2].sum() == 0 and out.mask[13].sum() == 0 and out.mask[3].all() and out.mask[12].all()


def test_crop_or_pad_odd_sizes_and_affine_for_every_voxel():
    shape = (9, 21, 20)
    size = (16, 16, 15)
    data = (np.arange(np.prod(shape)) + 1).reshape(shape).astype(np.float32)  # unique, non-zero
    source = _make_volume(data, AFFINES["LPI"][:, :])

    out = vol.crop_or_pad(source, size)

    # Documented rule: pad 9->16 = 3 before / 4 after; crop 21->16 keeps [2, 18); crop 20->15 keeps [3, 18).
    np.testing.assert_array_equal(out.data[3:12], data[:, 2:18, 3:18])
    assert out.mask[:3].sum() == 0 and out.mask[12:].sum() == 0 and out.mask[3:12].all()
    assert int(out.mask.sum()) == 9 * 16 * 15
    # Every real output voxel maps to the world position of the source voxel holding the same value.
    out_index = np.argwhere(out.mask == 1)
    src_index = np.array(np.unravel_index(out.data[out.mask == 1].astype(np.int64) - 1, shape)).T
    np.testing.assert_allclose(_world(out.affine, out_index), _world(source.affine, src_index), atol=1e-9)


def test_crop_or_pad_same_size_is_identity_copy():
    data = np.random.default_rng(8).normal(size=SHAPE).astype(np.float32)
    source = _make_volume(data, AFFINES["LAS"])
    out = vol.crop_or_pad(source, SHAPE)
    np.testing.assert_array_equal(out.data, data)
    assert out.mask.all()
    np.testing.assert_array_equal(out.affine, source.affine)
    with pytest.raises(ValueError, match="spatial_size"):
        vol.crop_or_pad(source, (4, 4))


# ------------------------------------------------------------------------------------------ normalize


def test_normalize_zscore_uses_mask_statistics():
    data = np.array([[[1.0, 2.0], [3.0, 10.0]], [[100.0, -7.0], [0.0, 0.0]]], np.float32)
    mask = np.array([[[1, 1], [1, 1]], [[0, 0], [0, 0]]], np.uint8)

    out = vol.normalize_intensity(data, mask, mode="zscore")

    values = np.array([1.0, 2.0, 3.0, 10.0])
    expected = (values - values.mean()) / values.std()
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0].ravel(), expected, rtol=1e-6)
    assert np.all(out[1] == 0)
    assert out[mask == 1].mean() == pytest.approx(0.0, abs=1e-6)
    assert out[mask == 1].std() == pytest.approx(1.0, rel=1e-6)


def test_normalize_zscore_constant_is_centred_and_minmax_range():
    mask = np.zeros((3, 3, 3), np.uint8)
    mask[1:] = 1
    constant = np.full((3, 3, 3), 4.0, np.float32)
    np.testing.assert_array_equal(vol.normalize_intensity(constant, mask, mode="zscore"), 0.0)

    data = np.arange(27, dtype=np.float32).reshape(3, 3, 3) * 2.0 - 5.0
    out = vol.normalize_intensity(data, mask, mode="minmax")
    inside = data[1:]
    np.testing.assert_allclose(out[1:], (inside - inside.min()) / (inside.max() - inside.min()), rtol=1e-6)
    assert out[1:].min() == 0.0 and out[1:].max() == 1.0
    assert np.all(out[0] == 0)
    assert out.dtype == np.float32


def test_normalize_none_and_unknown_mode():
    data = np.arange(8, dtype=np.float64).reshape(2, 2, 2)
    mask = np.ones((2, 2, 2), np.uint8)
    out = vol.normalize_intensity(data, mask, mode="none")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, data)
    with pytest.raises(ValueError, match="percentile"):
        vol.normalize_intensity(data, mask, mode="percentile")


# ----------------------------------------------------------------------------------------- preprocess


def test_preprocess_volume_end_to_end_keeps_geometry(tmp_path):
    data = np.zeros((20, 16, 12), np.float32)
    data[2:18, 3:13, 1:11] = np.random.default_rng(9).uniform(1, 3, size=(16, 10, 10))
    bright = (6, 9, 4)
    data[bright] = 500.0
    source_affine = AFFINES["LAS"]
    path = _save(tmp_path / "subject.nii", data, source_affine)

    out, meta = vol.preprocess_volume(path, spatial_size=(24, 12, 16), normalization="zscore")

    assert out.data.shape == out.mask.shape == (24, 12, 16)
    assert out.data.dtype == np.float32 and out.mask.dtype == np.uint8
    assert int(out.mask.sum()) == 20 * 12 * 12
    assert np.all(out.data[out.mask == 0] == 0)
    assert out.data[out.mask == 1].mean() == pytest.approx(0.0, abs=1e-5)
    assert nib.aff2axcodes(out.affine) == ("R", "A", "S")
    (new_index,) = np.argwhere(out.data == out.data.max())
    np.testing.assert_allclose(_world(out.affine, new_index), _world(source_affine, bright), atol=1e-9)
    assert meta.original_shape == (20, 16, 12)
    np.testing.assert_allclose(meta.spacing, ZOOMS, rtol=1e-6)
    assert meta.num_nonfinite == 0


def test_preprocess_volume_with_pixdim(tmp_path):
    data = np.full(SHAPE, 3.0, np.float32)
    data[0, 0, 0] = np.nan
    path = _save(tmp_path / "aniso.nii.gz", data, AFFINES["PSR"])

    out, meta = vol.preprocess_volume(path, spatial_size=(16, 16, 16), pixdim=(2.0, 2.0, 2.0))

    # RAS order of the PSR file: (8 x 3.5, 12 x 1.0, 10 x 2.0) mm -> 2 mm grid (14, 6, 10).
    np.testing.assert_allclose(meta.spacing, (2.0, 2.0, 2.0))
    np.testing.assert_allclose(nib.affines.voxel_sizes(out.affine), (2.0, 2.0, 2.0))
    assert meta.original_shape == SHAPE
    assert meta.num_nonfinite == 1
    assert int(out.mask.sum()) == 14 * 6 * 10
    assert np.all(np.isfinite(out.data))
    assert out.data.max() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="normalization"):
        vol.preprocess_volume(path, normalization="robust")
