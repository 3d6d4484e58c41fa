"""Random access over ArrayRecord shards vs the sequential `vidvol.load` rate, on the same hmdb51 data.

    python benchmarks/random_access.py --out DIR            # full: run.py's hmdb51 inputs (240 clips), 3 rounds
    python benchmarks/random_access.py --quick --out DIR    # tiny inputs, one round (smoke)

`make bench` runs it as the "random_access" section of `run.py` (on the hmdb51 inputs and TFRecord
build run.py already made); standalone it writes its own inputs (`inputs.hmdb51_plan`, reused when
`--inputs` points at a benchmark run's inputs folder) and DIR/random_access.json + RANDOM_ACCESS.md.

The default config (`split1_20x64x64`) is built from the same inputs twice, TFRecord and ArrayRecord
(`file_format="array_record"`). Then, in this process, `rounds` rounds each time these pipelines
over the train split, one after the other, so a machine that gets busier hits them all alike:

- sequential: `vidvol.load(..., batch_size=32, repeat=True)` model-ready float batches (TFRecord);
- `ds[i]`: `vidvol.data_source` one random index at a time (a decoded example, uint8 frames);
- batch reads: `ds.__getitems__(32 random indices)`: records read together, decoded in its thread pool;
- Grain: `vidvol.grain_dataset(..., 32)` model-ready `((x, mask), y)` float batches, shuffled,
  through `to_iter_dataset(ReadOptions(num_threads=4))`, and the same with `mp_prefetch` on 2
  worker processes.

Rates are examples/s over at least `min_seconds` after warm-up (medians of the rounds); the
cpu-normalized rate is examples per CPU-second of this process (children too, for Grain's
workers) times the cores. Targets: batch reads and the better Grain pipeline each >= 50% of the
sequential rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import resource
import statistics
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np

TARGET_OF_SEQUENTIAL = 0.5
BATCH = 32
PIPELINES = ("sequential", "single_index", "batch_reads", "grain_threads", "grain_processes")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one mode of the section."""

    mode: str
    hmdb51: dict[str, Any]  # inputs.hmdb51_plan arguments (standalone runs)
    config: str = "split1_20x64x64"
    rounds: int = 3
    min_seconds: float = 2.0
    batch_size: int = BATCH


FULL = Settings(mode="full", hmdb51=dict(num_classes=8, videos_per_class=30, num_frames=(60, 300), height=240, width=320))
QUICK = Settings(mode="quick", hmdb51=dict(num_classes=2, videos_per_class=3, num_frames=(20, 40), height=120, width=160),
                 rounds=1, min_seconds=0.3, batch_size=2)

