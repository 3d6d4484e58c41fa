"""`vidvol.Output(dtype=..., mask_dtype=...)` in `vidvol.load`, `vidvol.dequantize_params` and `vidvol.layers.Dequantize`.

Stored integers x scale + offset must give `vidvol.load`'s float32 output: checked with NumPy and
with the Keras layer on this (GPU-less) machine, alone and inside small Keras models, over
mri_volumes and hmdb51 datasets built by the real Beam pipeline from real NIfTI / AVI files.
"""

from __future__ import annotations

import csv
import os

import keras
import nibabel as nib
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import exit_check  # tests/exit_check.py (tests/ is on sys.path via conftest)
from in_process_build import build as _build  # tests/in_process_build.py (tests/ on sys.path)
import vidvol
from vidvol import Normalize, Output, ReadSpec, Tuning
from vidvol import layers
from vidvol import readers
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri

MEAN, STD = (0.45, 0.40, 0.35), (0.225, 0.25, 0.3)


def _write_nifti(path: str, data: np.ndarray, slope: float = 1.0) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = nib.Nifti1Image(data, np.diag([1.0, 1.0, 1.2, 1.0]))
    image.set_data_dtype(np.int16)
    if slope != 1.0:
        image.header.set_slope_inter(slope, 0.0)
    nib.save(image, path)


@pytest.fixture(scope="module")
def mri_int16(tmp_path_factory):
    """mri_volumes/small_32 from int16 NIfTI (slope 1, as scanners write them).

    train: 3 scans larger than the 32^3 grid (cropped: every mask full); validation: 1 smaller
    scan (padded: a partial mask); test: 1 scan with scl_slope 0.37 (non-whole values: stored float32).
    """
    root = tmp_path_factory.mktemp("mri_int16")
    manual = root / "manual"
    rng = np.random.default_rng(7)
    rows = []
    for i, (shape, split, slope) in enumerate([((34, 36, 33), "train", 1.0), ((35, 33, 34), "train", 1.0),
                                                ((33, 34, 36), "train", 1.0), ((24, 28, 30), "validation", 1.0),
                                                ((34, 34, 34), "test", 0.37)]):
        rel = f"volumes/sub-{i}.nii.gz"
        data = rng.integers(-300, 2500, size=shape).astype(np.int16)
        _write_nifti(str(manual / rel), data, slope)
        rows.append([rel, str(i % 2), f"sub-{i}", split])
    with open(manual / "labels.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "subject", "split"])
        writer.writerows(rows)
    return _build(mri.Builder, "small_32", manual, root / "data")


def _eval(builder, split, batch, **kw):
    """Every batch of an evaluation pass (file and example order fixed) as NumPy."""
    return list(tfds.as_numpy(readers.load(builder, split, batch, training=False, **kw)))


def _out(normalize: Normalize = Normalize(), **output) -> ReadSpec:
    """A spec with these Output fields (and `normalize`)."""
    return ReadSpec(normalize=normalize, output=Output(**output))


# -- MRI ----------------------------------------------------------------------------------------


def test_int16_volumes_times_scale_plus_offset_equal_float32(mri_int16):
    floats = _eval(mri_int16, "train", 2)
    ints = _eval(mri_int16, "train", 2, spec=_out(dtype="int16", mask_dtype="uint8"))
    dq = vidvol.dequantize_params(mri_int16, "int16")
    assert (dq.feature, dq.output_dtype, dq.stored_dtype, dq.scale, dq.offset) == ("volume", "int16", "int16", 1.0, 0.0)
    assert vidvol.dequantize_params(mri_int16) == dq  # default: the stored dtype
    assert len(ints) == len(floats) == 2
    for ((vf, mf), yf), ((vi, mi), yi) in zip(floats, ints):
        assert vi.dtype == np.int16 and mi.dtype == np.uint8 and vf.dtype == np.float32
        np.testing.assert_array_equal(dq.apply_np(vi), vf)
        np.testing.assert_array_equal(mi.astype(np.float32), mf)
        np.testing.assert_array_equal(yi, yf)
        assert np.abs(vf).max() > 255  # the stored range, not rescaled


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_volumes_are_the_float32_volumes_cast(mri_int16, dtype):
    floats = _eval(mri_int16, "train", 3)
    halves = _eval(mri_int16, "train", 3, spec=_out(dtype=getattr(tf, dtype)))
    ((vf, _), _), ((vh, mh), _) = floats[0], halves[0]
    assert halves[0][0][0].dtype == tf.as_dtype(dtype).as_numpy_dtype and mh.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(vh, np.float32), tf.cast(tf.cast(vf, dtype), tf.float32).numpy())


