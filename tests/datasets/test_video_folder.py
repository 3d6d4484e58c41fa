"""video_folder: every manual_dir layout over dummy data, UCF101 lists and group hashing, CSV time ranges
checked frame by frame against the decoded source, bad inputs, label names saved with the dataset, the CLI."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil

import cv2
import numpy as np
import pytest
import tensorflow_datasets as tfds

import vidvol
from vidvol.builders.transforms import clips
from vidvol.builders.transforms import video
from vidvol.builders.writer import skip_report
from vidvol.datasets.video_folder import layout as vf
from vidvol.datasets.video_folder import make_dummy_data
from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb
from vidvol.testing import samples

DUMMY = make_dummy_data.DUMMY_DIR


class VideoFolderFoldersTest(tfds.testing.DatasetBuilderTestCase):
    """Class folders only, .avi/.mp4/.mkv mixed: the 80/10/10 hash by video."""

    DATASET_CLASS = vfb.Builder
    EXAMPLE_DIR = os.path.join(DUMMY, "folders")
    SPLITS = {"train": 6, "validation": 2, "test": 2}
    SKIP_CHECKSUMS = True


@pytest.mark.slow  # a full builder test; `make test` runs it, `make test-fast` has its dataset's first
class VideoFolderUcf101Test(tfds.testing.DatasetBuilderTestCase):
    """UCF101 layout: UCF-101/<Class>/..., ucfTrainTestlist/ with classInd.txt; set 1 by default, set 2 by config."""

    DATASET_CLASS = vfb.Builder
    EXAMPLE_DIR = os.path.join(DUMMY, "ucf101")
    SPLITS = {"train": 8, "test": 4}
    BUILDER_CONFIG_NAMES_TO_TEST = ["20x64x64", vfb.VideoFolderConfig(name="set2", split_set="2")]
    SKIP_CHECKSUMS = True


@pytest.mark.slow  # a full builder test; `make test` runs it, `make test-fast` has its dataset's first
class VideoFolderHmdb51ListsTest(tfds.testing.DatasetBuilderTestCase):
    """Class folders one level down with HMDB51-format split files."""

    DATASET_CLASS = vfb.Builder
    EXAMPLE_DIR = os.path.join(DUMMY, "hmdb51_lists")
    SPLITS = {"train": 4, "test": 2}
    SKIP_CHECKSUMS = True


class VideoFolderCsvTest(tfds.testing.DatasetBuilderTestCase):
    """A CSV `path,label,split,start,end` cutting clips out of longer .mp4/.avi/.mkv videos; also every frame."""

    DATASET_CLASS = vfb.Builder
    EXAMPLE_DIR = os.path.join(DUMMY, "csv")
    SPLITS = {"train": 3, "validation": 1, "test": 1}
    BUILDER_CONFIG_NAMES_TO_TEST = ["20x64x64", vfb.Builder.get_builder_config("all_112x112")]
    SKIP_CHECKSUMS = True


def _examples(builder, split):
    return list(tfds.as_numpy(builder.as_dataset(split=split)))


def test_configs_default_first_and_geometries():
    assert [c.name for c in vfb.Builder.BUILDER_CONFIGS] == ["20x64x64"]  # `tfds build video_folder`: one pass
    default = vfb.Builder.BUILDER_CONFIGS[0]
    assert (default.num_frames, default.height, default.width, default.sampling, default.image_format) == (20, 64, 64, "uniform", "jpeg")
    names = [c.name for c in vfb.Builder.all_configs()]
    assert names == ["20x64x64", "20x64x64_crop", "20x64x64_motion", "20x64x64_png", "16x112x112", "16x224x224",
                     "all_112x112", "20x64x64_raw", "16x112x112_raw"]
    built = vfb.Builder(config="16x112x112", data_dir="/nonexistent")
    assert built.info.features["video"].shape == (16, 112, 112, 3) and "start" not in built.info.features
    with pytest.raises(ValueError, match="split_set"):
        vf.parse_split_set_name("first")


def test_ucf101_lists_class_index_and_missing_video(tmp_path, build_in_process):
    manual = tmp_path / "ucf"
    shutil.copytree(os.path.join(DUMMY, "ucf101"), manual)
    expected = {"train": 8, "test": 4}
    gone = "JumpRope/v_JumpRope_g01_c02.avi"
    os.remove(manual / "UCF-101" / gone)  # named by testlist01.txt
    lines = (manual / "ucfTrainTestlist" / "testlist01.txt").read_text().splitlines()
    builder = build_in_process(vfb.Builder, manual, tmp_path / "out")
    assert builder.info.splits["train"].num_examples == expected["train"]
    assert builder.info.splits["test"].num_examples == expected["test"] - 1
    (skip,) = skip_report.read_skip_report(builder.data_dir)["skipped"]
    assert skip["source"] == gone and skip["split"] == "test"
    assert f"testlist01.txt:{lines.index(gone) + 1})" in skip["reason"] and "not found" in skip["reason"]
    # Labels follow classInd.txt (JumpingJack = 1, JumpRope = 2), not Python's sorted() order.
    assert builder.info.features["label"].names == ["JumpingJack", "JumpRope"]
    for ex in _examples(builder, "train") + _examples(builder, "test"):
        cls, name = ex["video_id"].decode().split("/")
        assert builder.info.features["label"].int2str(ex["label"]) == cls and name.startswith(f"v_{cls}_g")
        group = int(re.search(r"_g(\d+)_", name)[1])
        assert (group == 1) == (ex["video_id"].decode() in lines)  # testlist01 holds group 1
    # Read back without manual_dir: the discovered names come from the dataset's own files.
    again = tfds.builder("video_folder", data_dir=str(tmp_path / "out"))
    assert again.info.features["label"].names == ["JumpingJack", "JumpRope"]


def test_ucf101_group_hashing_never_straddles(tmp_path, build_in_process):
    manual = tmp_path / "ucf"
    make_dummy_data.ucf101_tree(str(manual), groups=(1, 2, 3, 4, 5, 6), clips=(1, 2), list_sets=1, num_frames=6)
    shutil.rmtree(manual / "ucfTrainTestlist")  # no lists: the hash decides
    config = vfb.VideoFolderConfig(
        name="grouped", group_regex=r"_g(\d+)_", train_fraction=0.5, validation_fraction=0.25, test_fraction=0.25,
    )
    builder = build_in_process(vfb.Builder, manual, tmp_path / "out", config=config)
    splits_of = collections.defaultdict(set)
    seen = []
    for split in builder.info.splits:
        for ex in _examples(builder, split):
            name = ex["video_id"].decode()
            splits_of[re.search(r"_g(\d+)_", name)[1]].add(split)
            seen.append(name)
    assert sorted(seen) == sorted(f"{c}/v_{c}_g{g:02d}_c{k:02d}.avi" for c in make_dummy_data.UCF_CLASSES
                                  for g in range(1, 7) for k in (1, 2))
    assert all(len(s) == 1 for s in splits_of.values()), splits_of  # a group (both classes, all clips) in one split
    assert len(set().union(*splits_of.values())) >= 2
    # Hashing each video on its own would have split groups here: the regex is what keeps them together.
    per_video = vf.discover(str(manual), vf.Options(fractions={"train": 0.5, "validation": 0.25, "test": 0.25}))
    straddle = collections.defaultdict(set)
    for split, entries in per_video.splits.items():
        for e in entries:
            straddle[re.search(r"_g(\d+)_", e.video_id)[1]].add(split)
    assert any(len(s) > 1 for s in straddle.values())


def _source_frames(path: str, size=(64, 64)) -> list[np.ndarray]:
    """Every frame of a video decoded with OpenCV directly, RGB, resized as the builder resizes (INTER_AREA)."""
    cap = cv2.VideoCapture(path)
    frames = []
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        frames.append(cv2.resize(rgb, (size[1], size[0]), interpolation=cv2.INTER_AREA))
    cap.release()
    return frames


def _mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def _jpeg_round_trip(rgb: np.ndarray, quality: int = 90) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def test_csv_time_ranges_frame_by_frame(tmp_path, build_in_process):
    manual = tmp_path / "kinetics"
    sources = {"clips/a.mp4": (60, 20.0), "clips/b.avi": (45, 15.0), "clips/c.mkv": (50, 25.0)}
    for i, (rel, (n, fps)) in enumerate(sources.items()):
        make_dummy_data.write_clip(str(manual / rel), n, fps=fps, seed=i, height=64, width=80)
    good = [  # path, label, split, start, end
        ("clips/a.mp4", "jump", "train", 0.5, 2.0),  # frames 10..39: 20 of 30 sampled
        ("clips/a.mp4", "wave", "train", 2.25, 3.0),  # frames 45..59: 15 frames, 5 padded
        ("clips/b.avi", "wave", "test", 0.0, 3.0),  # the whole video
        ("clips/c.mkv", "jump", "test", 1.02, 1.5),  # frames 26..37 (1.02 s * 25 = 25.5 -> 26)
        ("clips/a.mp4", "jump", "test", 2.0, 3.04),  # ends within one frame past the video: frames 40..59
    ]
    bad = [
        ("clips/c.mkv", "jump", "train", 1.5, 1.5, "start 1.5 s >= end 1.5 s"),
        ("clips/b.avi", "wave", "train", 2.5, 4.0, "end 4 s is past the end of the video (45 frames at 15 fps"),
        ("clips/b.avi", "jump", "train", 3.5, 4.0, "start 3.5 s is at or past the end of the video"),
        ("clips/missing.mp4", "jump", "train", 0.0, 1.0, "video not found (named by"),
    ]
    rows = good[:2] + bad[:2] + good[2:] + bad[2:]
    (manual / "list.csv").write_text(
        "path,label,split,time_start,time_end\n" + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]}\n" for r in rows)
    )
    config = vfb.VideoFolderConfig(name="clips", csv_file="list.csv")
    builder = build_in_process(vfb.Builder, manual, tmp_path / "out", config=config)
    assert {s: builder.info.splits[s].num_examples for s in builder.info.splits} == {"train": 2, "test": 3}

    report = skip_report.read_skip_report(builder.data_dir)
    reasons = {s["source"]: s["reason"] for s in report["skipped"]}
    assert len(reasons) == len(bad)
    for path, label, split, start, end, why in bad:
        reason = reasons[f"{path}@{float(start)!r}-{float(end)!r}"]
        assert why in reason, reason
        assert f"list.csv:{rows.index((path, label, split, start, end, why)) + 2})" in reason  # header is line 1

    decoded = {rel: _source_frames(str(manual / rel)) for rel in sources}
    labels = builder.info.features["label"]
    got = {}
    for split in ("train", "test"):
        for ex in _examples(builder, split):
            got[(ex["video_id"].decode(), round(float(ex["start"]), 3), round(float(ex["end"]), 3))] = (split, ex)
    assert len(got) == len(good)
    for path, label, split, start, end in good:
        n_total, fps = sources[path]
        ex_split, ex = got[(path, round(start, 3), round(end, 3))]
        first, stop = int(np.ceil(start * fps - 1e-6)), min(n_total, int(np.ceil(end * fps - 1e-6)))
        want = first + video.uniform_indices(stop - first, 20)
        n = len(want)
        assert ex_split == split and labels.int2str(ex["label"]) == label
        assert int(ex["num_frames"]) == stop - first and abs(float(ex["fps"]) - fps) < 1e-3
        assert ex["mask"].tolist() == [1] * n + [0] * (20 - n)
        assert ex["frame_indices"].tolist() == want.tolist() + [-1] * (20 - n)
        assert ex["video"][n:].max(initial=0) == 0
        for slot, index in enumerate(want):
            assert start - 1e-6 <= index / fps < end  # the frame's timestamp lies in [start, end)
            frame = ex["video"][slot]
            assert samples.decode_frame_index(frame) == index  # the index strip written into that source frame
            source = decoded[path]
            diff = _mean_abs(frame, source[index])
            # The same frame within JPEG error: no further from it than its own q90 JPEG round trip (+1
            # level for the decoders' rounding), and much nearer than the source frames next to it.
            assert diff <= _mean_abs(_jpeg_round_trip(source[index]), source[index]) + 1.0, (path, index, diff)
            neighbours = [_mean_abs(frame, source[j]) for j in (index - 1, index + 1) if 0 <= j < len(source)]
            assert diff < 0.6 * min(neighbours), (path, index, diff, neighbours)

    # Read back by name without manual_dir (a custom config: from the dataset's files), then vidvol.load.
    again = tfds.builder("video_folder/clips", data_dir=str(tmp_path / "out"))
    assert again.info.features["label"].names == ["jump", "wave"]
    assert {"start", "end", "video", "mask", "label", "video_id", "num_frames", "fps"} <= set(again.info.features)
    ds = tfds.load("video_folder/clips", split="test", data_dir=str(tmp_path / "out"), as_supervised=True)
    video_spec, label_spec = ds.element_spec
    assert video_spec.shape == (20, 64, 64, 3) and label_spec.dtype.name == "int64"
    (inputs, labels_batch), = list(vidvol.load("video_folder/clips", split="test", batch_size=3, data_dir=str(tmp_path / "out")).take(1))
    assert tuple(inputs[0].shape) == (3, 20, 64, 64, 3) and tuple(inputs[1].shape) == (3, 20) and labels_batch.shape == (3,)


@pytest.mark.parametrize("sampling,num_frames", [("motion", 6), ("uniform", None)])
def test_range_with_motion_sampling_and_every_frame(tmp_path, sampling, num_frames):
    path = make_dummy_data.write_clip(str(tmp_path / "v.mkv"), 50, fps=25.0, height=64, width=80)
    spec = clips.ClipSpec(num_frames=num_frames, height=64, width=64, sampling=sampling)
    source = clips.ClipSource(path=path, key="v", features={}, origin="x.csv:2", start=0.8, end=1.6)  # frames 20..39
    ((key, ex),) = list(clips.clip_example(source, spec))
    kept = ex["frame_indices"][ex["mask"] == 1]
    assert key == "v" and int(ex["num_frames"]) == 20 and np.all(np.diff(kept) > 0)
    assert kept.min() >= 20 and kept.max() <= 39 and len(kept) == (num_frames or 20)
    if num_frames is None:
        assert kept.tolist() == list(range(20, 40))
    frames = [cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR) for jpeg in ex["video"]]  # strip: black/white
    assert [samples.decode_frame_index(f) for f, m in zip(frames, ex["mask"]) if m] == kept.tolist()


def test_class_folder_layout_errors(tmp_path, caplog):
    root = tmp_path / "vids"
    for cls in ("a", "b"):
        make_dummy_data.write_clip(str(root / cls / f"{cls}_0.avi"), 4)
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("x")
    with pytest.raises(vf.LayoutError, match=r"class folder .*notes holds no video .*move it out"):
        vf.discover(str(root), vf.Options())
    shutil.rmtree(root / "notes")
    with pytest.raises(vf.LayoutError, match="split_set '2' asked for, but manual_dir holds no split lists"):
        vf.discover(str(root), vf.Options(split_set="2"))
    with pytest.raises(vf.LayoutError, match="must sum to 1"):
        vf.discover(str(root), vf.Options(fractions={"train": 0.8, "validation": 0.3, "test": 0.0}))
    with pytest.raises(vf.LayoutError, match="not a valid regular expression"):
        vf.discover(str(root), vf.Options(group_regex="_g(\\d+"))
    (root / "lists").mkdir()
    (root / "lists" / "trainlist01.txt").write_text("a/a_0.avi 1\nb/b_0.avi\n")
    (root / "lists" / "trainlist03.txt").write_text("a/a_0.avi 1\nb/b_0.avi x2\n")
    with pytest.raises(vf.LayoutError, match=r"split_set '2': no such set; found sets \[1, 3\]"):
        vf.discover(str(root), vf.Options(split_set="2"))
    with pytest.raises(ValueError, match=r"trainlist03.txt:2: expected `<class>/<video>.<ext>`"):
        vf.discover(str(root), vf.Options(split_set="3"))
    caplog.set_level("WARNING")
    found = vf.discover(str(root), vf.Options())  # lists present, no set named: the first set, logged
    assert "Using split set 1 (ucf101 lists: trainlist01.txt" in caplog.text
    assert {s: [e.video_id for e in es] for s, es in found.splits.items()} == {"train": ["a/a_0.avi", "b/b_0.avi"]}
    (root / "lists" / "testlist01.txt").write_text("b/b_0.avi\n")
    with pytest.raises(vf.LayoutError, match=r"testlist01.txt:1: b/b_0.avi is already listed at .*trainlist01.txt:2"):
        vf.discover(str(root), vf.Options(split_set=1))
    make_dummy_data.write_clip(str(root / "a" / "a_1.avi"), 4)
    (root / "lists" / "testlist01.txt").write_text("a/a_1.avi 2\n")
    with pytest.raises(vf.LayoutError, match=r"label index 2 for 'a', but .*trainlist01.txt:1 gives 1"):
        vf.discover(str(root), vf.Options(split_set=1))
    assert vf.discover(str(root), vf.Options(split_set="none")).layout.endswith("hashed split")


def test_hmdb_format_lists_and_csv_errors(tmp_path):
    root = tmp_path / "h"
    for cls in ("x", "y"):
        make_dummy_data.write_clip(str(root / "videos" / cls / f"{cls}0.mp4"), 4)
    (root / "splits").mkdir()
    (root / "splits" / "x_test_split1.txt").write_text("x0.mp4 1\n")
    (root / "splits" / "y_test_split1.txt").write_text("y0.mp4 1\nx0.mp4 2\n")  # x0 sits in x/, not y/
    with pytest.raises(vf.LayoutError, match=r"y_test_split1.txt:2: x0.mp4 is listed for class 'y' but sits in the 'x'"):
        vf.discover(str(root), vf.Options())
    (root / "splits" / "y_test_split1.txt").write_text("y0.mp4 1\ny1.mp4 two\n")
    with pytest.raises(ValueError, match=r"y_test_split1.txt:2: expected `<video>.<ext> <id>`"):
        vf.discover(str(root), vf.Options())

    csv_root = tmp_path / "c"
    csv_root.mkdir()
    bad_rows = {
        "a.mp4,jump,train,zero,1\n": "start 'zero' is not a number of seconds",
        "a.mp4,jump,train,0\n": "4 cells, expected 5",
        "a.mp4,jump,Train Set,0,1\n": "is not a split name",
        "a.txt,jump,train,0,1\n": "is not a video file",
    }
    for row, why in bad_rows.items():
        (csv_root / "v.csv").write_text("path,label,split,start,end\na.mp4,wave,train,0,1\n" + row)
        with pytest.raises(vf.LayoutError, match=rf"v.csv:3: .*{re.escape(why)}"):
            vf.discover(str(csv_root), vf.Options())
    (csv_root / "v.csv").write_text("clips/a.mp4,2\nclips/b.mp4,10\n")  # no header: found only by csv_file
    with pytest.raises(vf.LayoutError, match="no class folder holding videos, and no CSV"):
        vf.discover(str(csv_root), vf.Options())
    found = vf.discover(str(csv_root), vf.Options(csv_file="v.csv", fractions={"train": 1.0}))
    assert found.label_names == ["2", "10"] and not found.has_times  # numeric labels sort as numbers
    assert [e.path for e in found.splits["train"]] == [str(csv_root / "clips" / "a.mp4"), str(csv_root / "clips" / "b.mp4")]
    (csv_root / "w.csv").write_text("label,path\njump,a.mp4\n")
    (csv_root / "z.csv").write_text("path,label\na.mp4,jump\n")
    with pytest.raises(vf.LayoutError, match=r"several video CSVs \['w.csv', 'z.csv'\]; name one with the config's csv_file"):
        vf.discover(str(csv_root), vf.Options())


@pytest.mark.slow
def test_cli_build_no_config_and_json_config(tmp_path, tfds_build):
    manual = tmp_path / "manual"
    shutil.copytree(os.path.join(DUMMY, "folders"), manual)
    out = tmp_path / "data"
    proc = tfds_build("video_folder", manual, out)  # no config: the default alone, every video decoded once
    assert "video_folder/20x64x64 train: 6 examples" in proc.stderr + proc.stdout
    assert sorted(p.name for p in (out / "video_folder").iterdir() if not p.name.startswith(".")) == ["20x64x64"]
    sup = tfds.load("video_folder", split="train", data_dir=str(out), as_supervised=True)
    assert sup.element_spec[0].shape == (20, 64, 64, 3)
    assert tfds.builder("video_folder", data_dir=str(out)).info.features["label"].names == ["jump", "wave"]
    config = {"name": "ucf_set2", "split_set": "2", "num_frames": 8, "height": 32, "width": 32}
    ucf = tmp_path / "ucf"
    shutil.copytree(os.path.join(DUMMY, "ucf101"), ucf)
    tfds_build("video_folder", ucf, out, "--config", json.dumps(config))
    test = tfds.load("video_folder/ucf_set2", split="test", data_dir=str(out))
    ids = sorted(ex["video_id"].decode() for ex in tfds.as_numpy(test))
    assert ids and all("_g02_" in i for i in ids) and test.element_spec["video"].shape == (8, 32, 32, 3)
