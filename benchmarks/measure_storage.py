"""Measures how mri_volumes' `volume` and `mask` encodings trade bytes for read-time decode speed.

Writes anatomy-like int16 NIfTI volumes (`vidvol.samples.write_mri_volumes`), runs each through the
real example stage (`vidvol.builders.transforms.volume_examples`) to a fixed grid, serializes it with TFDS's
own FeaturesDict/ExampleSerializer under each candidate encoding, and times the read path
`tfds.load` runs (TFRecordDataset -> FeaturesDict.deserialize_example, parallel map) on warm files.
The baseline is the pipeline users have today: `tf.py_function(nib.load(path).get_fdata())`.

    python benchmarks/measure_storage.py --num 16 --size 128 --out /tmp/mri_storage

A repository tool (not installed with vidvol); its numbers are in benchmarks/RESULTS.md ("MRI encodings").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable

import nibabel as nib
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer

from vidvol import samples
from vidvol.builders.transforms import volume_examples

ENCODINGS = ("none", "bytes", "zlib")


def _features(size: int, volume_encoding: str | None, mask_encoding: str | None, mask_dtype=np.uint8):
    """A FeaturesDict holding the volume and/or the mask under the given encodings."""
    shape = (size, size, size)
    spec = {}
    if volume_encoding:
        spec["volume"] = tfds.features.Tensor(shape=shape, dtype=np.float32, encoding=volume_encoding)
    if mask_encoding:
        spec["mask"] = tfds.features.Tensor(shape=shape, dtype=mask_dtype, encoding=mask_encoding)
    return tfds.features.FeaturesDict(spec)


def _variants(size: int) -> dict[str, tfds.features.FeaturesDict]:
    """Every single-feature encoding, plus whole (volume, mask) candidates."""
    out = {}
    for enc in ENCODINGS:
        out[f"volume float32 {enc}"] = _features(size, enc, None)
    for enc in ENCODINGS:
        out[f"mask uint8 {enc}"] = _features(size, None, enc)
        out[f"mask bool {enc}"] = _features(size, None, enc, mask_dtype=np.bool_)
    out["volume none + mask none (TFDS default)"] = _features(size, "none", "none")
    out["volume bytes + mask bytes"] = _features(size, "bytes", "bytes")
    out["volume none + mask bytes"] = _features(size, "none", "bytes")
    out["volume bytes + mask zlib"] = _features(size, "bytes", "zlib")
    out["volume zlib + mask zlib"] = _features(size, "zlib", "zlib")
    return out


def _pass_rate(make_ds: Callable[[], tf.data.Dataset], num: int) -> tuple[float, float]:
    """One full pass: decoded examples per wall second, and CPU milliseconds (all threads) per example."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in make_ds():
        pass
    return num / (time.perf_counter() - wall), 1000.0 * (time.process_time() - cpu) / num


def _tfrecord_ds(path: str, features: tfds.features.FeaturesDict) -> tf.data.Dataset:
    """The decode tfds.load runs on one file: parse + decode every feature, parallel map."""
    return tf.data.TFRecordDataset([path], buffer_size=16 << 20).map(
        features.deserialize_example, num_parallel_calls=tf.data.AUTOTUNE
    ).prefetch(2)


def _load_fdata(path: tf.Tensor) -> np.ndarray:
    """Baseline loader: nibabel get_fdata (float64) cast to float32."""
    return nib.load(path.numpy().decode()).get_fdata().astype(np.float32)


def _baseline_ds(paths: list[str]) -> tf.data.Dataset:
    """Users' current pipeline: a py_function around nib.load(path).get_fdata()."""
    return tf.data.Dataset.from_tensor_slices(paths).map(
        lambda p: tf.py_function(_load_fdata, [p], tf.float32), num_parallel_calls=tf.data.AUTOTUNE
    ).prefetch(2)