@pytest.mark.parametrize("mask_dtype", ["float32", "bfloat16", "float16", "uint8", "bool", tf.bool, np.uint8])
def test_mask_dtypes_give_the_same_mask(mri_int16, mask_dtype):
    ds = readers.load(mri_int16, "validation", 1, training=False, spec=_out(mask_dtype=mask_dtype))
    expected_dtype = tf.as_dtype(mask_dtype)
    assert ds.element_spec[0][1].dtype == expected_dtype
    (_, mask), _ = next(iter(ds))
    reference = next(iter(tfds.as_numpy(mri_int16.as_dataset(split="validation"))))["mask"]
    assert 0 < reference.sum() < reference.size  # a padded scan: a partial box
    np.testing.assert_array_equal(tf.cast(mask, tf.uint8).numpy()[0], reference)


def test_mask_left_out_when_every_voxel_is_real(mri_int16):
    ds = readers.load(mri_int16, "train", 3, training=False, spec=_out(dtype="int16", mask_dtype=None))
    volume_spec, label_spec = ds.element_spec
    assert isinstance(volume_spec, tf.TensorSpec) and volume_spec.dtype == tf.int16
    assert volume_spec.shape[1:] == (32, 32, 32) and label_spec.shape[1:] == ()
    volume, _ = next(iter(tfds.as_numpy(ds)))
    ((reference, mask), _), = _eval(mri_int16, "train", 3)
    assert mask.all()
    np.testing.assert_array_equal(volume, reference)


def test_left_out_mask_with_padding_stops_the_read_naming_the_fix(mri_int16):
    ds = readers.load(mri_int16, "validation", 1, training=False, spec=_out(mask_dtype=None))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mask is not all ones.*pass Output\(mask_dtype=tf.uint8\)"):
        list(ds)


@pytest.mark.slow
def test_int16_of_a_volume_stored_as_float_is_an_error_naming_float_output(mri_int16):
    floats = _eval(mri_int16, "test", 1)
    assert np.any(floats[0][0][0] != np.rint(floats[0][0][0]))  # really non-whole values
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"stored as float32.*use output_dtype float32"):
        _eval(mri_int16, "test", 1, spec=_out(dtype="int16"))
    np.testing.assert_array_equal(_eval(mri_int16, "test", 1, spec=_out(dtype="float16"))[0][0][0],
                                  floats[0][0][0].astype(np.float16))


def test_dict_output_takes_the_output_dtype_and_keeps_the_stored_mask(mri_int16):
    batch = _eval(mri_int16, "train", 3, spec=_out(dtype="int16", features=["volume", "mask", "label"]))[0]
    reference = _eval(mri_int16, "train", 3, spec=_out(features=["volume", "mask", "label"]))[0]
    assert batch["volume"].dtype == np.int16 and batch["mask"].dtype == np.uint8
    np.testing.assert_array_equal(batch["volume"].astype(np.float32), reference["volume"])
    np.testing.assert_array_equal(batch["mask"], reference["mask"])