METHOD = [
    "Same inputs built twice (TFRecord for vidvol.load, ArrayRecord for the random-access readers), same split (train), "
    "same batch size; every pipeline timed in each round, rounds alternate pipelines so load changes hit all alike.",
    "Sequential: vidvol.load model-ready float32 batches (parse, decode, float conversion, batching, all in tf.data). "
    "Batch reads: 32 uniformly random indices per call to vidvol.data_source's __getitems__ (decoded uint8 examples, "
    "JPEG frames by OpenCV in a thread pool). Grain: vidvol.grain_dataset model-ready float32 batches.",
    "cpu-normalized: examples per CPU-second of this process and its children, times the cores.",
]


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished or running children (Grain's worker processes)."""
    import psutil  # pylint: disable=g-import-not-at-top

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def timed(next_batch: Callable[[], int], *, min_seconds: float, warmup: int = 2) -> dict[str, float]:
    """Examples/s of repeated `next_batch()` calls (each returns its example count), after `warmup` calls."""
    from reads import busy_cpu_seconds  # pylint: disable=g-import-not-at-top

    for _ in range(warmup):
        next_batch()
    examples = 0
    busy0, cpu0, start = busy_cpu_seconds(), _cpu_seconds(), time.perf_counter()
    while True:
        examples += next_batch()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            cpu = max(_cpu_seconds() - cpu0, 1e-9)
            cores = len(os.sched_getaffinity(0))
            return {"examples_per_s": examples / elapsed, "cpu_examples_per_s": cores * examples / cpu,
                    "cores_used": cpu / elapsed,
                    "other_cores_busy": max(0.0, busy_cpu_seconds() - busy0 - cpu) / elapsed, "examples": examples}


def _counting(iterator: Iterator[Any]) -> Callable[[], int]:
    """`next_batch` over an iterator of `(inputs, labels)` batches: the batch's example count."""
    return lambda: len(next(iterator)[1])


def pipelines(name: str, tfrecord_dir: str, array_record_dir: str, batch_size: int, seed: int = 0):
    """{pipeline: factory of a fresh `next_batch`}: each factory opens its pipeline anew (one per round)."""
    import grain  # pylint: disable=g-import-not-at-top
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    import vidvol  # pylint: disable=g-import-not-at-top

    def sequential():
        return _counting(iter(tfds.as_numpy(vidvol.load(name, "train", batch_size, data_dir=tfrecord_dir, repeat=True))))

    def single_index():
        ds, rng = vidvol.data_source(name, "train", data_dir=array_record_dir), np.random.default_rng(seed)
        return lambda: (ds[int(rng.integers(len(ds)))], 1)[1]

    def batch_reads():
        ds, rng = vidvol.data_source(name, "train", data_dir=array_record_dir), np.random.default_rng(seed)
        return lambda: len(ds.__getitems__(rng.integers(0, len(ds), batch_size).tolist()))

    def grain_ds():
        return vidvol.grain_dataset(name, "train", batch_size, data_dir=array_record_dir, seed=seed, num_epochs=None)

    def grain_threads():
        return _counting(iter(grain_ds().to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8))))

    def grain_processes():
        ds = grain_ds().to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
        return _counting(iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))))

    return {"sequential": sequential, "single_index": single_index, "batch_reads": batch_reads,
            "grain_threads": grain_threads, "grain_processes": grain_processes}


def build_both(manual_dir: str, tfrecord_dir: str | None, work: str, config: str) -> dict[str, str]:
    """Data dirs of the TFRecord build (built here unless given) and the ArrayRecord build of the same inputs."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=g-import-not-at-top

    import vidvol  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import

    dirs = {"tfrecord": tfrecord_dir or os.path.join(work, "data_tfrecord"),
            "array_record": os.path.join(work, "data_array_record")}
    workers = len(os.sched_getaffinity(0))
    options = PipelineOptions([f"--direct_num_workers={workers}", "--direct_running_mode=multi_threading"])
    for fmt, data_dir in dirs.items():
        builder = tfds.builder(f"hmdb51/{config}", data_dir=data_dir, file_format=fmt)
        if not builder.is_prepared():
            builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
                manual_dir=manual_dir, beam_options=options))
    return dirs


def measure_section(work: str, settings: Settings, *, manual_dir: str, tfrecord_dir: str | None = None) -> dict[str, Any]:
    """Builds what is missing, times every pipeline `rounds` times (alternating); returns the section."""
    t0 = time.monotonic()
    os.makedirs(work, exist_ok=True)
    name = f"hmdb51/{settings.config}"
    dirs = build_both(manual_dir, tfrecord_dir, work, settings.config)
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    examples = tfds.builder(name, data_dir=dirs["array_record"]).info.splits["train"].num_examples
    factories = pipelines(name, dirs["tfrecord"], dirs["array_record"], settings.batch_size)
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in PIPELINES}
    for _ in range(settings.rounds):
        for pipeline in PIPELINES:
            runs[pipeline].append(timed(factories[pipeline](), min_seconds=settings.min_seconds))
            print(f"[random_access] {pipeline}: {runs[pipeline][-1]['examples_per_s']:.0f} examples/s "
                  f"({runs[pipeline][-1]['cores_used']:.2f} cores, others {runs[pipeline][-1]['other_cores_busy']:.2f})",
                  flush=True)
    section = {"mode": settings.mode, "dataset": name, "split": "train", "examples": examples,
               "batch_size": settings.batch_size, "rounds": settings.rounds, "cores": len(os.sched_getaffinity(0)),
               "results": {p: summarize(r) for p, r in runs.items()},
               "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               "duration_s": round(time.monotonic() - t0, 1), "method": METHOD}
    return resummarize(section)


def summarize(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Medians of one pipeline's rounds, with every round's rate."""
    return {"examples_per_s": round(statistics.median(r["examples_per_s"] for r in runs), 2),
            "examples_per_s_runs": [round(r["examples_per_s"], 2) for r in runs],
            "cpu_examples_per_s": round(statistics.median(r["cpu_examples_per_s"] for r in runs), 2),
            "cores_used": round(statistics.median(r["cores_used"] for r in runs), 2),
            "other_cores_busy": round(statistics.median(r["other_cores_busy"] for r in runs), 2)}


