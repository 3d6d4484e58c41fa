"""Host JPEG batch decode (`readers.frames.JpegBatchDecode`): the same pixels as TensorFlow's decode.

`vidvol.load` decodes large RGB JPEG frames with libjpeg-turbo through simplejpeg, one Python call
per batch, each frame straight into its slot of the batch. Checked here on datasets built by the real
Beam pipeline (hmdb51 from real AVI files, fire_hrr from real JPEG frames): batch for batch equal to
TensorFlow's decode ops and to `tfds.load`, on damaged, grey and wrong-size frames, and at exit.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import exit_check  # tests/exit_check.py (tests/ is on sys.path via conftest)
from in_process_build import build as _build  # tests/in_process_build.py (tests/ on sys.path)
from vidvol import Clips, Normalize, Output, ReadSpec
from vidvol import readers
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.readers import frames
from vidvol.testing import samples


@pytest.fixture(scope="module")
def fire_small(tmp_path_factory):
    root = tmp_path_factory.mktemp("fire_jpeg")
    samples.write_fire_hrr_frames(str(root / "manual"))
    return _build(fire.Builder, "161x135x240", root / "manual", root / "data")


def _batches(builder, split, batch_size, decode, monkeypatch, **kw):
    monkeypatch.setenv(frames.JPEG_DECODE_ENV, decode)
    return list(tfds.as_numpy(readers.load(builder, split, batch_size, **kw)))


def _assert_same(a, b):
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        for u, v in zip(tf.nest.flatten(x), tf.nest.flatten(y)):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("kw", [
    dict(training=False), dict(training=True, seed=3), dict(training=True, seed=3, spec=ReadSpec(clips=Clips(length=6))),
    dict(training=False, spec=ReadSpec(normalize=Normalize(mean=0.45, std=0.225))),
    dict(training=False, spec=ReadSpec(normalize=Normalize(mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.25)))),
    dict(training=False, spec=ReadSpec(output=Output(dtype="bfloat16"))),
    dict(training=False, spec=ReadSpec(output=Output(dtype="uint8"))),
    dict(training=False, spec=ReadSpec(normalize=Normalize(resize=(32, 40)))),
])
def test_hmdb51_host_decode_equals_tensorflows_decode(hmdb_small, monkeypatch, kw):
    host = _batches(hmdb_small, "train", 2, "host", monkeypatch, **kw)
    ops = _batches(hmdb_small, "train", 2, "tf", monkeypatch, **kw)
    _assert_same(host, ops)


@pytest.mark.slow
def test_fire_hrr_host_decode_equals_tensorflows_decode_and_tfds_load(fire_small, monkeypatch):
    names = ["video", "mask", "experiment", "window"]
    host = _batches(fire_small, "train", 1, "host", monkeypatch, training=False, spec=ReadSpec(output=Output(features=names)))
    ops = _batches(fire_small, "train", 1, "tf", monkeypatch, training=False, spec=ReadSpec(output=Output(features=names)))
    _assert_same(host, ops)
    stock = {(ex["experiment"], int(ex["window"])): ex for ex in tfds.as_numpy(fire_small.as_dataset(split="train"))}
    as_stored = _batches(fire_small, "train", 1, "host", monkeypatch, training=False,
                         spec=ReadSpec(output=Output(dtype="uint8", features=names)))
    assert len(as_stored) == len(stock) == 2
    for batch in as_stored:
        ref = stock[(batch["experiment"][0], int(batch["window"][0]))]
        np.testing.assert_array_equal(batch["video"][0], ref["video"])  # tfds.load: tf.io.decode_jpeg per frame
        assert batch["mask"][0].sum() > 0 and batch["video"][0].any()


def _jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()


def test_frames_simplejpeg_refuses_decode_like_tensorflow():
    rng = np.random.default_rng(0)
    colour = _jpeg(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    grey = _jpeg(rng.integers(0, 256, (24, 32), dtype=np.uint8))  # a one-channel JPEG, read as RGB
    progressive = cv2.imencode(".jpg", rng.integers(0, 256, (24, 32, 3), dtype=np.uint8),
                               [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()
    encoded = [colour, grey, progressive, colour]
    got = np.asarray(frames.JpegBatchDecode((24, 32, 3))(tf.constant(encoded)))  # the numpy_function body: an array
    want = np.stack([tf.io.decode_jpeg(e, channels=3).numpy() for e in encoded])
    np.testing.assert_array_equal(got, want)


def test_a_damaged_frame_is_tensorflows_error_and_a_wrong_size_names_the_fix():
    good = _jpeg(np.full((24, 32, 3), 90, np.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError):
        frames.JpegBatchDecode((24, 32, 3))(tf.constant([good, b"\xff\xd8 not a jpeg"]))
    with pytest.raises(ValueError, match=r"decodes to \(24, 32\) pixels.*says \(16, 16\).*rebuild"):
        frames.JpegBatchDecode((16, 16, 3))(tf.constant([good]))


def test_large_frames_decode_on_the_host_by_default(monkeypatch):
    monkeypatch.delenv(frames.JPEG_DECODE_ENV, raising=False)
    large = tfds.features.Video((4, 540, 960, 3), encoding_format="jpeg")
    small = tfds.features.Video((4, 64, 64, 3), encoding_format="jpeg")
    png = tfds.features.Video((4, 540, 960, 3), encoding_format="png")
    assert frames.host_jpeg_decode(large) and not frames.host_jpeg_decode(small) and not frames.host_jpeg_decode(png)
    monkeypatch.setenv(frames.JPEG_DECODE_ENV, "host")
    assert frames.host_jpeg_decode(small)
    monkeypatch.setenv(frames.JPEG_DECODE_ENV, "tf")
    assert not frames.host_jpeg_decode(large)


@pytest.mark.long
@pytest.mark.slow  # a Python subprocess: make test runs it, make test-fast does not
def test_a_script_holding_a_host_decode_iterator_exits(hmdb_small):
    """The py_function-at-exit hang (see readers/host_calls.py) guarded for the JPEG batch decode too."""
    exit_check.assert_exits_quietly(hmdb_small.data_path, runs=1, batches=30, env={frames.JPEG_DECODE_ENV: "host"})
