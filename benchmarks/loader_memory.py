"""Peak memory (RSS) of `vidvol.load` streaming fire_hrr's full-resolution config (161x540x960) in batches of 2.

One float32 video is 161 * 540 * 960 * 3 * 4 bytes = 1.0 GB, so a batch of two is 2.0 GB (the
users' own estimate: ~1.8 GB). The script writes sample frames (vidvol.samples), builds the config
with the real `tfds build` CLI in a subprocess (so this process never holds build memory), then
streams `--batches` batches the way `model.fit` does (one batch alive at a time) while a thread
samples this process's RSS; it reports the RSS before streaming, the peak, the RSS between
batches, and the peak in units of one float32 batch. TensorFlow's oneDNN build keeps freed CPU
memory in its own allocator, so RSS stays near its high-water mark; run with
TF_ENABLE_ONEDNN_OPTS=0 to see the memory released between batches.

    python benchmarks/loader_memory.py [--data_dir DIR] [--batches 6] [--training]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time

import psutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

import vidvol  # noqa: E402,F401  (registers the datasets)
from vidvol import samples  # noqa: E402
from vidvol import readers  # noqa: E402

from cluster_driver import peak_rss_mib  # noqa: E402

logger = logging.getLogger(__name__)

GIB = 2**30
MIB = 2**20
DATASET = "fire_hrr/full_161x540x960"


def prepare(data_dir: str, manual_dir: str, experiments: int) -> tfds.core.DatasetBuilder:
    """Writes 161-frame 540x960 sample experiments and builds DATASET with the tfds CLI (once)."""
    builder = tfds.builder(DATASET, data_dir=data_dir)
    if builder.is_prepared():
        return builder
    if not os.path.exists(os.path.join(manual_dir, "labels.csv")):
        samples.write_fire_hrr_frames(
            manual_dir, experiments=tuple((f"exp_{i}", 161) for i in range(experiments)), height=540, width=960
        )
    cmd = [
        sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", DATASET, "--imports", "vidvol",
        "--manual_dir", manual_dir, "--data_dir", data_dir,
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return tfds.builder(DATASET, data_dir=data_dir)


class RssSampler(threading.Thread):
    """Samples this process's RSS every `period_s` and keeps the maximum."""

    def __init__(self, period_s: float = 0.005):
        super().__init__(daemon=True)
        self.period_s = period_s
        self.peak = 0
        self._stop_event = threading.Event()
        self._process = psutil.Process()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            time.sleep(self.period_s)

    def stop(self) -> int:
        """Stops sampling; returns the peak RSS in bytes."""
        self._stop_event.set()
        self.join()
        return self.peak


def measure(builder: tfds.core.DatasetBuilder, batches: int, batch_size: int, training: bool) -> dict:
    """Streams `batches` batches (repeating the split as needed) and returns RSS figures in GiB."""
    ds = readers.load(builder, "train", batch_size, training=training, drop_remainder=True, repeat=True, seed=0)
    (video, _), _ = ds.element_spec
    batch_bytes = video.shape.num_elements() * 4
    before = psutil.Process().memory_info().rss
    sampler = RssSampler()
    sampler.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    between: list[int] = []  # RSS after each batch was dropped
    iterator = iter(ds)
    for _ in range(batches):
        batch = next(iterator)
        del batch  # like a training step: the batch dies before the next one is fetched
        between.append(psutil.Process().memory_info().rss)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    peak = sampler.stop()
    return {
        "dataset": DATASET, "batch_size": batch_size, "batches": batches, "training": training,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "video_batch_shape": video.shape.as_list(), "float_batch_gib": batch_bytes / GIB,
        "rss_before_gib": before / GIB, "rss_peak_gib": peak / GIB,
        "rss_between_batches_gib": {"first": between[0] / GIB, "max": max(between) / GIB, "last": between[-1] / GIB},
        "hwm_rss_gib": peak_rss_mib() * MIB / GIB,  # cross-check: VmHWM (ru_maxrss would carry the parent's peak)
        "peak_over_float_batch": peak / batch_bytes, "seconds_per_batch": elapsed / max(1, batches),
        "cpu_seconds_per_batch": cpu / max(1, batches),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: prints the RSS figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default="/tmp/vidvol_loader_memory/data")
    parser.add_argument("--manual_dir", default="/tmp/vidvol_loader_memory/manual")
    parser.add_argument("--experiments", type=int, default=3)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--training", action="store_true", help="shuffle and use training mode")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    builder = prepare(args.data_dir, args.manual_dir, args.experiments)
    print(json.dumps(measure(builder, args.batches, args.batch_size, args.training), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
