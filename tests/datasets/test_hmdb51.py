"""hmdb51: builder over dummy data, layout/split parsing, bad inputs, .rar archives, and the real CLI."""

from __future__ import annotations

import json
import os
import shutil

import cv2
import numpy as np
import pytest
import tensorflow_datasets as tfds

import array_record_testing
import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders.sources import labels
from vidvol.builders.writer import skip_report
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.datasets.hmdb51 import layout
from vidvol.datasets.hmdb51 import make_dummy_data

DUMMY = make_dummy_data.DUMMY_DIR


class Hmdb51DummyTest(tfds.testing.DatasetBuilderTestCase):
    """TFDS's own builder checks over the committed dummy_data (split 1: 2 train + 1 test per class)."""

    DATASET_CLASS = hmdb.Builder
    SPLITS = {"train": 6, "test": 3}
    BUILDER_CONFIG_NAMES_TO_TEST = [
        "split1_20x64x64", hmdb.Builder.get_builder_config("split1_all_112x112"),
        hmdb.Builder.get_builder_config("split1_20x64x64_raw"),  # stored raw: a Tensor feature, not Video
    ]
    SKIP_CHECKSUMS = True


@pytest.mark.slow  # a full builder test; `make test` runs it, `make test-fast` has its dataset's first
class Hmdb51DummyArrayRecordTest(array_record_testing.ArrayRecordBuilderTest, Hmdb51DummyTest):
    """The same checks with the builder writing ArrayRecord shards (`--file_format array_record`), read back by index."""
    BUILDER_CONFIG_NAMES_TO_TEST = ["split1_20x64x64"]  # the default config; the all-frames one is covered above


def _copy_dummy(tmp_path) -> str:
    manual = tmp_path / "manual"
    shutil.copytree(DUMMY, manual)
    return str(manual)


def _split_counts(manual: str, k: int) -> dict[str, int]:
    found = layout.find_layout(manual, manual + "_x")
    entries = layout.split_entries(found, k)
    return {s: sum(e.subset == s for e in entries) for s in ("train", "test")}


def test_class_names_are_the_51_official_sorted():
    names = layout.class_names()
    assert len(names) == 51 and names == sorted(names) and len(set(names)) == 51
    assert {"brush_hair", "sword_exercise", "wave", "shoot_bow"} <= set(names)
    builder = hmdb.Builder(data_dir="/nonexistent")
    assert builder.info.features["label"].names == names


def test_configs_default_first_and_all_splits():
    assert [c.name for c in hmdb.Builder.BUILDER_CONFIGS] == ["split1_20x64x64"]  # `tfds build hmdb51`: one pass
    names = [c.name for c in hmdb.Builder.all_configs()]
    assert names[0] == "split1_20x64x64" and len(names) == len(set(names)) == 27
    for k in (1, 2, 3):
        for geom in ("20x64x64", "16x112x112", "16x224x224", "all_112x112", "20x64x64_motion", "20x64x64_crop",
                     "20x64x64_raw", "16x112x112_raw"):
            assert f"split{k}_{geom}" in names
    all_cfg = hmdb.Builder(config="split1_all_112x112", data_dir="/nonexistent")
    assert all_cfg.info.features["video"].shape == (None, 112, 112, 3)
    by_name = tfds.builder("hmdb51/split3_16x224x224:1.0.0", data_dir="/nonexistent")
    assert (by_name.builder_config.split_number, by_name.info.features["video"].shape) == (3, (16, 224, 224, 3))
    with pytest.raises(ValueError, match="split4_20x64x64"):
        hmdb.Builder(config="split4_20x64x64", data_dir="/nonexistent")


def test_split_file_parsing_and_malformed_line(tmp_path):
    good = tmp_path / "wave_test_split1.txt"
    good.write_text("a.avi 1 \nb.avi 2\nc.avi 0\n\n")
    entries = labels.parse_hmdb_split_file(str(good), "wave")
    assert [(e.video, e.subset, e.line) for e in entries] == [("a.avi", "train", 1), ("b.avi", "test", 2)]
    bad = tmp_path / "wave_test_split2.txt"
    bad.write_text("a.avi 1\nb.avi three\n")
    with pytest.raises(ValueError, match=r"wave_test_split2.txt:2: expected"):
        labels.parse_hmdb_split_file(str(bad), "wave")


