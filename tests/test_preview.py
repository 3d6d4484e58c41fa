"""Previews: real PNGs of the expected size, masked frames visibly different."""

import os
import shutil

import matplotlib.image as mpimg
import numpy as np
import pytest
import tensorflow_datasets as tfds

from vidvol.cli import preview
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.hmdb51 import make_dummy_data


def test_grey_masked_frames_changes_only_masked():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    frames[2:] = 0  # padding frames are zeros
    out = preview.grey_masked_frames(frames, np.array([1, 1, 0, 0], np.uint8))
    assert np.array_equal(out[:2], frames[:2])
    assert out[2:].min() > 50 and not np.array_equal(out[2:], frames[2:])


@pytest.fixture(scope="module")
def hmdb_dir(tmp_path_factory):
    from conftest import in_process_config

    root = tmp_path_factory.mktemp("hmdb")
    manual = root / "manual"
    shutil.copytree(make_dummy_data.DUMMY_DIR, manual)
    builder = hmdb.Builder(data_dir=str(root / "data"))
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    return str(root / "data")


def test_hmdb51_preview_png(hmdb_dir, tmp_path):
    out = str(tmp_path / "p.png")
    rc = preview.main(["hmdb51", "--data_dir", hmdb_dir, "--split", "test", "--out", out, "--num_examples", "3"])
    assert rc == 0 and os.path.getsize(out) > 1000
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(out)
    assert img.shape[:2] == (int(1.6 * 3 * preview.DPI), int(preview.FIG_WIDTH_IN * preview.DPI))
    # The dummy test split holds a 7-frame video: its last strip frames are padding and render grey, not black.

    short = [ex for ex in tfds.as_numpy(tfds.builder("hmdb51", data_dir=hmdb_dir).as_dataset(split="test")) if ex["num_frames"] < 20]
    assert short, "dummy data should contain a clip shorter than 20 frames"
    greyed = preview.grey_masked_frames(short[0]["video"], short[0]["mask"])
    assert greyed[-1].mean() == pytest.approx(preview.MASKED_GREY * 0.75, abs=1)
    assert not np.array_equal(greyed[-1], greyed[0])


def test_preview_of_empty_split_is_a_clear_error(hmdb_dir):
    with pytest.raises(ValueError, match="no examples|corresponds to no data"):
        preview.show("hmdb51", data_dir=hmdb_dir, split="test[:0]")


@pytest.mark.parametrize(
    "name, height_in",
    [("fire_hrr/161x135x240", 3.2), ("mri_volumes/small_32", 2.6)],
)
def test_fire_and_mri_previews(name, height_in, tmp_path):
    from conftest import in_process_config

    dataset = name.split("/")[0]
    manual = os.path.join(os.path.dirname(hmdb.__file__), os.pardir, dataset, "dummy_data")
    builder = tfds_builder = tfds.builder(name, data_dir=str(tmp_path / "data"))
    tfds_builder.download_and_prepare(download_config=in_process_config(manual_dir=manual))
    out = str(tmp_path / "p.png")
    preview.save(name, out, data_dir=str(tmp_path / "data"), split="train", num_examples=1)
    img = mpimg.imread(out)
    width = preview.FIG_WIDTH_IN * (0.6 if dataset == "mri_volumes" else 1.0)
    assert img.shape[:2] == (round(height_in * preview.DPI), round(width * preview.DPI))
    assert img[..., :3].std() > 0.05  # real content, not a blank canvas
    (ex,) = list(tfds.as_numpy(builder.as_dataset(split="train").take(1)))
    if dataset == "fire_hrr":
        mask = ex["mask"]
        assert 0 < mask.sum() < len(mask)  # dummy experiment is shorter than 161 frames and has a hole
        greyed = preview.grey_masked_frames(ex["video"], mask)
        masked, real = np.flatnonzero(mask == 0), np.flatnonzero(mask == 1)
        assert np.array_equal(greyed[real], ex["video"][real])
        assert not np.array_equal(greyed[masked], ex["video"][masked])
