"""mri_volumes: labels.csv rules, the volume example stage on real NIfTI files, the builder over dummy_data,
and `tfds build` end to end through the CLI."""

import csv
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import nibabel as nib
import numpy as np
import pytest
import tensorflow_datasets as tfds

import array_record_testing
import vidvol
from vidvol.builders import example_io
from vidvol.builders.transforms import volume_examples as ve
from vidvol.builders.writer import skip_report
from vidvol.datasets.mri_volumes import layout
from vidvol.datasets.mri_volumes import make_dummy_data as dummy
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples


# --------------------------------------------------------------------------------------------
# Helpers


def _write_csv(path: Path, header, rows) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _run(path, *, key="scan", origin="labels.csv:2", **spec):
    """All items volume_example yields for one file, through the writer's error handling."""
    source = ve.VolumeSource(path=str(path), key=key, features={"label": 0}, origin=origin)
    fn = functools.partial(ve.volume_example, spec=ve.VolumeSpec(**spec))
    return list(example_io.run_example_fn(fn, (key, source), "train"))


def _example(path, **spec):
    items = _run(path, **spec)
    examples = [i for i in items if not isinstance(i, example_io.Skip)]
    assert len(examples) == 1, items
    return examples[0][1]


def _world(affine, index):
    return nib.affines.apply_affine(np.asarray(affine, np.float64), np.asarray(index, np.float64))


# --------------------------------------------------------------------------------------------
# labels.csv


def test_reads_rows_and_assigns_subjects_to_splits_deterministically(tmp_path):
    rows = [(f"scans/s{s:03d}_{k}.nii.gz", str(s % 3), f"s{s:03d}") for s in range(300) for k in range(3)]
    csv_path = _write_csv(tmp_path / "labels.csv", ["path", "label", "subject"], rows)
    first = layout.read_labels_csv(str(csv_path))
    again = layout.read_labels_csv(str(csv_path))
    assert [(r.path, r.label, r.subject, r.split) for r in first] == [(r.path, r.label, r.subject, r.split) for r in again]
    assert [r.line for r in first[:3]] == [2, 3, 4]
    splits_of = {}
    for row in first:
        splits_of.setdefault(row.subject, set()).add(row.split)
    assert all(len(s) == 1 for s in splits_of.values()), "a subject straddles splits"
    counts = {split: sum(1 for s in splits_of.values() if split in s) for split in layout.SPLITS}
    assert 0.7 < counts["train"] / 300 < 0.9
    assert 0.04 < counts["validation"] / 300 < 0.16 and 0.04 < counts["test"] / 300 < 0.16
    # Reordering the CSV does not move anyone.
    _write_csv(tmp_path / "rev.csv", ["path", "label", "subject"], rows[::-1])
    reordered = {r.path: r.split for r in layout.read_labels_csv(str(tmp_path / "rev.csv"))}
    assert reordered == {r.path: r.split for r in first}


def test_without_subject_the_path_decides_the_split(tmp_path):
    rows = [(f"v/{i}.nii", "a") for i in range(200)]
    parsed = layout.read_labels_csv(str(_write_csv(tmp_path / "labels.csv", ["path", "label"], rows)))
    assert all(r.subject == "" for r in parsed)
    assert {r.split for r in parsed} == set(layout.SPLITS)
    assert [r.split for r in parsed] == [layout.split_for(p) for p, _ in rows]


def test_split_column_is_used_and_unknown_values_name_the_line(tmp_path):
    rows = [("a.nii", "x", "s1", "train"), ("b.nii", "y", "s2", " Validation "), ("c.nii", "x", "s3", "TEST")]
    parsed = layout.read_labels_csv(str(_write_csv(tmp_path / "labels.csv", ["path", "label", "subject", "split"], rows)))
    assert [r.split for r in parsed] == ["train", "validation", "test"]
    bad = _write_csv(tmp_path / "bad.csv", ["path", "label", "split"], [("a.nii", "x", "train"), ("b.nii", "x", "holdout")])
    with pytest.raises(ValueError, match=r"bad\.csv:3: unknown split 'holdout'"):
        layout.read_labels_csv(str(bad))


