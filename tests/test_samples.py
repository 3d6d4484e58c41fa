"""The sample generators write files that the real decoders (OpenCV, nibabel, csv) read back."""

from __future__ import annotations

import csv
import os
import re

import cv2
import nibabel as nib
import numpy as np
import pytest

from vidvol.testing import samples

SPLIT_LINE_RE = re.compile(r"^(?P<video>\S+\.avi) (?P<id>[012]) ?$")


def _read_video_rgb(path: str) -> list[np.ndarray]:
    """Every decoded frame of `path`, RGB (small test videos only)."""
    cap = cv2.VideoCapture(path)
    assert cap.isOpened(), path
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    cap.release()
    return frames


def _read_csv(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def test_hmdb51_classes_are_the_51_official_names_sorted():
    classes = samples.HMDB51_CLASSES
    assert len(classes) == 51 == len(set(classes))
    assert list(classes) == sorted(classes)
    assert {"brush_hair", "climb_stairs", "ride_horse", "sword_exercise", "wave"} <= set(classes)
    package = os.path.dirname(os.path.dirname(samples.__file__))  # vidvol/testing/samples.py -> vidvol/
    class_file = os.path.join(package, "datasets", "hmdb51", "class_names.txt")
    with open(class_file, encoding="utf-8") as f:  # the dataset folder's copy must agree
        assert [line.strip() for line in f if line.strip()] == list(classes)


def test_make_frame_is_textured_moving_and_deterministic():
    height, width = 96, 128
    a0 = samples.make_frame(0, height=height, width=width, seed=3)
    a5 = samples.make_frame(5, height=height, width=width, seed=3)
    body = slice(height // 8, height - height // 8)
    assert a0.dtype == np.uint8 and a0.shape == (height, width, 3)
    np.testing.assert_array_equal(a0, samples.make_frame(0, height=height, width=width, seed=3))
    assert not np.array_equal(a0, samples.make_frame(0, height=height, width=width, seed=4))
    assert a0[body].std() > 20  # textured, not a flat colour
    assert np.abs(a0[body].astype(int) - a5[body]).mean() > 5  # content moves
    flat = samples.make_frame(7, height=height, width=width, content="flat")
    assert np.all(flat[body] == 128)
    assert samples.decode_frame_index(flat) == 7
    with pytest.raises(ValueError, match="content"):
        samples.make_frame(0, content="plaid")


def test_footage_frames_move_and_carry_fine_detail():
    height, width = 120, 160
    f0, f1 = (samples.make_frame(i, height=height, width=width, seed=5, content="footage") for i in (0, 1))
    assert f0.dtype == np.uint8 and f0.shape == (height, width, 3) and f0.std() > 25
    np.testing.assert_array_equal(f0, samples.make_frame(0, height=height, width=width, seed=5, content="footage"))
    assert np.abs(f0.astype(int) - f1).mean() > 5  # camera motion, the figure, sensor noise

    def jpeg_bytes_64(frame: np.ndarray) -> int:  # as the hmdb51 default config stores a frame
        small = cv2.resize(frame, (64, 64), interpolation=cv2.INTER_AREA)
        return len(cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 90])[1])

    textured = samples.make_frame(0, height=height, width=width, seed=5)
    assert jpeg_bytes_64(f0) > 1.5 * jpeg_bytes_64(textured)  # detail that survives the downscale, like real footage


@pytest.mark.parametrize("size", [(64, 64), (112, 112), (27, 41), (240, 320)])
def test_frame_index_and_colour_key_survive_resizing(size):
    for index in (0, 1, 2, 511, 682, 1023, 1024 + 9):
        frame = samples.make_frame(index, height=120, width=160, seed=1)
        resized = cv2.resize(frame, (size[1], size[0]), interpolation=cv2.INTER_AREA)
        assert samples.decode_frame_index(resized) == index % (1 << samples.INDEX_BITS)
        assert samples.colour_key_ok(resized)
        assert not samples.colour_key_ok(resized[..., ::-1])  # BGR reads as wrong order


@pytest.mark.parametrize("fourcc,ext", [("XVID", ".avi"), ("mp4v", ".mp4"), ("MJPG", ".avi")])
def test_write_video_round_trips_through_opencv(tmp_path, fourcc, ext):
    num_frames, height, width = 17, 48, 64
    path = samples.write_video(str(tmp_path / f"clip{ext}"), num_frames, height=height, width=width,
                               fps=12.0, fourcc=fourcc, seed=2)
    cap = cv2.VideoCapture(path)
    assert cap.get(cv2.CAP_PROP_FPS) == pytest.approx(12.0, rel=0.01)
    cap.release()
    frames = _read_video_rgb(path)
    assert len(frames) == num_frames
    assert all(f.shape == (height, width, 3) for f in frames)
    assert [samples.decode_frame_index(f) for f in frames] == list(range(num_frames))
    assert all(samples.colour_key_ok(f) for f in frames)


