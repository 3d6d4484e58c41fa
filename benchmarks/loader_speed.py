"""Quick read-speed check of `vidvol.load` on hmdb51's default config (20x64x64 JPEG).

Compares, in alternating rounds (so a busy machine hurts all of them alike):

- `limit`: libjpeg (`cv2.imdecode`, one thread) on the SAME stored JPEG bytes, clips/s x cores;
- `vidvol.load`: our loader, training mode (shuffled, float32 model-ready batches);
- `tfds.load`: stock `tfds.load(..., as_supervised=True).batch().prefetch()` (uint8, no float step;
  TFDS's in-memory autocache of small splits off unless --tfds_autocache, so every epoch reads files);
- `opencv`: the read-time pipeline users run today (`cv2.VideoCapture` + seek per frame, resize,
  /255, in a parallel `tf.py_function` map) over the source videos.

Each rate is reported twice: wall clips/s, and clips per CPU-second x cores ("cpu-normalized",
what the pipeline would reach with the cores to itself; robust when other jobs share the machine).

    python benchmarks/loader_speed.py [--data_dir DIR] [--classes 10] [--videos_per_class 60]

Sample inputs are generated (vidvol.samples) and built once into --data_dir (multi-process Beam).
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import statistics
import sys
from typing import Any, Callable


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import vidvol  # noqa: E402,F401  (registers the datasets)
from vidvol import readers  # noqa: E402
from vidvol import samples  # noqa: E402

import baselines  # noqa: E402
import reads  # noqa: E402

logger = logging.getLogger(__name__)

CONFIG = "split1_20x64x64"
NUM_FRAMES = baselines.HMDB51_NUM_FRAMES


def prepare(data_dir: str, manual_dir: str, classes: int, videos_per_class: int) -> tfds.core.DatasetBuilder:
    """Writes sample videos and builds hmdb51/CONFIG once (reused when already prepared)."""
    builder = tfds.builder(f"hmdb51/{CONFIG}", data_dir=data_dir)
    if builder.is_prepared():
        return builder
    if not os.path.isdir(os.path.join(manual_dir, samples.HMDB51_ORG_DIR)):
        samples.write_hmdb51_layout(
            manual_dir, classes=samples.HMDB51_CLASSES[:classes], videos_per_class=videos_per_class,
            num_frames=(40, 100), height=240, width=320, splits=(1,), content="footage",
        )
    workers = len(os.sched_getaffinity(0))  # local multi-process Beam, one SDK worker per core
    options = PipelineOptions([f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"])
    config = tfds.download.DownloadConfig(manual_dir=manual_dir, beam_options=options)
    builder.download_and_prepare(download_config=config)
    return builder


def source_videos(manual_dir: str) -> list[str]:
    """The sample AVIs (inputs of the read-time OpenCV pipeline)."""
    return sorted(glob.glob(os.path.join(manual_dir, samples.HMDB51_ORG_DIR, "*", "*.avi")))


def limit_rate(frames: list[bytes], cores: int, min_seconds: float) -> dict[str, float]:
    """libjpeg clips/s of the stored frames on `cores` threads at once (`baselines.on_every_core`, as `make bench`)."""
    rate = baselines.on_every_core(baselines.decode_rate, frames, cores, min_seconds=min_seconds)
    return {"wall": cores * rate["frames_per_s"] / NUM_FRAMES, "cpu": cores * rate["cpu_frames_per_s"] / NUM_FRAMES}


def clip_rate(make: Callable[[], tf.data.Dataset], cores: int, min_seconds: float, warmup: int = 3) -> dict[str, float]:
    """Clips/s (wall, and per CPU-second x cores) of a fresh iterator over `make().repeat()` (`reads.stream_rate`)."""
    rate = reads.stream_rate(lambda: make().repeat(), min_seconds=min_seconds, warmup_batches=warmup, cores=cores)
    return {"wall": rate["examples_per_s"], "cpu": rate["cpu_examples_per_s"]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Builds (once) and times every pipeline in alternating rounds; returns medians and ratios."""
    builder = prepare(args.data_dir, args.manual_dir, args.classes, args.videos_per_class)
    cores = args.cores or len(os.sched_getaffinity(0))
    files = [os.fspath(f.filename) for f in builder.info.splits["train"].file_instructions]
    frames = baselines.stored_jpeg_frames(files)
    videos = source_videos(args.manual_dir)[: args.opencv_videos]
    pipelines: dict[str, Callable[[], dict[str, float]]] = {
        "limit": lambda: limit_rate(frames, cores, args.seconds),
        "vidvol.load": lambda: clip_rate(
            lambda: readers.load(builder, "train", args.batch_size, seed=None, tuning=readers.Tuning(**args.loader_kwargs)),
            cores, args.seconds
        ),
        "tfds.load": lambda: clip_rate(
            lambda: tfds.load(
                f"hmdb51/{CONFIG}", split="train", data_dir=args.data_dir, as_supervised=True,
                read_config=tfds.ReadConfig(try_autocache=args.tfds_autocache),
            )
            .batch(args.batch_size)
            .prefetch(tf.data.AUTOTUNE),
            cores, args.seconds,
        ),
    }
    if args.opencv_videos:
        seek = lambda: baselines.hmdb51_seek_dataset(videos, [0] * len(videos), batch_size=args.batch_size)
        pipelines["opencv"] = lambda: clip_rate(seek, cores, args.seconds, 1)
    results: dict[str, list[dict[str, float]]] = {k: [] for k in pipelines}
    for r in range(args.rounds):
        for key, fn in pipelines.items():
            results[key].append(fn())
            logger.info("round %d %s: %s", r, key, results[key][-1])
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall", "cpu")} for k, v in results.items()}
    ratios = {}
    for m in ("wall", "cpu"):
        ratios[f"loader/limit ({m})"] = med["vidvol.load"][m] / med["limit"][m]
        ratios[f"tfds/limit ({m})"] = med["tfds.load"][m] / med["limit"][m]
        if "opencv" in med:
            ratios[f"loader/opencv ({m})"] = med["vidvol.load"][m] / med["opencv"][m]
    return {
        "dataset": f"hmdb51/{CONFIG}", "train_examples": builder.info.splits["train"].num_examples,
        "shards": builder.info.splits["train"].num_shards, "cores": cores, "batch_size": args.batch_size,
        "rounds": args.rounds, "clips_per_s": med, "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: prints a small table (and the JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default="/tmp/vidvol_loader_speed/data")
    parser.add_argument("--manual_dir", default="/tmp/vidvol_loader_speed/manual")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--videos_per_class", type=int, default=60)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per pipeline per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=0, help="cores for the limit (default: this process's)")
    parser.add_argument("--opencv_videos", type=int, default=64, help="source videos for the OpenCV baseline (0: skip)")
    parser.add_argument("--loader", default="{}", help="vidvol.Tuning fields as JSON, e.g. '{\"cycle_length\": 2}'")
    parser.add_argument("--tfds_autocache", action="store_true",
                        help="let tfds.load cache a small split in memory after the first epoch (off: read the files)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.loader_kwargs = json.loads(args.loader)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("absl", "apache_beam", "tensorflow", "vidvol.readers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=1))
    print(f"{result['dataset']}: {result['train_examples']} train clips in {result['shards']} shards, "
          f"{result['cores']} cores, batch {result['batch_size']}, median of {result['rounds']} rounds")
    print(f"{'pipeline':<12} {'wall clips/s':>13} {'cpu-normalized':>15}")
    for key, value in result["clips_per_s"].items():
        print(f"{key:<12} {value['wall']:>13.0f} {value['cpu']:>15.0f}")
    for key, value in result["ratios"].items():
        print(f"{key:<24} {value:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