def test_label_column_is_configurable_and_pass_is_accepted(tmp_path):
    users = _write_csv(tmp_path / "labels.csv", ["path", "pass"], [("a.nii", "1"), ("b.nii", "0")])
    assert [r.label for r in layout.read_labels_csv(str(users), label_column="pass")] == ["1", "0"]
    # The default config reads the users' file unchanged through the `pass` alias.
    assert [r.label for r in layout.read_labels_csv(str(users))] == ["1", "0"]
    other = _write_csv(tmp_path / "dx.csv", ["Path", "Diagnosis"], [("a.nii", "AD")])
    assert [r.label for r in layout.read_labels_csv(str(other), label_column="diagnosis")] == ["AD"]


def test_missing_label_column_names_the_columns_found(tmp_path):
    csv_path = _write_csv(tmp_path / "labels.csv", ["path", "grade", "subject"], [("a.nii", "1", "s")])
    with pytest.raises(ValueError, match=r"labels\.csv: no label column 'label'; found columns \['path', 'grade', 'subject'\]"):
        layout.read_labels_csv(str(csv_path))
    # An explicitly configured column never falls back to an alias.
    users = _write_csv(tmp_path / "users.csv", ["path", "pass"], [("a.nii", "1")])
    with pytest.raises(ValueError, match=r"no label column 'outcome'; found columns \['path', 'pass'\]"):
        layout.read_labels_csv(str(users), label_column="outcome")
    nopath = _write_csv(tmp_path / "nopath.csv", ["file", "label"], [("a.nii", "1")])
    with pytest.raises(ValueError, match=r"no `path` column; found columns \['file', 'label'\]"):
        layout.read_labels_csv(str(nopath))


def test_empty_label_or_path_and_repeats_name_file_and_line(tmp_path):
    empty = _write_csv(tmp_path / "labels.csv", ["path", "label"], [("a.nii", "1"), ("b.nii", "  ")])
    with pytest.raises(ValueError, match=r"labels\.csv:3: empty label in column 'label' for b\.nii"):
        layout.read_labels_csv(str(empty))
    short = tmp_path / "short.csv"
    short.write_text("path,label\na.nii,1\n\nb.nii\n")
    with pytest.raises(ValueError, match=r"short\.csv:4: empty label"):
        layout.read_labels_csv(str(short))
    nopath = _write_csv(tmp_path / "nopath.csv", ["path", "label"], [("", "1")])
    with pytest.raises(ValueError, match=r"nopath\.csv:2: empty `path` cell"):
        layout.read_labels_csv(str(nopath))
    twice = _write_csv(tmp_path / "twice.csv", ["path", "label"], [("v/a.nii", "1"), ("b.nii", "0"), ("./v/a.nii", "1")])
    with pytest.raises(ValueError, match=r"twice\.csv:4: \./v/a\.nii is already listed at line 2"):
        layout.read_labels_csv(str(twice))
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        layout.read_labels_csv(str(tmp_path / "absent.csv"))
    header_only = _write_csv(tmp_path / "header.csv", ["path", "label"], [])
    with pytest.raises(ValueError, match="no rows"):
        layout.read_labels_csv(str(header_only))


def test_keys_and_paths_never_hold_a_local_absolute_path(tmp_path):
    manual = tmp_path / "manual"
    inside = layout.Row(str(manual / "v" / "a.nii"), "1", "", "train", 2, "labels.csv")
    outside = layout.Row(str(tmp_path / "elsewhere" / "b.nii.gz"), "1", "", "train", 3, "labels.csv")
    relative = layout.Row("v/./c.nii", "1", "", "train", 4, "labels.csv")
    assert layout.example_key(str(manual), inside) == "v/a.nii"
    assert layout.listed_path(str(manual), inside) == "v/a.nii"
    assert layout.example_key(str(manual), relative) == "v/c.nii"
    assert layout.local_path(str(manual), relative) == str(manual / "v" / "c.nii")
    key = layout.example_key(str(manual), outside)
    assert key.startswith("external/") and key.endswith("/b.nii.gz") and str(tmp_path) not in key
    assert layout.local_path(str(manual), outside) == outside.path


def test_fixed_label_names_reject_other_labels(tmp_path):
    rows = layout.read_labels_csv(str(_write_csv(tmp_path / "labels.csv", ["path", "label"], [("a.nii", "0"), ("b.nii", "3")])))
    layout.check_labels(rows[:1], ["0", "1"])
    with pytest.raises(ValueError, match=r"labels\.csv:3: label '3' is not one of the declared label_names"):
        layout.check_labels(rows, ["0", "1"])


