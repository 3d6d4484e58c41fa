"""Previews: real PNGs of the expected size, masked frames visibly different."""

import os
import shutil

import matplotlib.image as mpimg
import numpy as np
import pytest

from vidvol import preview
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
    import tensorflow_datasets as tfds
    short = [ex for ex in tfds.as_numpy(tfds.builder("hmdb51", data_dir=hmdb_dir).as_dataset(split="test")) if ex["num_frames"] < 20]
    assert short, "dummy data should contain a clip shorter than 20 frames"
    greyed = preview.grey_masked_frames(short[0]["video"], short[0]["mask"])
    assert greyed[-1].mean() == pytest.approx(preview.MASKED_GREY * 0.75, abs=1)
    assert not np.array_equal(greyed[-1], greyed[0])


def test_preview_of_empty_split_is_a_clear_error(hmdb_dir):
    with pytest.raises(ValueError, match="no examples|corresponds to no data"):
        preview.show("hmdb51", data_dir=hmdb_dir, split="test[:0]")
