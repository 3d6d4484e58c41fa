"""Random access over ArrayRecord shards vs the sequential `vidvol.load` rate, on the same hmdb51 data."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import measure, report, section, streams

TARGET_OF_SEQUENTIAL = 0.5
BATCH = 32
PIPELINES = ("sequential", "single_index", "batch_reads", "grain_threads", "grain_processes")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomAccessSettings(section.Settings):
    """Sizes of one mode of the section (`runs`: timed rounds, every pipeline once per round)."""

    hmdb51: dict[str, Any]  # inputs.hmdb51_plan arguments (standalone runs)
    config: str = "split1_20x64x64"
    min_seconds: float = 2.0
    batch_size: int = BATCH

METHOD = [
    "Same inputs built twice (TFRecord for vidvol.load, ArrayRecord for the random-access readers), same split (train), "
    "same batch size; every pipeline timed in each round, rounds alternate pipelines so load changes hit all alike.",
    "Sequential: vidvol.load model-ready float32 batches (parse, decode, float conversion, batching, all in tf.data). "
    "Batch reads: 32 uniformly random indices per call to vidvol.data_source's __getitems__ (decoded uint8 examples, "
    "JPEG frames by OpenCV in a thread pool). Grain: vidvol.grain_dataset model-ready float32 batches.",
    "cpu-normalized: examples per CPU-second of this process and its children, times the cores.",
]


def _counting(iterator: Iterator[Any]) -> Callable[[], int]:
    """`next_batch` over an iterator of `(inputs, labels)` batches: the batch's example count."""
    return lambda: len(next(iterator)[1])


def pipelines(name: str, tfrecord_dir: str, array_record_dir: str, batch_size: int, seed: int = 0):
    """{pipeline: factory of a fresh `next_batch`}: each factory opens its pipeline anew (one per round)."""
    import grain
    import tensorflow_datasets as tfds
    import vidvol

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


def build(manual_dir: str, data_dir: str, config: str, file_format: str = "tfrecord") -> None:
    """hmdb51/`config` from `manual_dir` into `data_dir` in this process (multi-threaded Beam), unless prepared."""
    from common import build_job

    build_job.prepare(f"hmdb51/{config}", manual_dir, data_dir, build_job.beam_flags(
        len(os.sched_getaffinity(0)), "multi_threading"), file_format=file_format)