# --------------------------------------------------------------------------------------------
# The volume example stage on real NIfTI files


@pytest.mark.parametrize("orientation", ["RAS", "LAS", "LPI"])
def test_marked_voxel_lands_where_the_stored_affine_says(tmp_path, orientation):
    shape, spacing, marked = (9, 11, 7), (1.0, 2.0, 3.0), (2, 3, 5)
    data = np.full(shape, 10.0, np.float32)
    data[marked] = 1000.0
    affine = dummy.affine_for(shape, spacing, orientation)
    affine[:3, 3] += (4.0, -7.0, 12.0)
    path = dummy.write_nifti(str(tmp_path / f"{orientation}.nii.gz"), data, affine, dtype=np.float32)
    ex = _example(path, spatial_size=(12, 12, 12))
    out_affine = ex["affine"].astype(np.float64)
    # Canonical RAS: a diagonal affine with positive voxel sizes.
    np.testing.assert_allclose(np.abs(out_affine[:3, :3]), np.diag(spacing), atol=1e-6)
    assert np.all(np.diag(out_affine)[:3] > 0)
    np.testing.assert_allclose(ex["spacing"], spacing, rtol=1e-6)
    found = np.unravel_index(np.argmax(ex["volume"]), ex["volume"].shape)
    np.testing.assert_allclose(_world(out_affine, found), _world(affine, marked), atol=1e-4)
    expected_index = np.rint(_world(np.linalg.inv(out_affine), _world(affine, marked))).astype(int)
    assert ex["volume"][tuple(expected_index)] == 1000.0
    assert ex["mask"].sum() == np.prod(shape)
    assert tuple(ex["original_shape"]) == shape


def test_permuted_axes_are_reordered_to_ras(tmp_path):
    # voxel axis 0 -> Superior, 1 -> Right, 2 -> Anterior, anisotropic.
    shape, marked = (6, 10, 8), (1, 7, 2)
    affine = np.array([[0, 1.5, 0, -5], [0, 0, 2.5, 3], [1.0, 0, 0, -2], [0, 0, 0, 1]])
    data = np.zeros(shape, np.float32)
    data[marked] = 5.0
    path = dummy.write_nifti(str(tmp_path / "sra.nii"), data, affine, dtype=np.float32)
    ex = _example(path, spatial_size=(10, 8, 6))
    np.testing.assert_allclose(ex["spacing"], (1.5, 2.5, 1.0))
    assert ex["mask"].all()  # (10, 8, 6) is the reoriented shape: nothing cropped, nothing padded
    found = np.unravel_index(np.argmax(ex["volume"]), ex["volume"].shape)
    np.testing.assert_allclose(_world(ex["affine"], found), _world(affine, marked), atol=1e-4)


def test_center_crop_and_pad_with_mask(tmp_path):
    shape = (40, 12, 10)
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    path = dummy.write_nifti(str(tmp_path / "big.nii.gz"), data, dummy.affine_for(shape, (1, 1, 1)), dtype=np.float32)
    ex = _example(path, spatial_size=(16, 16, 16))
    assert ex["volume"].shape == ex["mask"].shape == (16, 16, 16)
    assert ex["volume"].dtype == np.float32 and ex["mask"].dtype == np.uint8
    # Axis 0 cropped to its centre 16 (start 40//2 - 8 = 12); axes 1, 2 padded by (2, 2) and (3, 3).
    np.testing.assert_array_equal(ex["volume"][:, 2:14, 3:13], data[12:28])
    expected_mask = np.zeros((16, 16, 16), np.uint8)
    expected_mask[:, 2:14, 3:13] = 1
    np.testing.assert_array_equal(ex["mask"], expected_mask)
    assert ex["mask"].sum() == 16 * 12 * 10
    assert not ex["volume"][ex["mask"] == 0].any()
    # Output voxel (0, 2, 3) is source voxel (12, 0, 0).
    np.testing.assert_allclose(_world(ex["affine"], (0, 2, 3)), _world(dummy.affine_for(shape, (1, 1, 1)), (12, 0, 0)))


