"""MRI read modes side by side: `vidvol.load` over one prepared mri_volumes config, the modes alternating in one process.

    python benchmarks/mri_read_study.py DATA_DIR/mri_volumes/128/2.0.0 [--batch 4] [--rounds 5] [--seconds 5] [MODE ...]

Modes (default `plain patch augment`): `plain` (float32 volume + float32 mask, the default output),
`nomask` (`mask_dtype=None`), `int16` (`output_dtype='int16', mask_dtype=None`), `patch` (patches of
3/4 of the side, nothing else random), `augment` (`suite.mri_augment`: the MONAI peer's set, as the
benchmark's augmented rows), `flip`, `rotate`, `intensity` (the patch plus that one transform). Each
round times every mode for `--seconds` after warm-up (a fresh iterator each); the rounds alternate,
so a machine that drifts moves all modes alike. Prints every round, the medians, and each mode's
median per-round ratio to the first mode (wall and cpu-normalized: examples per CPU-second of this
process x cores). The figures go to benchmarks/RESULTS.md's studies block ("Volume augmentation").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import streams
import suite


def specs(grid: int):
    """{mode: vidvol.ReadSpec} for a `grid`^3 config."""
    import vidvol  # pylint: disable=g-import-not-at-top

    augment = suite.mri_augment(grid)
    patch = dict(patch_size=augment["patch_size"])
    make = lambda **kw: vidvol.ReadSpec(augment=vidvol.VolumeAugment(**kw))  # noqa: E731
    return {
        "plain": vidvol.ReadSpec(),
        "nomask": vidvol.ReadSpec(output=vidvol.Output(mask_dtype=None)),
        "int16": vidvol.ReadSpec(output=vidvol.Output(dtype="int16", mask_dtype=None)),
        "patch": make(**patch),
        "augment": make(**augment),
        "flip": make(**patch, flip_prob=0.5, flip_axes=[0]),
        "rotate": make(**patch, rotate_prob=0.5),
        "intensity": make(**patch, scale_prob=1.0, scale_factors=0.1, shift_prob=1.0, shift_offsets=0.1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a prepared mri_volumes config folder (…/mri_volumes/128/2.0.0)")
    parser.add_argument("modes", nargs="*", default=["plain", "patch", "augment"])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    import vidvol  # pylint: disable=g-import-not-at-top

    builder = tfds.builder_from_directory(args.folder)
    table = specs(int(builder.info.features["volume"].shape[0]))
    cores = len(os.sched_getaffinity(0))
    runs = {m: [] for m in args.modes}
    for r in range(args.rounds):
        for mode in args.modes:
            make = lambda: iter(vidvol.load(builder, "train", args.batch, seed=r, repeat=True,  # noqa: E731
                                            spec=table[mode]))
            out = streams.stream_rate(make, count=lambda b: int(b[-1].shape[0]), min_seconds=args.seconds,
                                      warmup_batches=3, cores=cores)
            runs[mode].append(out)
            print(json.dumps({"round": r, "mode": mode, **{k: round(v, 3) for k, v in out.items()}}), flush=True)
    first = args.modes[0]
    for mode in args.modes:
        ratio = lambda key: statistics.median(a[key] / b[key] for a, b in zip(runs[mode], runs[first]))  # noqa: E731
        print(json.dumps({"mode": mode, "batch": args.batch,
                          "examples_per_s": round(statistics.median(x["examples_per_s"] for x in runs[mode]), 1),
                          "cpu_examples_per_s": round(statistics.median(x["cpu_examples_per_s"] for x in runs[mode]), 1),
                          f"x_{first}": round(ratio("examples_per_s"), 3),
                          f"x_{first}_cpu": round(ratio("cpu_examples_per_s"), 3),
                          "others": round(statistics.median(x["other_cores_busy"] for x in runs[mode]), 2)}))


if __name__ == "__main__":
    main()