def test_write_video_rejects_what_it_cannot_write(tmp_path):
    with pytest.raises(ValueError, match="even"):
        samples.write_video(str(tmp_path / "odd.avi"), 3, height=33, width=64)
    bad = tmp_path / "clip.unknown_ext"
    with pytest.raises(samples.SampleWriteError, match=re.escape(str(bad))):
        samples.write_video(str(bad), 3, height=32, width=64)


def test_hmdb51_layout_videos_and_split_files(tmp_path):
    classes = ["brush_hair", "kick_ball"]
    expected = samples.write_hmdb51_layout(str(tmp_path), classes=classes, videos_per_class=3,
                                           num_frames=(4, 7), height=32, width=48, seed=5)
    assert sorted(expected) == [1, 2, 3]
    for class_name in classes:
        folder = tmp_path / "hmdb51_org" / class_name
        videos = sorted(os.listdir(folder))
        assert videos == [samples.hmdb51_video_name(class_name, j) for j in range(3)]
        for video in videos:
            frames = _read_video_rgb(str(folder / video))
            assert 4 <= len(frames) <= 7
            assert frames[0].shape == (32, 48, 3)
            assert [samples.decode_frame_index(f) for f in frames] == list(range(len(frames)))

    parsed: dict[int, dict[str, list[str]]] = {}
    splits_dir = tmp_path / "testTrainMulti_7030_splits"
    assert len(os.listdir(splits_dir)) == len(classes) * 3
    for k in (1, 2, 3):
        ids = []
        parsed[k] = {"train": [], "test": []}
        for class_name in classes:
            lines = (splits_dir / f"{class_name}_test_split{k}.txt").read_text().splitlines()
            assert len(lines) == 3
            for line in lines:
                m = SPLIT_LINE_RE.match(line)
                assert m, line
                assert m["video"] in os.listdir(tmp_path / "hmdb51_org" / class_name)
                ids.append(m["id"])
                if m["id"] != "0":
                    parsed[k]["train" if m["id"] == "1" else "test"].append(m["video"])
        assert set(ids) == {"0", "1", "2"}
        parsed[k] = {subset: sorted(names) for subset, names in parsed[k].items()}
    assert parsed == expected
    assert expected[1] != expected[2] != expected[3] != expected[1]  # three different splits


def test_hmdb51_layout_flat_and_deterministic(tmp_path):
    kwargs = dict(classes=["wave"], videos_per_class=3, num_frames=5, height=32, width=48, splits=(2,))
    a = samples.write_hmdb51_layout(str(tmp_path / "a"), nested_org=False, seed=1, **kwargs)
    b = samples.write_hmdb51_layout(str(tmp_path / "b"), nested_org=False, seed=1, **kwargs)
    assert a == b
    assert sorted(os.listdir(tmp_path / "a")) == ["testTrainMulti_7030_splits", "wave"]
    split_a = (tmp_path / "a" / "testTrainMulti_7030_splits" / "wave_test_split2.txt").read_text()
    split_b = (tmp_path / "b" / "testTrainMulti_7030_splits" / "wave_test_split2.txt").read_text()
    assert split_a == split_b
    name = samples.hmdb51_video_name("wave", 1)
    frames_a = _read_video_rgb(str(tmp_path / "a" / "wave" / name))
    frames_b = _read_video_rgb(str(tmp_path / "b" / "wave" / name))
    assert len(frames_a) == 5
    np.testing.assert_array_equal(np.stack(frames_a), np.stack(frames_b))


def test_fire_hrr_frames_layout(tmp_path):
    expected = samples.write_fire_hrr_frames(str(tmp_path), with_split=True, fps=2.0, seed=4)
    header, rows = _read_csv(str(tmp_path / "labels.csv"))
    assert header == ["experiment", "frame", "hrr", "time", "split"]
    assert [r["experiment"] for r in rows] == ["exp_a"] * 12 + ["exp_b"] * 7
    assert {r["split"] for r in rows if r["experiment"] == "exp_a"} == {"train"}
    assert {r["split"] for r in rows if r["experiment"] == "exp_b"} == {"test"}
    for experiment, series in expected.items():
        exp_rows = [r for r in rows if r["experiment"] == experiment]
        assert [r["frame"] for r in exp_rows] == series["frames"]
        assert [float(r["hrr"]) for r in exp_rows] == series["hrr"]
        times = [float(r["time"]) for r in exp_rows]
        assert times == series["time"] == [i / 2.0 for i in range(len(exp_rows))]
        hrr = np.array(series["hrr"])
        assert hrr.min() > 0 and hrr.max() > 100  # kW, a real fire curve
        assert np.abs(np.diff(hrr, 2)).max() < 0.5 * np.ptp(hrr)  # smooth, not noise
        for i, rel in enumerate(series["frames"]):
            image = cv2.imread(str(tmp_path / rel))
            assert image is not None and image.shape == (54, 96, 3)
            assert samples.decode_frame_index(image[..., ::-1]) == i

    again = samples.write_fire_hrr_frames(str(tmp_path / "again"), with_split=True, fps=2.0, seed=4)
    assert again == expected
    assert (tmp_path / "again" / "labels.csv").read_text() == (tmp_path / "labels.csv").read_text()
    other = samples.write_fire_hrr_frames(str(tmp_path / "other"), fps=2.0, seed=5)
    assert other["exp_a"]["hrr"] != expected["exp_a"]["hrr"]
    assert _read_csv(str(tmp_path / "other" / "labels.csv"))[0] == ["experiment", "frame", "hrr", "time"]


