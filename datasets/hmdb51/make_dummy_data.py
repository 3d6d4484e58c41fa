"""Regenerates `dummy_data/`: tiny real XVID .avi files in the HMDB51 layout plus official-format split files.

Run: python -m vidvol.datasets.hmdb51.make_dummy_data
"""

import os

import cv2
import numpy as np

DUMMY_DIR = os.path.join(os.path.dirname(__file__), "dummy_data")
CLASSES = ("brush_hair", "cartwheel", "catch")
# video index -> (number of frames, split ids for splits 1, 2, 3); 1 = train, 2 = test, 0 = unused
VIDEOS = {0: (24, "121"), 1: (30, "112"), 2: (7, "211"), 3: (12, "020")}


def write_avi(path: str, num_frames: int, seed: int, size=(80, 60)) -> None:
    """A small textured XVID video with a moving square."""
    rng = np.random.default_rng(seed)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"XVID"), 30.0, size)
    if not writer.isOpened():
        raise RuntimeError(f"cannot open a XVID writer for {path}")
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    phase = rng.uniform(0, 6.28, 3)
    base = np.stack([127 + 100 * np.sin(xx / (6 + 3 * k) + yy / 9 + phase[k]) for k in range(3)], -1).astype(np.uint8)
    for i in range(num_frames):
        frame = np.roll(base, i * 2, axis=1).copy()
        x = (i * 3) % (w - 16)
        frame[20:36, x : x + 16] = (255, 255, 255)
        writer.write(frame)
    writer.release()


def main() -> None:
    """Writes every class folder and split file."""
    org = os.path.join(DUMMY_DIR, "hmdb51_org")
    splits = os.path.join(DUMMY_DIR, "testTrainMulti_7030_splits")
    os.makedirs(splits, exist_ok=True)
    for c, cls in enumerate(CLASSES):
        os.makedirs(os.path.join(org, cls), exist_ok=True)
        for v, (frames, _) in VIDEOS.items():
            write_avi(os.path.join(org, cls, f"{cls}_clip{v}_u_nm_np1_fr_med_{v}.avi"), frames, seed=10 * c + v)
        for k in (1, 2, 3):
            lines = [f"{cls}_clip{v}_u_nm_np1_fr_med_{v}.avi {ids[k - 1]} " for v, (_, ids) in VIDEOS.items()]
            with open(os.path.join(splits, f"{cls}_test_split{k}.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
