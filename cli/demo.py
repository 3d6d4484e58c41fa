"""`make demo`: small real inputs, a Beam build of every dataset, its read-back (tfds.load, vidvol.load, preview) and page."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

import vidvol  # registers the datasets
from vidvol.builders.writer import skip_report
from vidvol.cli import preview
from vidvol.cli import report
from vidvol.testing import samples


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


VIDEO_FOLDER_CLASSES = ("jump", "run", "wave")


def _video_folder_inputs(root: str) -> Any:
    """Your own videos: one folder per class, containers mixed as users' collections are."""
    from vidvol.datasets.video_folder import make_dummy_data

    paths = []
    for c, cls in enumerate(VIDEO_FOLDER_CLASSES):
        for i in range(8):
            ext = (".avi", ".mp4", ".mkv")[i % 3]
            paths.append(make_dummy_data.write_clip(os.path.join(root, cls, f"{cls}_{i:02d}{ext}"), 18 + 3 * i,
                                                    seed=10 * c + i, height=72, width=96))
    return paths


DATASETS = (
    DemoDataset("hmdb51", "split1_20x64x64", _hmdb51_inputs),
    DemoDataset("fire_hrr", "161x135x240", _fire_inputs),
    DemoDataset("mri_volumes", "small_32", _mri_inputs),
    DemoDataset("video_folder", "20x64x64", _video_folder_inputs),
)


def registered_datasets() -> list[str]:
    """The datasets `import vidvol` registers with TFDS (every one must be in DATASETS)."""
    return sorted(n for n in tfds.list_builders(with_community_datasets=False)
                  if tfds.builder_cls(n).__module__.startswith("vidvol."))


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
        read = 0
        for batch in vidvol.load(name, split, batch_size=4, data_dir=data_dir, training=False):
            (x, mask), y = batch  # the last batch's shapes are reported below
            read += int(x.shape[0])
        if read != info.num_examples:
            raise RuntimeError(f"{name} {split}: vidvol.load read {read} examples, the split holds {info.num_examples}")
        lines.append(f"             vidvol.load: batches ((x(4, {', '.join(map(str, x.shape[1:]))}):{x.dtype.name}, "
                     f"mask(4, {', '.join(map(str, mask.shape[1:]))})), target(4,):{y.dtype.name}), "
                     f"{read} examples read")
    report = skip_report.read_skip_report(builder.data_dir)
    lines.append(f"  skip report {os.path.join(builder.data_dir, skip_report.SKIP_REPORT_NAME)}: {len(report['skipped'])} entries")
    return lines


def run_one(ds: DemoDataset, out: str, data_dir: str) -> list[str]:
    """Writes one dataset's inputs, builds it with Beam, reads it back and previews it."""
    manual = os.path.join(out, "inputs", ds.name)
    os.makedirs(manual, exist_ok=True)
    ds.write_inputs(manual)
    full = f"{ds.name}/{ds.config}"
    print(f"== {full}: building from {manual} (Apache Beam) ...", flush=True)
    start = time.perf_counter()
    builder = tfds.builder(full, data_dir=data_dir)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
    print(f"   built in {time.perf_counter() - start:.1f} s -> {builder.data_dir}")
    lines = describe(full, data_dir, ds.mask_key)
    png = preview.save(full, os.path.join(out, f"preview_{ds.name}.png"), data_dir=data_dir)
    lines.append(f"  preview     {png}")
    page = report.write_report(full, data_dir=data_dir)
    lines.append(f"  report page {page}")
    print("\n".join(lines), flush=True)
    return lines


def run(out: str, *, names: list[str] | None = None, fresh: bool = True,
        datasets: Sequence[DemoDataset] | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Builds and reads back each dataset; returns ({NAME/CONFIG: report lines}, {NAME/CONFIG: why it failed})."""
    datasets = DATASETS if datasets is None else datasets
    unknown = sorted(set(names or ()) - {ds.name for ds in datasets})
    if unknown:
        raise ValueError(f"no demo dataset named {unknown}; the demo has {[ds.name for ds in datasets]}")
    if fresh and os.path.isdir(out):
        shutil.rmtree(out)
    data_dir = os.path.join(out, "data")
    results, failures = {}, {}
    for ds in datasets:
        if names and ds.name not in names:
            continue
        full = f"{ds.name}/{ds.config}"
        try:
            results[full] = run_one(ds, out, data_dir)
        except Exception as e:  # one dataset's failure is reported; the others still run
            failures[full] = f"{type(e).__name__}: {e}"
            print(f"== {full}: FAILED: {failures[full]}", file=sys.stderr, flush=True)
    return results, failures


def main(argv: list[str] | None = None) -> int:
    """CLI entry: `python -m vidvol demo --out DIR`; exit 1 when any dataset could not be built or read."""
    parser = argparse.ArgumentParser(prog="vidvol demo", description=__doc__)
    parser.add_argument("--out", default="demo_out", help="folder for inputs, datasets and previews")
    parser.add_argument("--only", nargs="*", help="dataset names to run (default: all)")
    args = parser.parse_args(argv)
    results, failures = run(args.out, names=args.only)
    print(f"\ndemo done: {len(results)} datasets built and read back under {args.out}/")
    pages = [line.split("report page ", 1)[1] for lines in results.values() for line in lines if "report page " in line]
    if pages:
        print("open a page per dataset in a browser (self-contained, nothing fetched):")
        print("\n".join(f"  {os.path.abspath(p)}" for p in pages))
    for full, why in failures.items():
        print(f"demo FAILED for {full}: {why}", file=sys.stderr)
    return 1 if failures or not results else 0
