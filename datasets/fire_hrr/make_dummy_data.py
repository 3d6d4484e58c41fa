"""Regenerates `dummy_data/`: tiny real JPEG frames and a labels.csv in fire_hrr's frames layout.

Three experiments, one per split: `exp_a` (train, 12 frames, frame 4 has a NaN hrr), `exp_b`
(validation, 5 frames, frame 2's file is missing) and `exp_c` (test, 3 frames). Frames are
48x32 JPEGs (the builder resizes them up), so the folder stays a few KB.

Run: python -m vidvol.datasets.fire_hrr.make_dummy_data
"""

import csv
import os
import shutil

import cv2
import numpy as np

DUMMY_DIR = os.path.join(os.path.dirname(__file__), "dummy_data")
HEIGHT, WIDTH = 32, 48
# experiment -> (split, number of frames, frame index with NaN hrr, frame index whose file is missing)
EXPERIMENTS = {"exp_a": ("train", 12, 4, None), "exp_b": ("validation", 5, None, 2), "exp_c": ("test", 3, None, None)}


def frame(index: int, seed: int) -> np.ndarray:
    """A small textured BGR frame with a bright square that moves with `index`."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    phase = np.random.default_rng(seed).uniform(0, 6.28, 3)
    image = np.stack([127 + 90 * np.sin(xx / (5 + 2 * k) + yy / 7 + phase[k] + index / 3) for k in range(3)], -1)
    x = (index * 4) % (WIDTH - 8)
    image[12:20, x : x + 8] = 255
    return image.astype(np.uint8)


def main() -> None:
    """Writes the frames and labels.csv (replacing any previous dummy_data)."""
    shutil.rmtree(DUMMY_DIR, ignore_errors=True)
    rows = []
    for e, (name, (split, count, nan_at, missing_at)) in enumerate(EXPERIMENTS.items()):
        os.makedirs(os.path.join(DUMMY_DIR, "frames", name))
        for i in range(count):
            rel = f"frames/{name}/{i:04d}.jpg"
            if i != missing_at:
                cv2.imwrite(os.path.join(DUMMY_DIR, rel), frame(i, seed=e), [cv2.IMWRITE_JPEG_QUALITY, 75])
            hrr = "NaN" if i == nan_at else f"{50.0 + 25.0 * e + 10.0 * i:.1f}"
            rows.append([name, rel, hrr, f"{0.5 * i:.1f}", split])
    with open(os.path.join(DUMMY_DIR, "labels.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["experiment", "frame", "hrr", "time", "split"])
        writer.writerows(rows)


if __name__ == "__main__":
    main()
