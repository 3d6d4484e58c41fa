"""`make demo`: small real inputs, a multi-process Beam build of every dataset, and a read-back report."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import time
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol import preview
from vidvol import samples
from vidvol.builders.writer import skip_report


@dataclasses.dataclass(frozen=True)
class DemoDataset:
    """One dataset of the demo: which config to build and how to write its sample inputs."""

    name: str
    config: str
    write_inputs: Callable[[str], Any]
    mask_key: str = "mask"


def _hmdb51_inputs(root: str) -> Any:
    return samples.write_hmdb51_layout(root, videos_per_class=4, num_frames=(12, 45), splits=(1,), seed=1)


def _fire_inputs(root: str) -> Any:
    return samples.write_fire_hrr_frames(
        root, experiments=(("exp_a", 40), ("exp_b", 25), ("exp_c", 12)), height=135, width=240, seed=2
    )


def _mri_inputs(root: str) -> Any:
    return samples.write_mri_volumes(root, num_subjects=16, shape=(40, 48, 36), seed=3)


DATASETS = (
    DemoDataset("hmdb51", "split1_20x64x64", _hmdb51_inputs),
    DemoDataset("fire_hrr", "161x135x240", _fire_inputs),
    DemoDataset("mri_volumes", "small_32", _mri_inputs),
)


def available(ds: DemoDataset) -> bool:
    """True when the dataset and config are registered (builder issues land one by one)."""
    try:
        cls = tfds.builder_cls(ds.name)
    except tfds.core.registered.DatasetNotFoundError:
        return False
    return ds.config in {c.name for c in cls.BUILDER_CONFIGS}


def describe(name: str, data_dir: str, mask_key: str) -> list[str]:
    """Examples per split, element shapes and dtypes, mask coverage and read throughput."""
    builder = tfds.builder(name, data_dir=data_dir)
    lines = []
    for split, info in builder.info.splits.items():
        ds = tfds.load(name, split=split, data_dir=data_dir, download=False)
        spec = ", ".join(f"{k}{tuple(v.shape)}:{v.dtype.name}" for k, v in sorted(ds.element_spec.items()))
        start = time.perf_counter()
        n, real, total = 0, 0, 0
        for ex in ds.prefetch(tf.data.AUTOTUNE):
            mask = ex[mask_key].numpy()
            real += int(np.count_nonzero(mask))
            total += mask.size
            n += 1
        rate = n / max(time.perf_counter() - start, 1e-9)
        coverage = real / total if total else 0.0
        lines.append(f"  {split:<10} {info.num_examples:>4} examples in {info.num_shards} shards")
        lines.append(f"             mask coverage {coverage:.1%}, read {rate:,.0f} examples/s (tfds.load, 1 pass)")
        lines.append(f"             {spec}")
    report = skip_report.read_skip_report(builder.data_dir)
    lines.append(f"  skip report {os.path.join(builder.data_dir, skip_report.SKIP_REPORT_NAME)}: {len(report['skipped'])} entries")
    return lines


def run(out: str, *, names: list[str] | None = None, fresh: bool = True) -> dict[str, list[str]]:
    """Writes inputs, builds each available dataset with multi-process Beam, and describes it."""
    if fresh and os.path.isdir(out):
        shutil.rmtree(out)
    data_dir = os.path.join(out, "data")
    results = {}
    for ds in DATASETS:
        if names and ds.name not in names:
            continue
        if not available(ds):
            print(f"{ds.name}: not available in this version, skipped")
            continue
        manual = os.path.join(out, "inputs", ds.name)
        os.makedirs(manual, exist_ok=True)
        ds.write_inputs(manual)
        full = f"{ds.name}/{ds.config}"
        print(f"== {full}: building from {manual} (Apache Beam, multi-process) ...", flush=True)
        start = time.perf_counter()
        builder = tfds.builder(full, data_dir=data_dir)
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
        print(f"   built in {time.perf_counter() - start:.1f} s -> {builder.data_dir}")
        results[full] = describe(full, data_dir, ds.mask_key)
        png = preview.save(full, os.path.join(out, f"preview_{ds.name}.png"), data_dir=data_dir)
        results[full].append(f"  preview     {png}")
        print("\n".join(results[full]), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    """CLI entry: `python -m vidvol demo --out DIR`."""
    parser = argparse.ArgumentParser(prog="vidvol demo", description=__doc__)
    parser.add_argument("--out", default="demo_out", help="folder for inputs, datasets and previews")
    parser.add_argument("--only", nargs="*", help="dataset names to run (default: all)")
    args = parser.parse_args(argv)
    results = run(args.out, names=args.only)
    print(f"\ndemo done: {len(results)} datasets built and read back under {args.out}/")
    return 0 if results else 1