def test_mp4_mkv_and_avi_clips_side_by_side(tmp_path, build_in_process):
    manual = tmp_path / "manual"
    (manual / "hmdb51_org" / "wave").mkdir(parents=True)
    (manual / "testTrainMulti_7030_splits").mkdir()
    for name, fourcc, n in (("a.avi", "XVID", 30), ("b.mp4", "mp4v", 24), ("c.mkv", "MJPG", 18)):
        writer = cv2.VideoWriter(str(manual / "hmdb51_org" / "wave" / name), cv2.VideoWriter_fourcc(*fourcc), 25.0, (96, 64))
        for i in range(n):
            frame = np.full((64, 96, 3), 40 + 5 * i, np.uint8)
            writer.write(frame)
        writer.release()
    (manual / "testTrainMulti_7030_splits" / "wave_test_split1.txt").write_text("a.avi 1\nb.mp4 1\nc.mkv 2\n")
    builder = build_in_process(hmdb.Builder, manual, tmp_path / "out")
    got = {ex["video_id"].decode(): int(ex["num_frames"]) for s in ("train", "test")
           for ex in tfds.as_numpy(builder.as_dataset(split=s))}
    assert got == {"a.avi": 30, "b.mp4": 24, "c.mkv": 18}
    assert skip_report.read_skip_report(builder.data_dir)["skipped"] == []
    bad = tmp_path / "wave_test_split2.txt"
    bad.write_text("a.txt 1\n")
    with pytest.raises(ValueError, match=r"wave_test_split2.txt:1: expected `<video>.<ext> <id>` \(ext one of .avi, .mp4"):
        labels.parse_hmdb_split_file(str(bad), "wave")


def test_unknown_layout_lists_what_was_found(tmp_path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"matches no known layout: found \['readme.txt', 'stuff'\]") as err:
        layout.find_layout(str(tmp_path), str(tmp_path / "x"))
    assert "testTrainMulti_7030_splits" in str(err.value) and "hmdb51_org.rar" in str(err.value)


def test_class_folder_disagreeing_with_split_file_is_an_error(tmp_path, build_in_process):
    manual = _copy_dummy(tmp_path)
    src = os.path.join(manual, "hmdb51_org", "catch", "catch_clip0_u_nm_np1_fr_med_0.avi")
    shutil.move(src, os.path.join(manual, "hmdb51_org", "cartwheel", os.path.basename(src)))
    with pytest.raises(ValueError, match=r"catch_test_split1.txt:1: catch_clip0.* sits in the 'cartwheel' class folder"):
        build_in_process(hmdb.Builder, manual, tmp_path / "out")


def test_class_folders_directly_in_manual_dir(tmp_path):
    manual = tmp_path / "manual"
    shutil.copytree(os.path.join(DUMMY, "hmdb51_org"), manual)
    shutil.copytree(os.path.join(DUMMY, "testTrainMulti_7030_splits"), manual / "testTrainMulti_7030_splits")
    found = layout.find_layout(str(manual), str(tmp_path / "x"))
    assert sorted(found.class_dirs) == list(make_dummy_data.CLASSES)


def test_a_file_name_that_is_not_utf8_in_a_class_folder_is_listed_not_fatal(tmp_path):
    """A Latin-1 name beside the listed videos (the UTF-8 split files cannot name it): located, no error, not written."""
    manual = _copy_dummy(tmp_path)
    stray = os.path.join(manual, "hmdb51_org", "catch", os.fsdecode(b"caf\xe9.avi"))
    shutil.copy(os.path.join(manual, "hmdb51_org", "catch", "catch_clip0_u_nm_np1_fr_med_0.avi"), stray)
    found = layout.find_layout(manual, str(tmp_path / "x"))
    located = layout.locate_videos(found)
    assert located[os.path.basename(stray)] == "catch"
    entries = layout.split_entries(found, 1)
    labels.check_classes(entries, located)
    assert all(e.video.isascii() for e in entries) and len(entries) == 9


