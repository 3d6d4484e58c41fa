"""`make bench`'s own settings: the shared inputs and the headline's reads and builds, per mode."""

from __future__ import annotations

import dataclasses
from typing import Any

from common import section


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings(section.Settings):
    """Sizes and repetitions of one benchmark mode (`runs`: timed runs per read pipeline, median reported)."""

    build_runs: int  # builds per worker count for the scaling measurement
    scaling_repeat: int  # each experiment listed this many times (same frames) for the 1-vs-2-worker builds
    min_seconds: float  # timed seconds per read run
    isolate: bool  # builds via the tfds CLI (multi-process Beam) and each read in its own process
    hmdb51: dict[str, Any]
    hmdb51_config: str
    hmdb51_batch: int
    fire: dict[str, Any]
    fire_config: str
    fire_counts: tuple[int, int]  # experiments built for the memory comparison; the smaller one is read
    fire_batch: int
    mri: tuple[tuple[str, dict[str, Any]], ...]
    mri_config: str
    mri_batch: int
    hmdb51_path_batches: tuple[int, ...] = (8, 32)  # tfds.load and seeded/unseeded vidvol.load at each


FULL = RunSettings(
    mode="full", runs=3, build_runs=3, scaling_repeat=4, min_seconds=2.0, isolate=True,
    # 240 clips, 80 in split 1's train list: an epoch of several batches, so per-epoch costs (files
    # reopened, shuffle refilled) weigh as little as in HMDB51's 3,570-clip train split.
    hmdb51=dict(num_classes=8, videos_per_class=30, num_frames=(60, 300), height=240, width=320),
    hmdb51_config="split1_20x64x64", hmdb51_batch=32,
    fire=dict(experiments=16, frames=161, height=540, width=960), fire_config="full_161x540x960",
    fire_counts=(4, 16), fire_batch=1,
    mri=(("128", dict(num=12, shape=(128, 128, 128))), ("256x256x160", dict(num=8, shape=(256, 256, 160)))),
    mri_config="128", mri_batch=2,
)
QUICK = RunSettings(
    mode="quick", runs=1, build_runs=1, scaling_repeat=1, min_seconds=0.3, isolate=False,
    hmdb51=dict(num_classes=2, videos_per_class=3, num_frames=(20, 40), height=120, width=160),
    hmdb51_config="split1_20x64x64", hmdb51_batch=2,
    fire=dict(experiments=2, frames=161, height=135, width=240), fire_config="161x135x240",
    fire_counts=(1, 2), fire_batch=1,
    mri=(("32", dict(num=2, shape=(32, 32, 32))), ("40x40x24", dict(num=2, shape=(40, 40, 24)))),
    mri_config="small_32", mri_batch=2, hmdb51_path_batches=(2, 4),
)
FIRE_WINDOW = 161
HMDB51_FRAMES = 20
HMDB51_CLIPS = 6766  # clips in the real HMDB51 (the disk cost of a config is stated for all of them)
CONTENDED_CORES = 0.25  # other processes busier than this during a timed window make it "shared"


def mri_augment(grid: int) -> dict[str, Any]:
    """`vidvol.VolumeAugment(**this)`: the MONAI peer's augmented set (`peer_jobs.MONAI_AUGMENT`) on a `grid`^3 config:
    patches of 3/4 of the side (96^3 of 128^3), flip on axis 0 and a quarter turn in axes (0, 1) each with p=0.5,
    intensity scale and shift (0.1) on every volume."""
    side = 3 * int(grid) // 4
    return dict(patch_size=[side] * 3, flip_prob=0.5, flip_axes=[0], rotate_prob=0.5, rotate_axes=[0, 1],
                scale_prob=1.0, scale_factors=0.1, shift_prob=1.0, shift_offsets=0.1)


def fire_config_size(config: str) -> tuple[int, int]:
    """(height, width) of a fire_hrr config name such as 'full_161x540x960' or '161x135x240'."""
    parts = config.split("_")[-1 if config.startswith("full") else 0].split("x")
    if len(parts) != 3:
        raise ValueError(f"fire_hrr config {config!r}: expected '<T>x<H>x<W>' in its name")
    return int(parts[1]), int(parts[2])