def resummarize(section: dict[str, Any]) -> dict[str, Any]:
    """Ratios to the sequential rate, targets and notes from the section's results."""
    import report  # pylint: disable=g-import-not-at-top

    r = section["results"]
    seq = r["sequential"]
    for p in PIPELINES:
        r[p]["of_sequential"] = round(r[p]["examples_per_s"] / seq["examples_per_s"], 4)
        r[p]["of_sequential_cpu"] = round(r[p]["cpu_examples_per_s"] / seq["cpu_examples_per_s"], 4)
    best = max(("grain_threads", "grain_processes"), key=lambda p: r[p]["of_sequential"])
    section["targets"] = [
        report.target(f"random-access batch reads ({section['batch_size']} random indices, thread pool) vs sequential "
                      "vidvol.load",
                      r["batch_reads"]["of_sequential"], TARGET_OF_SEQUENTIAL, unit="%",
                      cpu_value=r["batch_reads"]["of_sequential_cpu"],
                      note="decoded uint8 examples by index vs vidvol.load's float32 batches"),
        report.target(f"Grain model-ready batches ({best.replace('_', ' ')}) vs sequential vidvol.load",
                      r[best]["of_sequential"], TARGET_OF_SEQUENTIAL, unit="%", cpu_value=r[best]["of_sequential_cpu"],
                      note="per-example Python work (proto parse, per-frame decode calls, clip gather) that "
                           "vidvol.load does in tf.data's C++ threads, batched"),
    ]
    others = max(x["other_cores_busy"] for x in r.values())
    section["notes"] = [
        f"Other processes kept up to {others:.2f} of the {section['cores']} cores busy during the timed windows"
        + (": the wall-clock rates are understated and noisy; the cpu-normalized ratios are steadier." if others > 0.25
           else " (effectively a quiet machine).")]
    if section["mode"] == "quick":
        section["notes"].append("Quick mode: tiny inputs and batches, one round; it checks the plumbing, not speed.")
    return section


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: inputs (reused), both builds, the timed rounds, random_access.json + RANDOM_ACCESS.md."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="work folder (inputs, datasets, random_access.json, RANDOM_ACCESS.md)")
    parser.add_argument("--quick", action="store_true", help="tiny inputs, one round")
    parser.add_argument("--inputs", default=None, help="folder holding (or to hold) hmdb51/ inputs (default OUT/inputs)")
    parser.add_argument("--rounds", type=int, default=None, help="override the timed rounds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = QUICK if args.quick else FULL
    if args.rounds:
        settings = dataclasses.replace(settings, rounds=args.rounds)
    out = os.path.abspath(args.out)
    import inputs  # pylint: disable=g-import-not-at-top
    import report  # pylint: disable=g-import-not-at-top

    root = os.path.join(os.path.abspath(args.inputs or os.path.join(out, "inputs" if not args.quick else "inputs_quick")),
                        "hmdb51")
    inputs.write_inputs([inputs.hmdb51_plan(root, **settings.hmdb51)], workers=len(os.sched_getaffinity(0)))
    section = measure_section(os.path.join(out, "random_access"), settings, manual_dir=root)
    bad = report.finite_numbers(section)
    if bad:
        raise ValueError(f"non-finite numbers in the results: {bad[:10]}")
    report.write_json(section, os.path.join(out, "random_access.json"))
    with open(os.path.join(out, "RANDOM_ACCESS.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(report.random_access_section(section)))
    print(f"[random_access] wrote {out}/random_access.json and RANDOM_ACCESS.md", flush=True)
    for t in section["targets"]:
        print(f"[random_access] {'PASS' if t['pass'] else 'MISS'} {t['name']}: {t['value']:.3g} "
              f"(target {t['op']} {t['target']:g})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