def test_bad_videos_are_reported_not_lost(tmp_path, build_in_process):
    manual = _copy_dummy(tmp_path)
    org = os.path.join(manual, "hmdb51_org")
    zero = os.path.join(org, "brush_hair", "brush_hair_clip0_u_nm_np1_fr_med_0.avi")
    open(zero, "wb").close()
    trunc = os.path.join(org, "cartwheel", "cartwheel_clip1_u_nm_np1_fr_med_1.avi")
    data = open(trunc, "rb").read()
    open(trunc, "wb").write(data[: len(data) // 4])
    text = os.path.join(org, "catch", "catch_clip0_u_nm_np1_fr_med_0.avi")
    open(text, "w").write("this is not a video\n" * 20)
    os.remove(os.path.join(org, "catch", "catch_clip2_u_nm_np1_fr_med_2.avi"))  # a test video named by split 1
    empty = os.path.join(org, "cartwheel", "cartwheel_clip0_u_nm_np1_fr_med_0.avi")
    writer = cv2.VideoWriter(empty, cv2.VideoWriter_fourcc(*"XVID"), 30.0, (80, 60))
    writer.release()  # a real AVI container with no decodable frame
    expected = _split_counts(manual, 1)
    builder = build_in_process(hmdb.Builder, manual, tmp_path / "out")
    report = skip_report.read_skip_report(builder.data_dir)
    skipped = {s["source"]: s for s in report["skipped"]}
    assert set(skipped) <= {os.path.basename(p) for p in (zero, trunc, text, empty)} | {"catch_clip2_u_nm_np1_fr_med_2.avi"}
    assert {os.path.basename(zero), os.path.basename(text), os.path.basename(empty), "catch_clip2_u_nm_np1_fr_med_2.avi"} <= set(skipped)
    assert "no decodable frame" in skipped[os.path.basename(empty)]["reason"]
    assert "not found" in skipped["catch_clip2_u_nm_np1_fr_med_2.avi"]["reason"]
    assert "split1.txt:3" in skipped["catch_clip2_u_nm_np1_fr_med_2.avi"]["reason"]
    assert skipped["catch_clip2_u_nm_np1_fr_med_2.avi"]["split"] == "test"
    for split in ("train", "test"):
        n_skipped = sum(1 for s in report["skipped"] if s["split"] == split)
        assert builder.info.splits[split].num_examples == expected[split] - n_skipped
        assert report["splits"][split]["examples"] == builder.info.splits[split].num_examples
    # The truncated file either decoded partially (written, with its real frame count) or was skipped: never lost.
    ids = {ex["video_id"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train"))}
    assert (os.path.basename(trunc) in ids) != (os.path.basename(trunc) in skipped)


def _color_video(path: str, num_frames: int, rgb: tuple[int, int, int]) -> None:
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"XVID"), 25.0, (96, 64))
    for i in range(num_frames):
        frame = np.zeros((64, 96, 3), np.uint8)
        frame[:] = rgb[::-1]  # OpenCV writes BGR
        frame[:, : 4 + i % 40] = 0  # a growing black band, so frames differ
        writer.write(frame)
    writer.release()


def test_examples_rgb_padding_mask_and_sampling(tmp_path, build_in_process):
    manual = tmp_path / "manual"
    (manual / "hmdb51_org" / "wave").mkdir(parents=True)
    (manual / "testTrainMulti_7030_splits").mkdir()
    _color_video(str(manual / "hmdb51_org" / "wave" / "red_long.avi"), 50, (230, 20, 20))
    _color_video(str(manual / "hmdb51_org" / "wave" / "red_short.avi"), 6, (230, 20, 20))
    (manual / "testTrainMulti_7030_splits" / "wave_test_split1.txt").write_text("red_long.avi 1\nred_short.avi 2\n")
    builder = build_in_process(hmdb.Builder, manual, tmp_path / "out")
    (long_ex,) = list(tfds.as_numpy(builder.as_dataset(split="train")))
    (short_ex,) = list(tfds.as_numpy(builder.as_dataset(split="test")))
    assert long_ex["video"].shape == (20, 64, 64, 3) and long_ex["video"].dtype == np.uint8
    assert long_ex["mask"].tolist() == [1] * 20 and long_ex["num_frames"] == 50
    fi = long_ex["frame_indices"]
    assert np.all(np.diff(fi) > 0) and fi[0] <= 2 and fi[-1] >= 47  # spread over the whole video
    right = long_ex["video"][:, :, -8:, :].reshape(-1, 3).mean(0)
    assert right[0] > 150 and right[2] < 80  # RGB, not BGR
    assert short_ex["num_frames"] == 6 and short_ex["mask"].tolist() == [1] * 6 + [0] * 14
    assert short_ex["frame_indices"].tolist() == list(range(6)) + [-1] * 14
    assert short_ex["video"][6:].max() == 0 and short_ex["video"][:6].max() > 100
    assert builder.info.features["label"].int2str(long_ex["label"]) == "wave"
    assert long_ex["video_id"] == b"red_long.avi" and abs(long_ex["fps"] - 25.0) < 0.01


def test_rar_archives_are_extracted_safely_and_reused(tmp_path, build_in_process):
    rar_writer = pytest.importorskip("rar_writer")
    manual = tmp_path / "manual"
    manual.mkdir()
    inner = {}
    for cls in make_dummy_data.CLASSES:
        folder = os.path.join(DUMMY, "hmdb51_org", cls)
        entries = [(f"{cls}/{f}", open(os.path.join(folder, f), "rb").read()) for f in sorted(os.listdir(folder))]
        inner[f"{cls}.rar"] = rar_writer.rar4_bytes(entries)
    (manual / "hmdb51_org.rar").write_bytes(rar_writer.rar4_bytes(sorted(inner.items())))
    split_dir = os.path.join(DUMMY, "testTrainMulti_7030_splits")
    split_entries = [(f"testTrainMulti_7030_splits/{f}", open(os.path.join(split_dir, f), "rb").read()) for f in sorted(os.listdir(split_dir))]
    (manual / "test_train_splits.rar").write_bytes(rar_writer.rar4_bytes(split_entries))
    builder = build_in_process(hmdb.Builder, manual, tmp_path / "out", download_dir=str(tmp_path / "dl"))
    assert builder.info.splits["train"].num_examples == 6 and builder.info.splits["test"].num_examples == 3
    assert (tmp_path / "dl" / "hmdb51_extracted").is_dir()


@pytest.mark.slow
def test_cli_build_and_tfds_load(tmp_path, tfds_build):
    manual = _copy_dummy(tmp_path)
    out = tmp_path / "data"
    proc = tfds_build("hmdb51", manual, out)  # no config: the default alone, every video decoded once
    assert "hmdb51/split1_20x64x64 train: 6 examples" in proc.stderr + proc.stdout
    assert sorted(p.name for p in (out / "hmdb51").iterdir() if not p.name.startswith(".")) == ["split1_20x64x64"]
    expected = _split_counts(manual, 1)
    for split in ("train", "test"):
        ds = tfds.load("hmdb51/split1_20x64x64", split=split, data_dir=str(out), download=False)
        assert ds.element_spec["video"].shape == (20, 64, 64, 3)
        examples = list(tfds.as_numpy(ds))
        assert len(examples) == expected[split]
        for ex in examples:
            assert ex["video"].shape == (20, 64, 64, 3) and int(ex["mask"].sum()) == min(20, int(ex["num_frames"]))
    sup = tfds.load("hmdb51", split="train", data_dir=str(out), download=False, as_supervised=True)
    video_spec, label_spec = sup.element_spec
    assert video_spec.shape == (20, 64, 64, 3) and label_spec.dtype.name == "int64"
    report = json.load(open(out / "hmdb51" / "split1_20x64x64" / "1.0.0" / skip_report.SKIP_REPORT_NAME))
    assert report["skipped"] == [] and report["splits"]["train"]["examples"] == 6
    tfds_build("hmdb51/split2_20x64x64", manual, out)  # a named config through the CLI
    assert tfds.builder("hmdb51/split2_20x64x64", data_dir=str(out)).info.splits["train"].num_examples > 0