def test_per_example_parse_gives_the_same_int16_batches(mri_int16):
    kw = dict(seed=3, spec=_out(dtype="int16", mask_dtype="bool"))
    per_batch = list(tfds.as_numpy(readers.load(mri_int16, "train", 2, **kw)))
    per_example = list(tfds.as_numpy(readers.load(mri_int16, "train", 2, tuning=Tuning(parse_per_batch=False), **kw)))
    assert len(per_batch) == len(per_example) == 1
    for a, b in zip(tf.nest.flatten(per_batch), tf.nest.flatten(per_example)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_keras_dequantize_on_int16_volumes_inside_a_model(mri_int16):
    floats = _eval(mri_int16, "train", 3)
    ints = _eval(mri_int16, "train", 3, spec=_out(dtype="int16", mask_dtype="uint8"))
    (vf, mf), _ = floats[0]
    (vi, mi), _ = ints[0]
    volume = keras.Input((32, 32, 32), dtype="int16")
    mask = keras.Input((32, 32, 32), dtype="uint8")
    x = vidvol.dequantize_params(mri_int16, "int16").layer()(volume)
    m = layers.Dequantize()(mask)
    out = keras.layers.GlobalAveragePooling2D()(keras.layers.Multiply()([x, m]))
    model = keras.Model([volume, mask], [x, out])
    float_volume, float_mask = keras.Input((32, 32, 32)), keras.Input((32, 32, 32))
    reference = keras.Model([float_volume, float_mask],
                            keras.layers.GlobalAveragePooling2D()(keras.layers.Multiply()([float_volume, float_mask])))
    dequantized, pooled = model.predict([vi, mi], verbose=0)
    np.testing.assert_array_equal(dequantized, vf)
    np.testing.assert_allclose(pooled, reference.predict([vf, mf], verbose=0), rtol=1e-6)


# -- video --------------------------------------------------------------------------------------


def test_uint8_frames_over_255_equal_float32_frames(hmdb_small):
    floats = _eval(hmdb_small, "test", 4)
    ints = _eval(hmdb_small, "test", 4, spec=_out(dtype="uint8"))
    dq = vidvol.dequantize_params(hmdb_small, "uint8")
    assert (dq.feature, dq.stored_dtype, dq.offset) == ("video", "uint8", 0.0) and dq.scale == pytest.approx(1 / 255)
    assert len(ints) == len(floats) >= 1
    for ((vf, mf), yf), ((vi, mi), yi) in zip(floats, ints):
        assert vi.dtype == np.uint8 and vi.shape == vf.shape and vi.max() > 100
        np.testing.assert_allclose(vi / 255.0, vf, atol=1e-6)
        np.testing.assert_array_equal(mi, mf)
        np.testing.assert_array_equal(yi, yf)


def test_uint8_frames_with_per_channel_normalization_through_the_keras_layer(hmdb_small):
    floats = _eval(hmdb_small, "test", 4, spec=ReadSpec(normalize=Normalize(MEAN, STD)))
    ints = _eval(hmdb_small, "test", 4, spec=_out(dtype="uint8"))
    dq = vidvol.dequantize_params(hmdb_small, "uint8", mean=MEAN, std=STD)
    assert len(dq.scale) == len(dq.offset) == 3
    (vf, _), _ = floats[0]
    (vi, _), _ = ints[0]
    np.testing.assert_allclose(dq.apply_np(vi), vf, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(dq.layer()(vi)), vf, rtol=1e-5, atol=1e-5)
    # Inside a small model: uint8 input -> Dequantize -> Conv3D equals the same Conv3D on float32 frames.
    conv = keras.layers.Conv3D(2, 3, padding="same", kernel_initializer=keras.initializers.RandomNormal(seed=1))
    video = keras.Input(vi.shape[1:], dtype="uint8")
    model = keras.Model(video, keras.layers.GlobalAveragePooling3D()(conv(layers.Dequantize(dq.scale, dq.offset)(video))))
    twin_in = keras.Input(vf.shape[1:])
    twin = keras.Model(twin_in, keras.layers.GlobalAveragePooling3D()(conv(twin_in)))
    np.testing.assert_allclose(model.predict(vi, verbose=0), twin.predict(vf, verbose=0), rtol=1e-5, atol=1e-5)


def test_bfloat16_frames_are_the_float32_frames_cast(hmdb_small):
    floats = _eval(hmdb_small, "test", 4, spec=ReadSpec(normalize=Normalize(mean=0.5, std=0.25)))
    halves = _eval(hmdb_small, "test", 4, spec=_out(Normalize(mean=0.5, std=0.25), dtype="bfloat16"))
    (vf, _), _ = floats[0]
    (vh, _), _ = halves[0]
    np.testing.assert_array_equal(np.asarray(vh, np.float32), tf.cast(tf.cast(vf, tf.bfloat16), tf.float32).numpy())


# -- the layer and the errors -------------------------------------------------------------------


def test_dequantize_layer_saves_and_loads_with_its_scale_offset_and_dtype(tmp_path):
    x = keras.Input((4, 3), dtype="uint8")
    model = keras.Model(x, layers.Dequantize([0.5, 1.0, 2.0], -1.0, dtype="bfloat16", name="dq")(x))
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    data = np.arange(12, dtype=np.uint8).reshape(1, 4, 3)
    out = keras.ops.convert_to_numpy(loaded(data))
    assert loaded.get_layer("dq").get_config()["scale"] == [0.5, 1.0, 2.0] and str(out.dtype) == "bfloat16"
    np.testing.assert_array_equal(out.astype(np.float32), data * np.float32([0.5, 1.0, 2.0]) - 1.0)
    with pytest.raises(ValueError, match="2 scale values for inputs with 3 channels"):
        layers.Dequantize([1.0, 2.0])(keras.Input((4, 3)))


def test_bad_output_and_mask_dtypes_are_clear_errors(mri_int16, hmdb_small):
    with pytest.raises(ValueError, match=r"Output.dtype must be one of \['float32', 'bfloat16', 'float16', 'uint8', "
                                         r"'int16'\].*got 'float64'"):
        readers.load(mri_int16, "train", 2, spec=_out(dtype="float64"))
    with pytest.raises(ValueError, match=r"'volume' is stored as int16, so Output.dtype must be one of "
                                         r"\['float32', 'bfloat16', 'float16', 'int16'\], got 'uint8'"):
        readers.load(mri_int16, "train", 2, spec=_out(dtype="uint8"))
    with pytest.raises(ValueError, match=r"'video' is stored as uint8.*'uint8'\], got 'int16'"):
        readers.load(hmdb_small, "train", 2, spec=_out(dtype=tf.int16))
    with pytest.raises(ValueError, match="resize on the device"):
        readers.load(hmdb_small, "train", 2, spec=_out(Normalize(resize=(32, 32)), dtype="uint8"))
    with pytest.raises(ValueError, match=r"pass mean= and std= to vidvol.dequantize_params"):
        readers.load(hmdb_small, "train", 2, spec=_out(Normalize(mean=0.5), dtype="uint8"))
    with pytest.raises(ValueError, match=r"Output.mask_dtype must be one of \['float32', .*'bool'\] or None.*int32"):
        readers.load(mri_int16, "train", 2, spec=_out(mask_dtype=tf.int32))
    with pytest.raises(ValueError, match="the only input"):
        readers.load(mri_int16, "train", 2, spec=_out(inputs="mask", mask_dtype=None))
    with pytest.raises(ValueError, match=r"stored as uint8, so output_dtype must be one of .*got 'int16'"):
        vidvol.dequantize_params(hmdb_small, "int16")
    with pytest.raises(ValueError, match="neither a video nor a volume"):
        vidvol.dequantize_params(mri_int16, feature="label")


# -- direct volume reads (readers.direct_volumes) -----------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_direct_volume_reads_equal_tensorflows_reader_batch_for_batch(mri_int16, caplog, dtype):
    kw = dict(seed=5, spec=_out(dtype=dtype, mask_dtype="uint8"), repeat=True)
    with caplog.at_level("INFO", logger="vidvol.readers.tfdata.load"):
        direct = list(tfds.as_numpy(readers.load(mri_int16, "train", 2, **kw).take(4)))
    assert "direct volume reads" in caplog.text
    through_tf = list(tfds.as_numpy(readers.load(mri_int16, "train", 2, tuning=Tuning(direct_reads=False), **kw).take(4)))
    for a, b in zip(tf.nest.flatten(direct), tf.nest.flatten(through_tf)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    dicts = _out(dtype=dtype, features=["volume", "label", "path", "affine"])
    evaluation = _eval(mri_int16, "train", 2, spec=dicts)
    reference = _eval(mri_int16, "train", 2, spec=dicts, tuning=Tuning(direct_reads=False))
    for a, b in zip(evaluation, reference):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_index_keeps_every_other_feature_of_each_record(mri_int16):
    from vidvol.readers.tfdata import direct_volumes

    path = str(next(iter(mri_int16.info.splits["train"].file_instructions)).filename)
    index = direct_volumes.index_shard(path, "volume")
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    assert len(index.small) == len(records) >= 1 and index.int16.all()
    for small, record, at, n, length in zip(index.small, records, index.data_at, index.data_len, index.lengths):
        full = tf.train.Example.FromString(record).features.feature
        kept = tf.train.Example.FromString(small).features.feature
        assert set(full) - set(kept) == {"volume/data"} and len(record) == length
        assert record[at:at + n] == full["volume/data"].bytes_list.value[0]
        for key in kept:
            assert kept[key] == full[key]


def test_direct_reads_detect_a_corrupted_volume_by_its_crc(mri_int16, tmp_path):
    import shutil

    copy = tmp_path / "mri_volumes" / "small_32" / "2.0.0"
    shutil.copytree(mri_int16.data_path, copy)
    builder = tfds.builder_from_directory(str(copy))
    shard = sorted(copy.glob("*-train.tfrecord-*"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a volume: the index still walks, the CRC does not match
    shard.write_bytes(bytes(data))
    with pytest.raises(tf.errors.OpError, match=r"tfrecord-.*is corrupted \(its CRC32C does not match\). "
                                                r"Check every shard: python -m vidvol verify"):
        _eval(builder, "train", 3, spec=_out(dtype="int16"))


@pytest.fixture(scope="module")
def mri_128(tmp_path_factory):
    """mri_volumes/128 from three 128^3 int16 scans (a batch read takes milliseconds, as in real use)."""
    root = tmp_path_factory.mktemp("mri_128")
    rng = np.random.default_rng(3)
    rows = []
    for i in range(3):
        data = np.zeros((128, 128, 128), np.int16)
        data[16:112, 16:112, 16:112] = rng.integers(0, 4, size=(96, 96, 96), dtype=np.int16) + 100 * i
        _write_nifti(str(root / "manual" / f"v{i}.nii.gz"), data)
        rows.append([f"v{i}.nii.gz", str(i % 2), f"s{i}", "train"])
    with open(root / "manual" / "labels.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "label", "subject", "split"], *rows])
    return _build(mri.Builder, "128", root / "manual", root / "data")


@pytest.mark.slow  # a Python subprocess: make test runs it, make test-fast does not
def test_a_script_holding_a_direct_read_iterator_exits(mri_128):
    """A batch read in flight when Python finalizes would wait for the GIL forever while the finalizing thread,
    destroying the iterator, waits for it (TensorFlow's py_function-at-exit hang: 2 of 2 runs of this script
    hung before the exit hook, now in readers/host_calls.py)."""
    exit_check.assert_exits_quietly(mri_128.data_path, runs=1, batches=50)  # direct volume reads (each of 2 runs hung before the fix: one run catches it)
