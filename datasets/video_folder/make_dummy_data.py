"""Writes video_folder's dummy_data/: one tiny real collection per layout the builder reads.

    python -m vidvol.datasets.video_folder.make_dummy_data [OUT_DIR]

The layouts (`main`): `folders/`, `ucf101/`, `hmdb51_lists/` and `csv/`. The writers (`write_clip`,
`ucf101_tree`) are reused by the tests to write their inputs.
"""

from __future__ import annotations

import os
import shutil
import sys

from vidvol.testing import samples

DUMMY_DIR = os.path.join(os.path.dirname(__file__), "dummy_data")
# Container -> fourcc OpenCV's FFmpeg writes into it.
FOURCC = {".avi": "XVID", ".mp4": "mp4v", ".mkv": "MJPG"}
UCF_CLASSES = ("JumpingJack", "JumpRope")  # classInd order; Python's sorted() puts JumpRope first
# Names picked so that the 80/10/10 hash of `<class>/<name>` fills every split: 6 train, 2 validation, 2 test.
FOLDER_VIDEOS = {
    "jump": ("jump_00.avi", "jump_01.mp4", "jump_02.mkv", "jump_03.avi", "jump_11.mkv"),
    "wave": ("wave_00.avi", "wave_01.mp4", "wave_02.mkv", "wave_04.mp4", "wave_05.mkv"),
}
CSV_VIDEOS = {"videos/long_a.mp4": (40, 20.0), "videos/long_b.avi": (30, 15.0), "videos/long_c.mkv": (36, 12.0)}
CSV_ROWS = (  # path, label, split, start, end
    ("videos/long_a.mp4", "jump", "train", 0.0, 1.0),
    ("videos/long_a.mp4", "wave", "train", 1.0, 2.0),
    ("videos/long_b.avi", "wave", "train", 0.5, 1.5),
    ("videos/long_c.mkv", "jump", "validation", 0.0, 2.5),
    ("videos/long_b.avi", "jump", "test", 1.0, 2.0),
)


def write_clip(path: str, num_frames: int, *, seed: int = 0, fps: float = 25.0, height: int = 32, width: int = 40) -> str:
    """A small real video (index strip and colour key, see vidvol.testing.samples) in the container its extension names."""
    return samples.write_video(
        path, num_frames, height=height, width=width, fps=fps, fourcc=FOURCC[os.path.splitext(path)[1].lower()], seed=seed
    )


def ucf101_tree(root: str, *, classes=UCF_CLASSES, groups=(1, 2, 3), clips=(1, 2), test_groups=None,
                list_sets: int = 2, num_frames: int = 10) -> dict[str, list[str]]:
    """UCF101's layout: videos under `UCF-101/<Class>/`, lists under `ucfTrainTestlist/`; returns set 1's lists.

    Set k puts group k in test (the official sets use groups 1-7, 8-14, 15-21), the rest in train.
    """
    lists = os.path.join(root, "ucfTrainTestlist")
    os.makedirs(lists, exist_ok=True)
    videos = []
    for c, cls in enumerate(classes):
        for g in groups:
            for k in clips:
                name = f"{cls}/v_{cls}_g{g:02d}_c{k:02d}.avi"
                write_clip(os.path.join(root, "UCF-101", name), num_frames + (g + k) % 4, seed=100 * c + 10 * g + k)
                videos.append((cls, g, name))
    with open(os.path.join(lists, "classInd.txt"), "w") as f:
        f.writelines(f"{i + 1} {cls}\n" for i, cls in enumerate(classes))
    expected: dict[str, list[str]] = {}
    for s in range(1, list_sets + 1):
        tests = {s} if test_groups is None else set(test_groups)
        train = [(cls, n) for cls, g, n in videos if g not in tests]
        test = [n for _, g, n in videos if g in tests]
        with open(os.path.join(lists, f"trainlist{s:02d}.txt"), "w") as f:
            f.writelines(f"{n} {classes.index(cls) + 1}\r\n" for cls, n in train)  # UCF101's lists have CRLF
        with open(os.path.join(lists, f"testlist{s:02d}.txt"), "w") as f:
            f.writelines(f"{n}\r\n" for n in test)
        if s == 1:
            expected = {"train": sorted(n for _, n in train), "test": sorted(test)}
    return expected


def main(out: str = DUMMY_DIR) -> None:
    """Writes every layout under `out` (replacing what is there).

    - `folders/`: class folders only (`jump/`, `wave/`), .avi + .mp4 + .mkv mixed: hashed 80/10/10 split;
    - `ucf101/`: `UCF-101/<Class>/v_<Class>_g<group>_c<clip>.avi` with `ucfTrainTestlist/`
      (classInd.txt, trainlist01/02.txt, testlist01/02.txt); class names whose sorted order differs
      from classInd's;
    - `hmdb51_lists/`: `videos/<class>/*.mp4` with `splits/<class>_test_split1.txt`;
    - `csv/`: three longer videos (.mp4, .avi, .mkv) and `clips.csv` (`path,label,split,start,end`).

    Args:
      out: the dummy_data folder (default: this dataset's `dummy_data/`).
    """
    for layout in ("folders", "ucf101", "hmdb51_lists", "csv"):
        shutil.rmtree(os.path.join(out, layout), ignore_errors=True)
    for c, (cls, names) in enumerate(FOLDER_VIDEOS.items()):
        for i, name in enumerate(names):
            write_clip(os.path.join(out, "folders", cls, name), 8 + 3 * i, seed=10 * c + i)
    ucf101_tree(os.path.join(out, "ucf101"))
    hmdb = os.path.join(out, "hmdb51_lists")
    os.makedirs(os.path.join(hmdb, "splits"))
    for c, cls in enumerate(("brush", "climb")):
        names = [f"{cls}_{i}.mp4" for i in range(3)]
        for i, name in enumerate(names):
            write_clip(os.path.join(hmdb, "videos", cls, name), 9 + 4 * i, seed=50 + 10 * c + i)
        with open(os.path.join(hmdb, "splits", f"{cls}_test_split1.txt"), "w") as f:
            f.writelines(f"{n} {i} \n" for n, i in zip(names, (1, 1, 2)))
    csv_dir = os.path.join(out, "csv")
    for i, (rel, (frames, fps)) in enumerate(CSV_VIDEOS.items()):
        write_clip(os.path.join(csv_dir, rel), frames, fps=fps, seed=200 + i)
    with open(os.path.join(csv_dir, "clips.csv"), "w") as f:
        f.write("path,label,split,start,end\n")
        f.writelines(f"{p},{label},{split},{start},{end}\n" for p, label, split, start, end in CSV_ROWS)


if __name__ == "__main__":
    main(*sys.argv[1:])