def test_whole_fit_keeps_a_whole_brain_scan_that_the_centre_crop_cuts(tmp_path):
    # A 1 mm whole-brain-sized scan (197x233x189, as MNI152 1 mm), the "brain" an ellipsoid filling
    # most of the field of view; the default 128^3 grid at 1 mm cuts it, fit="whole" keeps all of it.
    shape, spacing = (197, 233, 189), (1.0, 1.0, 1.0)
    grids = np.meshgrid(*(np.linspace(-1.0, 1.0, n, dtype=np.float32) for n in shape), indexing="ij")
    brain = (sum(g**2 for g in grids) <= 0.9**2).astype(np.float32) * 100.0
    path = dummy.write_nifti(str(tmp_path / "t1.nii.gz"), brain, dummy.affine_for(shape, spacing), dtype=np.float32)
    crop = _example(path, spatial_size=(128, 128, 128))
    whole = _example(path, spatial_size=(128, 128, 128), fit="whole")
    voxel_ml = {"crop": 1.0, "whole": float(np.prod(whole["spacing"]))}
    brain_ml = float((brain > 50).sum())
    assert (crop["volume"] > 50).sum() * voxel_ml["crop"] < 0.9 * brain_ml  # the crop cut the brain
    assert abs((whole["volume"] > 50).sum() * voxel_ml["whole"] - brain_ml) < 0.03 * brain_ml  # nothing cut
    # Isotropic voxel size set by the longest axis (233 mm -> 128 voxels); the others padded and masked.
    np.testing.assert_allclose(whole["spacing"], [233 / 128] * 3, rtol=1e-6)
    box = [int(round(n * 128 / 233)) for n in shape]  # 108, 128, 104
    assert whole["mask"].sum() == np.prod(box)
    lo = [(128 - n) // 2 for n in box]
    expected = np.zeros((128, 128, 128), np.uint8)
    expected[lo[0]:lo[0] + box[0], lo[1]:lo[1] + box[1], lo[2]:lo[2] + box[2]] = 1
    np.testing.assert_array_equal(whole["mask"], expected)
    assert not whole["volume"][whole["mask"] == 0].any()
    # The affine still maps voxels to the right world positions: the brain's centre stays at the origin.
    centre = np.argwhere(whole["volume"] > 50).mean(axis=0)
    np.testing.assert_allclose(_world(whole["affine"], centre), (0, 0, 0), atol=1.0)
    with pytest.raises(ValueError, match="leave pixdim unset"):
        ve.VolumeSpec(fit="whole", pixdim=(1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="fit must be one of"):
        ve.VolumeSpec(fit="stretch")


def test_int16_with_scaling_gives_the_scaled_values(tmp_path):
    shape = (10, 12, 8)
    path = dummy.write_nifti(str(tmp_path / "i16.nii.gz"), dummy.head_like(shape, 3), dummy.affine_for(shape, (1, 1.2, 1.5)))
    img = nib.load(path)
    assert img.get_data_dtype() == np.int16
    assert img.dataobj.slope != 1.0  # nibabel stored scl_slope to fit the floats into int16
    ex = _example(path, spatial_size=shape)
    np.testing.assert_allclose(ex["volume"], img.get_fdata(), rtol=1e-6, atol=1e-3)
    assert len(np.unique(ex["volume"])) > 100


def test_big_endian_nifti2_float(tmp_path):
    shape = (10, 12, 9)
    data = dummy.head_like(shape, 4)
    affine = dummy.affine_for(shape, (2.0, 2.0, 2.5), "LPS")
    path = dummy.write_nifti(str(tmp_path / "be2.nii"), data, affine, dtype=np.float32, nifti2=True, big_endian=True)
    img = nib.load(path)
    assert isinstance(img, nib.Nifti2Image) and img.header.endianness == ">"
    ex = _example(path, spatial_size=(12, 12, 12))
    canonical = nib.as_closest_canonical(img)
    np.testing.assert_array_equal(ex["volume"][1:11, 0:12, 1:10], canonical.get_fdata().astype(np.float32))
    np.testing.assert_allclose(_world(ex["affine"], (1, 0, 1)), _world(canonical.affine, (0, 0, 0)), atol=1e-5)


def test_4d_picks_volume_index(tmp_path):
    shape = (8, 8, 6)
    series = np.stack([np.full(shape, 100.0 * (t + 1), np.float32) for t in range(3)], axis=-1)
    path = dummy.write_nifti(str(tmp_path / "bold.nii.gz"), series, dummy.affine_for(shape, (3, 3, 3)), dtype=np.float32)
    assert np.all(_example(path, spatial_size=shape)["volume"] == 100.0)
    ex = _example(path, spatial_size=shape, volume_index=2)
    assert np.all(ex["volume"] == 300.0) and tuple(ex["original_shape"]) == shape
    (skip,) = _run(path, spatial_size=shape, volume_index=3)
    assert isinstance(skip, example_io.Skip) and "volume_index 3 out of range for 3 volume(s)" in skip.reason


def test_pixdim_resamples_and_stores_the_new_spacing(tmp_path):
    shape = (10, 12, 8)
    path = dummy.write_nifti(
        str(tmp_path / "aniso.nii.gz"), dummy.head_like(shape, 5), dummy.affine_for(shape, (1.0, 2.0, 3.0)), dtype=np.float32
    )
    ex = _example(path, spatial_size=(16, 32, 16), pixdim=(2.0, 1.0, 2.0))
    np.testing.assert_allclose(ex["spacing"], (2.0, 1.0, 2.0))
    np.testing.assert_allclose(np.linalg.norm(ex["affine"][:3, :3], axis=0), (2.0, 1.0, 2.0), rtol=1e-6)
    assert ex["mask"].sum() == 5 * 24 * 12  # round(shape * spacing / pixdim)
    assert tuple(ex["original_shape"]) == shape


def test_normalization_inside_the_mask(tmp_path):
    shape = (10, 12, 8)
    path = dummy.write_nifti(str(tmp_path / "n.nii.gz"), dummy.head_like(shape, 6) + 50, dummy.affine_for(shape, (1, 1, 1)), dtype=np.float32)
    ex = _example(path, spatial_size=(12, 12, 12), normalization="zscore")
    inside = ex["volume"][ex["mask"] == 1]
    assert abs(inside.mean()) < 1e-4 and abs(inside.std() - 1.0) < 1e-3
    assert not ex["volume"][ex["mask"] == 0].any()
    ex = _example(path, spatial_size=(12, 12, 12), normalization="minmax")
    inside = ex["volume"][ex["mask"] == 1]
    assert inside.min() == 0.0 and abs(inside.max() - 1.0) < 1e-6
    with pytest.raises(ValueError, match="normalization must be one of"):
        ve.VolumeSpec(normalization="robust")


def test_nonfinite_voxels_are_zeroed_and_reported(tmp_path):
    shape = (8, 8, 8)
    data = np.full(shape, 7.0, np.float32)
    data[1, 2, 3] = data[4, 4, 4] = data[0, 0, 7] = np.nan
    data[5, 5, 5], data[6, 1, 0] = np.inf, -np.inf
    path = dummy.write_nifti(str(tmp_path / "nan.nii"), data, dummy.affine_for(shape, (1, 1, 1)), dtype=np.float32)
    items = _run(path, key="v/nan.nii", spatial_size=shape)
    skips = [i for i in items if isinstance(i, example_io.Skip)]
    examples = [i for i in items if not isinstance(i, example_io.Skip)]
    assert skips == [example_io.Skip("v/nan.nii", "5 non-finite voxels set to 0", "train", "v/nan.nii")]
    (key, ex), = examples
    assert key == "v/nan.nii" and np.isfinite(ex["volume"]).all()
    assert (ex["volume"] == 0).sum() == 5 and ex["volume"][5, 5, 5] == 0


def _bad_inputs(folder: Path) -> dict[str, tuple[Path, str]]:
    """Unusable inputs, each with a phrase its skip reason must hold."""
    folder.mkdir(parents=True, exist_ok=True)
    good = dummy.write_nifti(str(folder / "good.nii.gz"), dummy.head_like((16, 16, 16), 1), np.eye(4))
    truncated = folder / "truncated.nii.gz"
    truncated.write_bytes(Path(good).read_bytes()[: os.path.getsize(good) // 2])
    (folder / "empty.nii.gz").write_bytes(b"")
    (folder / "notes.nii").write_text("subject,notes\nsub-01,not an image\n" * 20)
    png = folder / "photo.nii.gz"
    ok, buf = cv2.imencode(".png", np.full((20, 20, 3), 128, np.uint8))
    png.write_bytes(buf.tobytes())
    flat = folder / "slice2d.nii"
    nib.save(nib.Nifti1Image(np.ones((12, 10), np.float32), np.eye(4)), str(flat))
    return {
        "missing": (folder / "missing.nii.gz", "not found"),
        "zero-byte": (folder / "empty.nii.gz", "Empty file"),
        "truncated": (truncated, "truncated or corrupt"),
        "non-NIfTI text": (folder / "notes.nii", "not a readable NIfTI"),
        "non-NIfTI png": (png, "not a readable NIfTI"),
        "2-D": (flat, "expected a 3-D or 4-D image, got 2-D"),
    }


def test_bad_inputs_become_whole_input_skips_with_reasons(tmp_path):
    for name, (path, phrase) in _bad_inputs(tmp_path).items():
        items = _run(path, key=f"v/{path.name}", origin="labels.csv:9", spatial_size=(8, 8, 8))
        assert len(items) == 1 and isinstance(items[0], example_io.Skip), (name, items)
        skip = items[0]
        assert skip.source == f"v/{path.name}" and skip.example == "" and skip.split == "train"
        assert phrase in skip.reason and str(path) in skip.reason, (name, skip.reason)
    missing = _run(tmp_path / "missing.nii.gz", origin="labels.csv:9")[0]
    assert missing.reason.startswith("FileNotFoundError") and "labels.csv:9" in missing.reason


# --------------------------------------------------------------------------------------------
# The builder


class MriVolumesDummyDataTest(tfds.testing.DatasetBuilderTestCase):
    """Builds small_32 from dummy_data/ through Beam and reads every split back."""

    DATASET_CLASS = mri.Builder
    BUILDER_CONFIG_NAMES_TO_TEST = [  # named (unregistered) configs
        mri.Builder.get_builder_config("small_32"), mri.Builder.get_builder_config("small_32_whole")]
    SPLITS = {"train": 4, "validation": 1, "test": 1}
    SKIP_CHECKSUMS = True


class MriVolumesDummyDataArrayRecordTest(array_record_testing.ArrayRecordBuilderTest, MriVolumesDummyDataTest):
    """The same checks with the builder writing ArrayRecord shards (`--file_format array_record`), read back by index."""
    pass


def test_dummy_data_matches_its_generator(tmp_path):
    rows = dummy.write_dummy_data(str(tmp_path))
    shipped = layout.read_labels_csv(os.path.join(dummy.DUMMY_DIR, layout.LABELS_CSV))
    assert [(r.path, r.label, r.subject) for r in shipped] == [(r["path"], r["label"], r["subject"]) for r in rows]
    assert {r.split for r in shipped} == {"train", "validation", "test"}
    for row in rows:
        ours = nib.load(os.path.join(dummy.DUMMY_DIR, row["path"]))
        fresh = nib.load(str(tmp_path / row["path"]))
        np.testing.assert_array_equal(ours.get_fdata(), fresh.get_fdata())
        np.testing.assert_array_equal(ours.affine, fresh.affine)


def test_bad_csv_fails_the_build_before_any_work(tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    _write_csv(manual / "labels.csv", ["path", "diagnosis"], [("a.nii", "1")])
    builder = mri.Builder(data_dir=str(tmp_path / "out"), config="small_32")
    with pytest.raises(ValueError, match=r"no label column 'label'; found columns \['path', 'diagnosis'\]"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))


def _users_layout(manual: Path) -> dict:
    """The users' form: labels.csv with a `pass` column, RAS and LAS int16 scans, and bad rows."""
    written = samples.write_mri_volumes(
        str(manual), num_subjects=11, scans_per_subject=2, shape=(20, 24, 18), spacing=(1.0, 1.2, 1.5),
        label_column="pass", labels=("1", "0"),
    )
    bad = _bad_inputs(manual / "bad")
    nan_data = dummy.head_like((20, 24, 18), 9)
    nan_data[3, 4, 5] = nan_data[10, 10, 10] = np.nan
    nan_data[0, 0, 0] = np.inf
    dummy.write_nifti(str(manual / "volumes" / "nan.nii.gz"), nan_data, dummy.affine_for((20, 24, 18), (1, 1.2, 1.5)), dtype=np.float32)
    with open(manual / "labels.csv", "a", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        for path, _ in bad.values():
            writer.writerow([f"bad/{path.name}", "0", ""])
        writer.writerow(["volumes/nan.nii.gz", "1", "sub-nan"])
    # One row listed by absolute path (inside manual_dir): key and `path` stay relative.
    rows = list(csv.reader(open(manual / "labels.csv", encoding="utf-8")))
    absolute_rel = rows[1][0]
    rows[1][0] = str(manual / absolute_rel)
    _write_csv(manual / "labels.csv", rows[0], rows[1:])
    return {"written": written, "bad": {f"bad/{p.name}": phrase for p, phrase in bad.values()}, "absolute": absolute_rel}


@pytest.mark.slow
def test_tfds_build_cli_then_tfds_load(tmp_path):
    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    expected = _users_layout(manual)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [
        sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", "mri_volumes/small_32",
        "--imports", "vidvol", "--manual_dir", str(manual), "--data_dir", str(data_dir),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summaries = re.findall(r"mri_volumes/small_32 (\w+): (\d+) examples .*?, (\d+) inputs skipped", proc.stdout + proc.stderr)
    assert sum(int(skipped) for _, _, skipped in summaries) == len(expected["bad"]), summaries

    builder = tfds.builder("mri_volumes/small_32", data_dir=str(data_dir))
    label = builder.info.features["label"]
    assert label.names == ["0", "1"]  # reloaded from label.labels.txt
    assert tfds.builder_from_directory(builder.data_dir).info.features["label"].names == ["0", "1"]
    assert {split for split, _, _ in summaries} == set(builder.info.splits)
    volumes = expected["written"]["volumes"]
    good = set(volumes) | {"volumes/nan.nii.gz"}
    subject_of = {row["path"]: row["subject"] for row in expected["written"]["rows"]}
    label_of = {row["path"]: row["pass"] for row in expected["written"]["rows"]}
    seen, split_of_subject = {}, {}
    for split in builder.info.splits:
        for ex in tfds.as_numpy(tfds.load("mri_volumes/small_32", split=split, data_dir=str(data_dir))):
            path = ex["path"].decode()
            assert path not in seen
            seen[path] = split
            subject = ex["subject"].decode()
            split_of_subject.setdefault(subject, set()).add(split)
            assert ex["volume"].shape == (32, 32, 32) and ex["volume"].dtype == np.float32
            assert ex["mask"].dtype == np.uint8 and set(np.unique(ex["mask"])) == {0, 1}
            assert ex["mask"].sum() == 20 * 24 * 18 and not ex["volume"][ex["mask"] == 0].any()
            np.testing.assert_array_equal(ex["original_shape"], (20, 24, 18))
            np.testing.assert_allclose(ex["spacing"], (1.0, 1.2, 1.5), rtol=1e-6)
            if path == "volumes/nan.nii.gz":
                assert subject == "sub-nan" and label.int2str(ex["label"]) == "1"
                assert np.isfinite(ex["volume"]).all() and ex["volume"][6 + 3, 4 + 4, 7 + 5] == 0
                continue
            assert subject == subject_of[path] and label.int2str(ex["label"]) == label_of[path]
            # Independent oracle: nibabel's canonical RAS data, padded symmetrically to 32^3.
            canonical = nib.as_closest_canonical(nib.load(str(manual / path)))
            np.testing.assert_allclose(ex["volume"][6:26, 4:28, 7:25], canonical.get_fdata(), rtol=1e-5, atol=1e-3)
            np.testing.assert_allclose(_world(ex["affine"], (6, 4, 7)), _world(canonical.affine, (0, 0, 0)), atol=1e-4)
    assert set(seen) == good and expected["absolute"] in seen
    assert all(len(s) == 1 for s in split_of_subject.values()), split_of_subject
    assert len(set(seen.values())) >= 2

    report = skip_report.read_skip_report(builder.data_dir)
    whole = {s["source"]: s["reason"] for s in report["skipped"] if not s["example"]}
    assert set(whole) == set(expected["bad"])
    for source, phrase in expected["bad"].items():
        assert phrase in whole[source], (source, whole[source])
    parts = [s for s in report["skipped"] if s["example"]]
    assert [(p["source"], p["reason"], p["example"]) for p in parts] == [
        ("volumes/nan.nii.gz", "3 non-finite voxels set to 0", "volumes/nan.nii.gz")
    ]
    assert sum(s["examples"] for s in report["splits"].values()) == len(good)

    (volume, mask), lab = next(iter(tfds.load("mri_volumes/small_32", split="train", data_dir=str(data_dir), as_supervised=True)))
    assert volume.shape == mask.shape == (32, 32, 32) and lab.shape == ()
    assert volume.dtype.name == "float32" and mask.dtype.name == "uint8" and lab.dtype.name == "int64"
    assert (Path(builder.data_dir) / "label.labels.txt").read_text().split() == ["0", "1"]


def test_config_rejects_bad_parameters_at_construction():
    with pytest.raises(ValueError, match="normalization must be one of"):
        mri.MriVolumesConfig(name="bad", normalization="robust")
    with pytest.raises(ValueError, match="pixdim must be None or 3 positive numbers"):
        mri.MriVolumesConfig(name="bad", pixdim=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="spatial_size must be 3 positive ints"):
        mri.MriVolumesConfig(name="bad", spatial_size=(32, 32))
    # JSON configs arrive with lists; the recipe turns them into tuples.
    spec = mri.MriVolumesConfig(name="ok", spatial_size=[16, 16, 8], pixdim=[1, 1, 2]).volume_spec
    assert spec.spatial_size == (16, 16, 8) and spec.pixdim == (1.0, 1.0, 2.0)


# --------------------------------------------------------------------------------------------
# Empty splits (the reproduction: 11 rows, the only `test` scan missing)


def test_split_left_empty_is_not_registered_and_every_reader_names_it(tmp_path, build_in_process, capsys):
    manual = tmp_path / "manual"
    samples.write_mri_volumes(str(manual), num_subjects=11, shape=(12, 12, 12))
    assert layout.split_for("sub-011") == "test" and layout.split_for("sub-010") == "validation"
    os.remove(manual / "volumes" / "sub-011_scan-0.nii.gz")  # hashing put only this scan in test
    builder = build_in_process(mri.Builder, manual, tmp_path / "data", config="small_32")
    err = capsys.readouterr().err
    assert "mri_volumes/small_32 test: empty — every input skipped: 1 missing file; not registered" in err
    assert set(builder.info.splits) == {"train", "validation"}
    data_dir = str(tmp_path / "data")
    with pytest.raises(ValueError, match=r"Unknown split 'test'. Should be one of \['train', 'validation'\]"):
        tfds.load("mri_volumes/small_32", split="test", data_dir=data_dir)
    with pytest.raises(ValueError, match=r"no split 'test'; it came out empty when the dataset was built \(every input "
                                         r"skipped: 1 missing file\), so it was not registered. The splits there are: "
                                         r"train \(9 examples\), validation \(1 example\)"):
        vidvol.load("mri_volumes/small_32", split="test", batch_size=2, data_dir=data_dir)
    report = skip_report.read_skip_report(builder.data_dir)
    assert report["empty_splits"] == {"test": "every input skipped: 1 missing file"}
    assert [s["source"] for s in report["skipped"]] == ["volumes/sub-011_scan-0.nii.gz"]


def test_empty_split_reasons_say_how_rows_were_split(tmp_path):
    rows = [layout.Row(path=f"s{i}.nii", label="0", subject=f"sub-{i}", split="train", line=i + 2, csv_path="/m/labels.csv")
            for i in range(7)]
    assert layout.empty_split_reason(rows, "test") == "7 subjects; hashing (~10% to test) put none in test"
    alone = [layout.Row(path="a.nii", label="0", subject="", split="train", line=2, csv_path="/m/labels.csv")]
    assert layout.empty_split_reason(rows[:1] + alone, "validation") == (
        "1 subject and 1 scan without a subject; hashing (~10% to validation) put none in validation")
    given = [layout.Row(path="a.nii", label="0", subject="", split="train", line=2, csv_path="/m/labels.csv", split_given=True)]
    assert layout.empty_split_reason(given, "test") == "the `split` column of labels.csv names no row 'test'"
    by_split = layout.splits_with_reasons(rows)
    assert list(by_split) == ["train", "validation", "test"] and by_split["train"] == (rows, "")
    manual = tmp_path / "m"
    manual.mkdir()
    _write_csv(manual / "labels.csv", ["path", "label", "split"], [("a.nii", "0", "train")])
    assert all(r.split_given for r in layout.read_labels_csv(str(manual / "labels.csv")))