class RandomAccess(section.Hmdb51Section):
    """By-index reads and Grain batches over ArrayRecord shards vs sequential `vidvol.load` (TFRecord)."""

    key = "random_access"
    label = "random access"
    summary = "random-access section (sections/random_access.py: ArrayRecord build, by-index reads, Grain)"
    FULL = RandomAccessSettings(mode="full", runs=3, hmdb51=dict(num_classes=8, videos_per_class=30,
                                                                  num_frames=(60, 300), height=240, width=320))
    QUICK = RandomAccessSettings(mode="quick", runs=1, hmdb51=dict(num_classes=2, videos_per_class=3,
                                                                    num_frames=(20, 40), height=120, width=160),
                                 min_seconds=0.3, batch_size=2)
    method = METHOD

    def measure(self, work: str, settings: RandomAccessSettings, *, manual_dir: str,
                tfrecord_dir: str | None = None) -> dict[str, Any]:
        name = f"hmdb51/{settings.config}"
        # The TFRecord build (built here unless given) and the ArrayRecord build of the same inputs
        dirs = {"tfrecord": tfrecord_dir or os.path.join(work, "data_tfrecord"),
                "array_record": os.path.join(work, "data_array_record")}
        for fmt, data_dir in dirs.items():
            build(manual_dir, data_dir, settings.config, fmt)
        import tensorflow_datasets as tfds

        examples = tfds.builder(name, data_dir=dirs["array_record"]).info.splits["train"].num_examples
        factories = pipelines(name, dirs["tfrecord"], dirs["array_record"], settings.batch_size)
        runs = rounds(factories, settings, "random_access", "examples")
        return {"mode": settings.mode, "dataset": name, "split": "train", "examples": examples,
                "batch_size": settings.batch_size, "rounds": settings.runs, "cores": len(os.sched_getaffinity(0)),
                "results": {p: streams.run_summary(r) for p, r in runs.items()},
                "peak_rss_mib": round(measure.peak_rss_mib(), 1)}  # VmHWM: not run.py's peak, as ru_maxrss would be

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        r = doc["results"]
        seq = r["sequential"]
        for p in PIPELINES:
            r[p]["of_sequential"] = round(r[p]["examples_per_s"] / seq["examples_per_s"], 4)
            r[p]["of_sequential_cpu"] = round(r[p]["cpu_examples_per_s"] / seq["cpu_examples_per_s"], 4)
        doc["notes"] = section.run_notes(doc, r, "the cpu-normalized ratios are steadier")
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        r = doc["results"]
        best = max(("grain_threads", "grain_processes"), key=lambda p: r[p]["of_sequential"])
        return [
            section.target(f"random-access batch reads ({doc['batch_size']} random indices, thread pool) vs sequential "
                           "vidvol.load",
                           r["batch_reads"]["of_sequential"], TARGET_OF_SEQUENTIAL, unit="%",
                           cpu_value=r["batch_reads"]["of_sequential_cpu"],
                           note="decoded uint8 examples by index vs vidvol.load's float32 batches"),
            section.target(f"Grain model-ready batches ({best.replace('_', ' ')}) vs sequential vidvol.load",
                           r[best]["of_sequential"], TARGET_OF_SEQUENTIAL, unit="%",
                           cpu_value=r[best]["of_sequential_cpu"],
                           note="per-example Python work (proto parse, per-frame decode calls, clip gather) that "
                                "vidvol.load does in tf.data's C++ threads, batched"),
        ]

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        s = doc
        out = ["## Random access (ArrayRecord): by index vs sequential", "",
               f"`benchmarks/sections/random_access.py` ({s['mode']} mode, {s['duration_s'] / 60:.1f} min): `{s['dataset']}` "
               f"{s['split']} ({s['examples']} examples), batches of {s['batch_size']}, {s['rounds']} round(s) on "
               f"{s['cores']} cores.", ""]
        out += report.targets_table(s["targets"])
        labels = {"sequential": "vidvol.load (TFRecord, sequential)", "single_index": "ds[i], one random index",
                  "batch_reads": f"ds.__getitems__({s['batch_size']} random indices)",
                  "grain_threads": "Grain, 4 threads", "grain_processes": "Grain, mp_prefetch 2 workers"}
        out += report.table(
            ["pipeline", "examples/s", "rounds", "of sequential", "cpu examples/s", "cores busy (others)"],
            [[labels[p], report.rate(r["examples_per_s"]), ", ".join(report.rate(x) for x in r["examples_per_s_runs"]),
              f"{100 * r['of_sequential']:.0f}%", report.rate(r["cpu_examples_per_s"]),
              f"{r['cores_used']:.2f} ({r['other_cores_busy']:.2f})"] for p, r in s["results"].items()])
        out += [f"- {line}" for line in s.get("notes", []) + s.get("method", [])] + [""]
        return out

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rounds", dest="runs", type=int, default=None, help="override the timed rounds")


def rounds(factories: dict[str, Callable[[], Callable[[], int]]], settings: Any, tag: str,
           unit: str) -> dict[str, list[dict[str, float]]]:
    """Examples/s of every pipeline's repeated `next_batch()` calls (each returns its example count, after 2 warm-up
    calls), each pipeline once per round (`settings.runs` rounds): load changes hit all alike."""
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in factories}
    for _ in range(settings.runs):
        for pipeline, factory in factories.items():
            next_batch = factory()
            last = streams.stream_rate(lambda f=next_batch: iter(f, None), count=int, min_seconds=settings.min_seconds,
                                       warmup_batches=2, cores=len(os.sched_getaffinity(0)),
                                       cpu_seconds=streams.tree_cpu_seconds)
            runs[pipeline].append(last)
            print(f"[{tag}] {pipeline}: {last['examples_per_s']:.0f} {unit}/s ({last['cores_used']:.2f} cores, "
                  f"others {last['other_cores_busy']:.2f})", flush=True)
    return runs


SECTION = RandomAccess()

if __name__ == "__main__":
    sys.exit(SECTION.main())
