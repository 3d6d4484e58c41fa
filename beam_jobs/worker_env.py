"""Pinned requirements for remote Beam workers: the driver's own versions of what vidvol's DoFns import.

Workers unpickle vidvol's DoFns and run OpenCV/nibabel/TensorFlow inside them, so a cluster's SDK
workers need the same versions as the driver that planned the build (pickles and encoded bytes
depend on them). `python -m vidvol.beam_jobs.worker_env > worker_requirements.txt` writes those
pins, for `--requirements_file` or the SDK container image (`beam_jobs/Dockerfile`).
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence

# Distributions whose code runs inside vidvol's Beam workers (whichever of tensorflow/-cpu is installed).
WORKER_DISTRIBUTIONS = (
    "apache-beam",
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-datasets",
    "opencv-python-headless",
    "nibabel",
    "numpy",
    "scipy",
    "protobuf",
    "rarfile",
    "psutil",
)


def pinned_requirements(distributions: Sequence[str] = WORKER_DISTRIBUTIONS) -> list[str]:
    """`name==version` for each installed distribution of `distributions` (missing ones are left out)."""
    pins = []
    for name in distributions:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def main() -> int:
    """Prints the pins, one per line."""
    sys.stdout.write("".join(pin + "\n" for pin in pinned_requirements()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