def test_fire_hrr_videos_layout(tmp_path):
    expected = samples.write_fire_hrr_videos(str(tmp_path), experiments=(("test_1", 20), ("test_2", 13)),
                                             fps=10.0, series_offset_s=0.5, seed=2)
    for experiment, num_frames in (("test_1", 20), ("test_2", 13)):
        frames = _read_video_rgb(str(tmp_path / f"{experiment}.avi"))
        assert len(frames) == num_frames
        assert frames[0].shape == (54, 96, 3)
        assert [samples.decode_frame_index(f) for f in frames] == list(range(num_frames))
        header, rows = _read_csv(str(tmp_path / f"{experiment}.csv"))
        assert header == ["time", "hrr"]
        times = [float(r["time"]) for r in rows]
        assert times[0] == pytest.approx(0.5)
        assert times[-1] == pytest.approx(0.5 + num_frames / 10.0)
        assert np.allclose(np.diff(times)[:-1], 0.25) and 0 < np.diff(times)[-1] <= 0.25 + 1e-9
        assert times == expected[experiment]["time"]
        assert [float(r["hrr"]) for r in rows] == expected[experiment]["hrr"]
        assert expected[experiment]["num_frames"] == num_frames
    again = samples.write_fire_hrr_videos(str(tmp_path / "again"), experiments=(("test_1", 20), ("test_2", 13)),
                                          fps=10.0, series_offset_s=0.5, seed=2)
    assert again == expected


def test_mri_volumes_round_trip_through_nibabel(tmp_path):
    shape, spacing = (20, 24, 18), (1.0, 1.2, 1.5)
    result = samples.write_mri_volumes(str(tmp_path), num_subjects=4, scans_per_subject=2, shape=shape,
                                       spacing=spacing, seed=3, label_column="diagnosis",
                                       labels=("cn", "ad"), with_split=True)
    header, rows = _read_csv(str(tmp_path / "labels.csv"))
    assert header == result["header"] == ["path", "diagnosis", "subject", "split"]
    assert rows == result["rows"] and len(rows) == 8
    assert {r["subject"]: r["split"] for r in rows} == {
        "sub-001": "train", "sub-002": "train", "sub-003": "train", "sub-004": "test"}
    assert [r["diagnosis"] for r in rows[::2]] == ["cn", "ad", "cn", "ad"]

    orientations = set()
    for row in rows:
        image = nib.load(str(tmp_path / row["path"]))
        info = result["volumes"][row["path"]]
        assert row["path"].endswith(".nii.gz")
        assert image.shape == shape
        assert image.get_data_dtype() == np.int16
        assert image.dataobj.slope != 1.0  # stored scaled, as many scanners do
        np.testing.assert_allclose(image.header.get_zooms(), spacing, rtol=1e-6)
        np.testing.assert_allclose(image.affine, info["affine"], atol=1e-6)
        codes = "".join(nib.aff2axcodes(image.affine))
        assert codes == info["orientation"]
        orientations.add(codes)
        canonical = nib.as_closest_canonical(image)
        data = np.asarray(canonical.dataobj, dtype=np.float32)
        assert data.min() >= 0 and data.std() > 50  # anatomy-like contrast
        right = np.unravel_index(np.argmax(data), data.shape)[0]
        assert right > shape[0] // 2  # the marker blob lands on the right after reorientation
    assert orientations == {"RAS", "LAS"}

    again = samples.write_mri_volumes(str(tmp_path / "again"), num_subjects=4, scans_per_subject=2, shape=shape,
                                      spacing=spacing, seed=3, label_column="diagnosis", labels=("cn", "ad"),
                                      with_split=True, gz=False)
    assert [r["path"] for r in again["rows"]] == [r["path"][: -len(".gz")] for r in rows]
    first = rows[1]["path"]
    np.testing.assert_array_equal(np.asarray(nib.load(str(tmp_path / first)).dataobj),
                                  np.asarray(nib.load(str(tmp_path / "again" / first[:-3])).dataobj))