def measure(out_dir: str, *, num: int, size: int, source_shape: tuple[int, int, int], repeats: int) -> dict:
    """Writes the inputs and every variant's TFRecord file, then times the reads; returns the numbers."""
    os.makedirs(out_dir, exist_ok=True)
    written = samples.write_mri_volumes(
        os.path.join(out_dir, "nifti"), num_subjects=num, shape=source_shape, spacing=(1.0, 1.0, 1.2), seed=7
    )
    paths = [os.path.join(out_dir, "nifti", *row["path"].split("/")) for row in written["rows"]]
    variants = _variants(size)
    serializers = {name: example_serializer.ExampleSerializer(f.get_serialized_info()) for name, f in variants.items()}
    sizes: dict[str, list[int]] = {name: [] for name in variants}
    writers = {name: tf.io.TFRecordWriter(os.path.join(out_dir, f"v{i}.tfrecord")) for i, name in enumerate(variants)}
    spec = volume_examples.VolumeSpec(spatial_size=(size, size, size))
    for path in paths:  # one volume decoded at a time
        source = volume_examples.VolumeSource(path=path, key=os.path.basename(path), features={})
        items = list(volume_examples.volume_example(source, spec))
        _, example = items[-1]
        for name, features in variants.items():
            values = {k: example[k] for k in features.keys()}
            if "mask" in values and features["mask"].np_dtype == np.bool_:
                values["mask"] = values["mask"].astype(bool)
            record = serializers[name].serialize_example(features.encode_example(values))
            writers[name].write(record)
            sizes[name].append(len(record))
        del example, items
    for w in writers.values():
        w.close()
    readers = {
        name: functools.partial(_tfrecord_ds, os.path.join(out_dir, f"v{i}.tfrecord"), features)
        for i, (name, features) in enumerate(variants.items())
    }
    baseline = "baseline py_function(nib.load(.nii.gz).get_fdata())"
    readers[baseline] = functools.partial(_baseline_ds, paths)
    for make_ds in readers.values():  # warm-up: files into the page cache, graphs traced
        _pass_rate(make_ds, num)
    # Rounds interleave the variants and keep each one's best pass, so load from other processes
    # on a shared machine skews all variants alike and least; CPU time per example is the
    # decode cost itself and barely moves with such load.
    best = {name: 0.0 for name in readers}
    cpu = {name: float("inf") for name in readers}
    for _ in range(repeats):
        for name, make_ds in readers.items():
            rate, cpu_ms = _pass_rate(make_ds, num)
            best[name], cpu[name] = max(best[name], rate), min(cpu[name], cpu_ms)
    file_bytes = {name: int(np.mean(sizes[name])) for name in variants}
    file_bytes[baseline] = int(np.mean([os.path.getsize(p) for p in paths]))
    results = {
        name: {"bytes_per_example": file_bytes[name], "examples_per_s": round(best[name], 1), "cpu_ms_per_example": round(cpu[name], 2)}
        for name in readers
    }
    base = best[baseline]
    for r in results.values():
        r["x_baseline"] = round(r["examples_per_s"] / base, 1)
    return {
        "num_examples": num, "spatial_size": size, "source_shape": list(source_shape),
        "cpus": len(os.sched_getaffinity(0)), "results": results,
    }


def main() -> None:
    """CLI: prints a table and writes storage.json into --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--num", type=int, default=16)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--source_shape", type=int, nargs=3, default=(144, 168, 128))
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds; the best pass counts")
    args = parser.parse_args()
    report = measure(args.out, num=args.num, size=args.size, source_shape=tuple(args.source_shape), repeats=args.repeats)
    with open(os.path.join(args.out, "storage.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(f"{report['num_examples']} volumes {args.size}^3 from {report['source_shape']} int16 .nii.gz, {report['cpus']} CPUs")
    print(f"{'variant':<55} {'bytes/example':>14} {'examples/s':>11} {'x baseline':>10} {'CPU ms/example':>15}")
    for name, r in report["results"].items():
        print(f"{name:<55} {r['bytes_per_example']:>14,} {r['examples_per_s']:>11} {r['x_baseline']:>10} {r['cpu_ms_per_example']:>15}")


if __name__ == "__main__":
    main()
