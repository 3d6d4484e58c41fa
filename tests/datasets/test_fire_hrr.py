"""fire_hrr: builder over dummy data, CSV/layout rules, the window stage, both input forms, and the real CLI."""

from __future__ import annotations

import csv
import json
import math
import os

import cv2
import numpy as np
import pytest
import tensorflow_datasets as tfds

import array_record_testing
import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders import example_io
from vidvol.builders.transforms import frame_series
from vidvol.builders.transforms import video
from vidvol.builders.writer import skip_report
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder as fire
from vidvol.datasets.fire_hrr import layout
from vidvol.testing import samples


class FireHrrDummyTest(tfds.testing.DatasetBuilderTestCase):
    """TFDS's own builder checks over the committed dummy_data (one experiment per split)."""

    DATASET_CLASS = fire.Builder
    SPLITS = {"train": 1, "validation": 1, "test": 1}
    BUILDER_CONFIG_NAMES_TO_TEST = [fire.Builder.get_builder_config("161x135x240")]  # a named (unregistered) config
    SKIP_CHECKSUMS = True


@pytest.mark.slow  # a full builder test; `make test` runs it, `make test-fast` has its dataset's first
class FireHrrDummyArrayRecordTest(array_record_testing.ArrayRecordBuilderTest, FireHrrDummyTest):
    """The same checks with the builder writing ArrayRecord shards (`--file_format array_record`), read back by index."""
    pass


# --------------------------------------------------------------------------------------------
# helpers


def _write_labels(path, header, rows) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _rewrite_csv(path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _frame_indices(frames: np.ndarray) -> list[int]:
    return [samples.decode_frame_index(f) for f in frames]


def _examples(builder, split="train") -> dict[tuple[str, int], dict]:
    return {(ex["experiment"].decode(), int(ex["window"])): ex for ex in tfds.as_numpy(builder.as_dataset(split=split))}


# --------------------------------------------------------------------------------------------
# configs and features


def test_configs_default_full_resolution_first():
    assert [c.name for c in fire.Builder.BUILDER_CONFIGS] == ["full_161x540x960"]  # `tfds build fire_hrr`: one pass
    names = [c.name for c in fire.Builder.all_configs()]
    assert names[0] == "full_161x540x960"
    assert {"161x270x480", "161x135x240", "161x135x240_png"} <= set(names)
    full = fire.Builder(data_dir="/nonexistent")
    assert full.builder_config.name == "full_161x540x960"
    assert full.info.features["video"].shape == (161, 540, 960, 3)
    png = fire.Builder(config="161x135x240_png", data_dir="/nonexistent")
    assert png.info.features["video"].feature.encoding_format == "png"
    assert png.builder_config.window_spec == frame_series.WindowSpec(161, 135, 240, "png", 90, "resize", "hrr")
    assert full.info.supervised_keys == (("video", "mask"), "hrr")
    for name, dtype in (("mask", np.uint8), ("hrr", np.float32), ("time", np.float32)):
        assert full.info.features[name].shape == (161,) and full.info.features[name].np_dtype == dtype


# --------------------------------------------------------------------------------------------
# labels.csv and series CSV rules


def test_read_labels_groups_experiments_resolves_paths_and_keeps_nan(tmp_path):
    absolute = str(tmp_path / "abs.jpg")
    labels = _write_labels(
        tmp_path / "labels.csv",
        [" Experiment", "frame", "hrr", "time", "split"],
        [["b", "f/b0.jpg", "1.5", "0", "test"], ["a", "f/a0.jpg", "NaN", "0.0", "train"],
         ["b", absolute, "2.5", "1", "test"], ["a", "f/a1.jpg", "7", "nan", "train"]],
    )
    exps = layout.read_labels(labels, str(tmp_path))
    assert [e.name for e in exps] == ["b", "a"]
    b, a = exps
    assert b.split == "test" and b.frames == ("f/b0.jpg", absolute) and b.hrr == (1.5, 2.5) and b.time == (0.0, 1.0)
    assert b.paths == (str(tmp_path / "f" / "b0.jpg"), absolute) and b.origin.endswith("labels.csv:2")
    assert math.isnan(a.hrr[0]) and a.hrr[1] == 7.0 and math.isnan(a.time[1]) and a.split == "train"


def test_read_labels_without_time_or_split_defaults_to_train(tmp_path):
    labels = _write_labels(tmp_path / "labels.csv", ["experiment", "frame", "hrr"], [["x", "a.jpg", "3"]])
    (exp,) = layout.read_labels(labels, str(tmp_path))
    assert exp.split == "train" and exp.time is None and exp.hrr == (3.0,)


def test_labels_missing_column_names_file_and_expected_header(tmp_path):
    labels = _write_labels(tmp_path / "labels.csv", ["experiment", "image", "hrr"], [["x", "a.jpg", "3"]])
    with pytest.raises(ValueError, match=r"labels.csv:1: missing column\(s\) frame; expected the header `experiment,frame,hrr`"):
        layout.read_labels(labels, str(tmp_path))


@pytest.mark.parametrize(
    "rows, line, message",
    [
        ([["x", "a.jpg", "1"], ["x", "b.jpg", "high"]], 3, r"column `hrr` must be a number \(write NaN"),
        ([["x", "a.jpg", "1"], ["", "b.jpg", "2"]], 3, r"empty experiment name"),
        ([["x", "a.jpg", "1"], ["x", "", "2"]], 3, r"empty frame path"),
        ([["x", "a.jpg", "inf"]], 2, r"column `hrr` must be a finite number"),
        ([["x", "a.jpg", "1"], ["x", "b.jpg", "2", "9"]], 3, r"expected 3 fields"),
    ],
)
def test_labels_bad_rows_name_file_and_line(tmp_path, rows, line, message):
    labels = _write_labels(tmp_path / "labels.csv", ["experiment", "frame", "hrr"], rows)
    with pytest.raises(ValueError, match=rf"labels.csv:{line}: {message}"):
        layout.read_labels(labels, str(tmp_path))


def test_labels_split_rules_name_file_and_line(tmp_path):
    header = ["experiment", "frame", "hrr", "time", "split"]
    two = _write_labels(tmp_path / "labels.csv", header, [["x", "a", "1", "0", "train"], ["y", "c", "1", "0", "test"], ["x", "b", "1", "1", "test"]])
    with pytest.raises(ValueError, match=r"labels.csv:4: experiment 'x' is in split 'test' here but in 'train' at line 2"):
        layout.read_labels(two, str(tmp_path))
    bad = _write_labels(tmp_path / "labels.csv", header, [["x", "a", "1", "0", "dev"]])
    with pytest.raises(ValueError, match=r"labels.csv:2: split must be one of train, validation, test, got 'dev'"):
        layout.read_labels(bad, str(tmp_path))
    back = _write_labels(tmp_path / "labels.csv", header, [["x", "a", "1", "2", "train"], ["x", "b", "1", "1", "train"]])
    with pytest.raises(ValueError, match=r"labels.csv:3: time 1 s of experiment 'x' goes back from 2 s"):
        layout.read_labels(back, str(tmp_path))


def test_series_csv_rules(tmp_path):
    good = _write_labels(tmp_path / "a.csv", ["time", "hrr"], [["0", "1"], ["0.5", "NaN"], ["1", "3"]])
    times, values = layout.read_series(good)
    assert times == (0.0, 0.5, 1.0) and values[0] == 1.0 and math.isnan(values[1])
    for rows, message in (
        ([["0", "1"], ["0", "2"]], r"b.csv:3: time 0 s does not increase"),
        ([["0", "1"], ["x", "2"]], r"b.csv:3: column `time` must be a number"),
        ([["0", "1"], ["nan", "2"]], r"b.csv:3: column `time` must be a finite number"),
        ([["0", "lots"]], r"b.csv:2: column `hrr` must be a number"),
        ([], r"b.csv: no data rows"),
    ):
        bad = _write_labels(tmp_path / "b.csv", ["time", "hrr"], rows)
        with pytest.raises(ValueError, match=message):
            layout.read_series(bad)
    other = _write_labels(tmp_path / "c.csv", ["t", "hrr"], [["0", "1"]])
    with pytest.raises(ValueError, match=r"c.csv:1: missing column\(s\) time; expected the header `time,hrr`"):
        layout.read_series(other)


def test_find_layout_picks_form_and_explains_unknown(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        layout.find_layout(str(tmp_path / "nope"))
    (tmp_path / "notes.txt").write_text("x")
    cv2.imwrite(str(tmp_path / "a.jpg"), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(FileNotFoundError) as err:
        layout.find_layout(str(tmp_path))
    text = str(err.value)
    assert "labels.csv not found" in text and "found 1 .jpg, 1 .txt" in text
    assert "`experiment,frame,hrr`" in text and "`time,hrr`" in text and "<experiment>.mp4" in text
    # Video + series pairs -> the video form; an orphan video is kept so that it gets reported.
    samples.write_video(str(tmp_path / "v1.avi"), 3, height=32, width=48)
    samples.write_video(str(tmp_path / "lonely.avi"), 3, height=32, width=48)
    _write_labels(tmp_path / "v1.csv", ["time", "hrr"], [["0", "1"], ["1", "2"]])
    found = layout.find_layout(str(tmp_path))
    assert found.form == layout.FORM_VIDEO
    by_name = {e.name: e for e in found.experiments}
    assert set(by_name) == {"v1", "lonely"} and by_name["v1"].time == (0.0, 1.0) and by_name["lonely"].time == ()
    assert list(found.splits()) == ["train"]
    # labels.csv wins over video pairs.
    _write_labels(tmp_path / "labels.csv", ["experiment", "frame", "hrr"], [["x", "a.jpg", "3"]])
    assert layout.find_layout(str(tmp_path)).form == layout.FORM_FRAMES


# --------------------------------------------------------------------------------------------
# the window stage


def test_window_bounds_keys_and_interpolation():
    assert frame_series.window_bounds(0, 4) == []
    assert frame_series.window_bounds(4, 4) == [(0, 4)]
    assert frame_series.window_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert frame_series.window_key("exp", 2) == "exp/w002"
    out = frame_series.interpolate_series(np.array([-1.0, 0.0, 0.25, 1.5, 2.0, 2.5, np.nan]), [0.0, 1.0, 2.0], [0.0, 10.0, 30.0])
    assert np.allclose(out[1:5], [0.0, 2.5, 20.0, 30.0]) and np.isnan(out[[0, 5, 6]]).all()
    with_nan = frame_series.interpolate_series(np.array([0.5, 1.5, 2.0]), [0.0, 1.0, 2.0], [0.0, np.nan, 4.0])
    assert np.isnan(with_nan[:2]).all() and with_nan[2] == 4.0
    with pytest.raises(ValueError, match="increase strictly"):
        frame_series.check_series([0.0, 1.0, 1.0], [1, 2, 3], origin="s.csv")
    with pytest.raises(ValueError, match="max_len"):
        frame_series.WindowSpec(max_len=0, height=8, width=8)
    with pytest.raises(ValueError, match="image_format"):
        frame_series.WindowSpec(max_len=4, height=8, width=8, image_format="gif")


def _frames_on_disk(tmp_path, count: int, *, height=32, width=48) -> list[str]:
    paths = []
    for i in range(count):
        path = str(tmp_path / f"f{i:03d}.jpg")
        cv2.imwrite(path, cv2.cvtColor(samples.make_frame(i, height=height, width=width), cv2.COLOR_RGB2BGR))
        paths.append(path)
    return paths


def test_frame_series_windows_masks_and_skips(tmp_path):
    paths = _frames_on_disk(tmp_path, 10)
    os.remove(paths[5])
    targets = [float(10 * i) for i in range(10)]
    targets[2] = math.nan
    spec = frame_series.WindowSpec(max_len=4, height=32, width=48, target_name="hrr")
    source = frame_series.FrameSeriesSource(
        key="e", frames=tuple(paths), targets=tuple(targets), times=tuple(0.5 * i for i in range(10)),
        names=tuple(f"n{i}" for i in range(10)), features={"experiment": "e"},
    )
    items = list(frame_series.frame_series_example(source, spec))
    skips = [i for i in items if isinstance(i, example_io.Skip)]
    examples = dict(i for i in items if not isinstance(i, example_io.Skip))
    assert list(examples) == ["e/w000", "e/w001", "e/w002"]
    assert [(s.source, s.example) for s in skips] == [("n2", "e/w000"), ("n5", "e/w001")]
    assert skips[0].reason == "NaN hrr" and "ImageNotFoundError" in skips[1].reason
    zero = frame_series.zero_frame_bytes(spec)
    for w, (key, ex) in enumerate(examples.items()):
        n = min(4, 10 - 4 * w)
        assert ex["window"] == w and ex["num_frames"] == n and ex["experiment"] == "e" and len(ex["video"]) == 4
        for slot in range(4):
            j = 4 * w + slot
            usable = slot < n and j not in (2, 5)
            assert ex["mask"][slot] == usable
            assert ex["hrr"][slot] == (targets[j] if usable else 0.0)
            assert ex["time"][slot] == (0.5 * j if slot < n else 0.0)
            if usable:
                rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(ex["video"][slot], np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
                assert samples.decode_frame_index(rgb) == j
            else:
                assert ex["video"][slot] == zero


def test_unusable_window_is_reported_and_unusable_sequence_raises(tmp_path):
    paths = _frames_on_disk(tmp_path, 6)
    spec = frame_series.WindowSpec(max_len=3, height=32, width=48)
    missing = tuple(str(tmp_path / f"gone{i}.jpg") for i in range(3))
    source = frame_series.FrameSeriesSource(key="e", frames=missing + tuple(paths[3:]), targets=(1.0,) * 6)
    items = list(frame_series.frame_series_example(source, spec))
    keys = [i[0] for i in items if not isinstance(i, example_io.Skip)]
    whole = [i for i in items if isinstance(i, example_io.Skip)]
    assert keys == ["e/w001"]
    assert len(whole) == 1 and whole[0].source == "e/w000" and not whole[0].example
    assert "no usable frame in window 0" in whole[0].reason
    nothing = frame_series.FrameSeriesSource(key="z", frames=missing, targets=(1.0, math.nan, 2.0))
    with pytest.raises(ValueError, match=r"z: no usable frame among 3 frames .*NaN target"):
        list(frame_series.frame_series_example(nothing, spec))


def test_video_slots_mask_unknown_and_out_of_range_times():
    spec = frame_series.WindowSpec(max_len=4, height=8, width=8, target_name="hrr")
    frames = np.full((3, 8, 8, 3), 7, np.uint8)
    decoded = video.DecodedFrames(frames=frames, indices=np.array([0, 1, 3]), timestamps=np.array([0.0, np.nan, 3.0]), num_decoded=4, fps=0.0)
    source = frame_series.VideoSeriesSource(key="v", video="v.avi", series_times=(0.0, 2.0), series_values=(0.0, 20.0), name="v.avi")
    seen = [math.inf, -math.inf]
    slots = list(frame_series._video_slots(source, decoded, 0, 4, spec, seen))
    assert [s.problem for s in slots] == ["", "unknown timestamp", "frame could not be decoded", "outside the time series (0..2 s)"]
    assert slots[0].target == 0.0 and slots[0].image is not None and [s.name for s in slots][3] == "v.avi#3"
    example, skips = frame_series._assemble("v/w000", 0, slots, spec)
    assert example["mask"].tolist() == [1, 0, 0, 0] and example["time"].tolist() == [0.0, 0.0, 0.0, 3.0]
    assert [s.example for s in skips] == ["v/w000"] * 3 and seen == [0.0, 3.0]


# --------------------------------------------------------------------------------------------
# builds


def test_windows_of_a_long_experiment_lose_no_frame(tmp_path, build_in_process):
    manual = tmp_path / "manual"
    expected = samples.write_fire_hrr_frames(str(manual), experiments=[("long", 19), ("fits", 8)], height=32, width=48)
    config = fire.FireHrrConfig(name="w8_32x48", max_len=8, height=32, width=48, description="test windows")
    builder = build_in_process(fire.Builder, manual, tmp_path / "out", config=config)
    examples = _examples(builder)
    assert sorted(examples) == [("fits", 0), ("long", 0), ("long", 1), ("long", 2)]
    assert [int(examples[("long", w)]["num_frames"]) for w in range(3)] == [8, 8, 3]
    long_hrr = np.concatenate([examples[("long", w)]["hrr"][: examples[("long", w)]["num_frames"]] for w in range(3)])
    assert np.allclose(long_hrr, expected["long"]["hrr"], atol=1e-3)
    long_frames = np.concatenate([examples[("long", w)]["video"][: examples[("long", w)]["num_frames"]] for w in range(3)])
    assert _frame_indices(long_frames) == list(range(19))
    last = examples[("long", 2)]
    assert last["mask"].tolist() == [1, 1, 1, 0, 0, 0, 0, 0] and not last["video"][3:].any()
    assert np.allclose(last["time"][:3], expected["long"]["time"][16:]) and not last["time"][3:].any()
    assert examples[("fits", 0)]["mask"].tolist() == [1] * 8
    assert skip_report.read_skip_report(builder.data_dir)["skipped"] == []


def test_video_form_takes_an_experiment_whose_name_is_not_utf8(tmp_path, build_in_process):
    """`caf\\xe9.avi` + `caf\\xe9.csv` (Latin-1 bytes): decoded, its experiment named `caf\\xe9` wherever it is written."""
    manual = tmp_path / "manual"
    samples.write_fire_hrr_videos(str(manual), experiments=[("cafe", 6), ("plain", 6)], fps=10.0, height=48, width=64)
    for ext in (".avi", ".csv"):
        os.rename(manual / f"cafe{ext}", os.path.join(str(manual), os.fsdecode(b"caf\xe9" + ext.encode())))
    config = fire.FireHrrConfig(name="v8_48x64", max_len=8, height=48, width=64, description="test names")
    builder = build_in_process(fire.Builder, manual, tmp_path / "out", config=config)
    examples = _examples(builder)
    assert sorted(examples) == [("caf\\xe9", 0), ("plain", 0)]
    assert examples[("caf\\xe9", 0)]["mask"].tolist() == [1] * 6 + [0, 0]
    assert skip_report.read_skip_report(builder.data_dir)["skipped"] == []


def test_video_form_interpolates_and_masks_out_of_range(tmp_path, build_in_process):
    manual = tmp_path / "manual"
    fps = 10.0
    offset = 0.55  # the series starts after frames 0..5 (t = 0.0 .. 0.5 s)
    expected = samples.write_fire_hrr_videos(str(manual), experiments=[("run1", 30)], fps=fps, height=48, width=64, series_offset_s=offset)
    samples.write_video(str(manual / "run2.mp4"), 12, height=48, width=64, fps=fps, fourcc="mp4v", seed=3)
    _write_labels(manual / "run2.csv", ["time", "hrr"], [["100", "1"], ["200", "2"]])  # does not overlap the video
    samples.write_video(str(manual / "alone.avi"), 5, height=48, width=64, fps=fps)  # no series beside it
    config = fire.FireHrrConfig(name="v16_48x64", max_len=16, height=48, width=64, description="test video form")
    builder = build_in_process(fire.Builder, manual, tmp_path / "out", config=config)
    examples = _examples(builder)
    assert sorted(examples) == [("run1", 0), ("run1", 1)]
    series = expected["run1"]
    frame_time = np.array(series["frame_time"])
    inside = (frame_time >= series["time"][0]) & (frame_time <= series["time"][-1])
    mask = np.concatenate([examples[("run1", 0)]["mask"], examples[("run1", 1)]["mask"][:14]])
    hrr = np.concatenate([examples[("run1", 0)]["hrr"], examples[("run1", 1)]["hrr"][:14]])
    times = np.concatenate([examples[("run1", 0)]["time"], examples[("run1", 1)]["time"][:14]])
    assert mask.tolist() == inside.astype(int).tolist() and not inside[:6].any()
    assert np.allclose(hrr[inside], np.interp(frame_time[inside], series["time"], series["hrr"]), rtol=1e-5, atol=1e-3)
    assert not hrr[~inside].any() and np.allclose(times, frame_time, atol=1e-4)
    frames = np.concatenate([examples[("run1", 0)]["video"], examples[("run1", 1)]["video"][:14]])
    assert _frame_indices(frames[inside]) == np.flatnonzero(inside).tolist() and not frames[~inside].any()
    assert int(examples[("run1", 1)]["num_frames"]) == 14 and examples[("run1", 1)]["mask"][14:].sum() == 0
    report = skip_report.read_skip_report(builder.data_dir)
    masked = [s for s in report["skipped"] if s["example"]]
    whole = {s["source"]: s["reason"] for s in report["skipped"] if not s["example"]}
    assert len(masked) == int((~inside).sum()) == report["splits"]["train"]["masked_parts"]
    assert {s["source"] for s in masked} == {f"run1.avi#{i}" for i in np.flatnonzero(~inside)}
    assert all(s["reason"].startswith("outside the time series (0.55..") for s in masked)
    assert set(whole) == {"run2", "alone"}
    assert "outside the time series (100..200 s)" in whole["run2"] and "vs video frames at 0..1.1 s" in whole["run2"]
    assert "no time series" in whole["alone"]


@pytest.mark.slow
def test_cli_build_pads_masks_and_matches_the_csv(tmp_path, tfds_build):
    manual = tmp_path / "manual"
    samples.write_fire_hrr_frames(str(manual), experiments=[("short", 4), ("long", 20), ("holes", 9)], height=54, width=96)
    rows = _read_csv(manual / "labels.csv")
    nan_row = next(r for r in rows if r["experiment"] == "long" and r["frame"].endswith("0007.jpg"))
    nan_row["hrr"] = "NaN"
    _rewrite_csv(manual / "labels.csv", rows)
    missing = next(r for r in rows if r["experiment"] == "holes" and r["frame"].endswith("0003.jpg"))
    os.remove(manual / missing["frame"])
    out = tmp_path / "data"
    proc = tfds_build("fire_hrr/161x135x240", manual, out)
    assert "fire_hrr/161x135x240 train: 3 examples" in proc.stderr + proc.stdout
    assert "2 parts masked inside written examples" in proc.stderr + proc.stdout
    ds = tfds.load("fire_hrr/161x135x240", split="train", data_dir=str(out), download=False)
    examples = {ex["experiment"].decode(): ex for ex in tfds.as_numpy(ds)}
    assert sorted(examples) == ["holes", "long", "short"]
    for name, ex in examples.items():
        mine = [r for r in rows if r["experiment"] == name]
        n = len(mine)
        assert ex["video"].shape == (161, 135, 240, 3) and ex["num_frames"] == n and ex["window"] == 0
        hrr = np.array([float(r["hrr"]) for r in mine])
        usable = np.isfinite(hrr) & np.array([os.path.exists(manual / r["frame"]) for r in mine])
        assert ex["mask"].tolist() == usable.astype(int).tolist() + [0] * (161 - n)
        assert np.allclose(ex["hrr"][:n][usable], hrr[usable], atol=1e-3) and not ex["hrr"][:n][~usable].any()
        assert np.allclose(ex["time"][:n], [float(r["time"]) for r in mine]) and not ex["time"][n:].any()
        assert not ex["hrr"][n:].any() and not ex["video"][n:].any() and not ex["video"][:n][~usable].any()
        assert _frame_indices(ex["video"][:n][usable]) == np.flatnonzero(usable).tolist()
        assert samples.colour_key_ok(ex["video"][0])  # RGB, not BGR
    sup = tfds.load("fire_hrr/161x135x240", split="train", data_dir=str(out), download=False, as_supervised=True)
    (video_spec, mask_spec), hrr_spec = sup.element_spec
    assert video_spec.shape == (161, 135, 240, 3) and mask_spec.shape == (161,) and hrr_spec.dtype.name == "float32"
    report = json.load(open(out / "fire_hrr" / "161x135x240" / "1.0.0" / skip_report.SKIP_REPORT_NAME))
    by_source = {s["source"]: s for s in report["skipped"]}
    assert set(by_source) == {nan_row["frame"], missing["frame"]}
    assert by_source[nan_row["frame"]]["reason"] == "NaN hrr" and by_source[nan_row["frame"]]["example"] == "long/w000"
    assert "not found" in by_source[missing["frame"]]["reason"] and by_source[missing["frame"]]["example"] == "holes/w000"
    assert report["splits"]["train"] == {**report["splits"]["train"], "examples": 3, "skipped_inputs": 0, "masked_parts": 2}
