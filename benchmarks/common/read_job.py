"""Read throughput and peak memory of one pipeline over one prepared dataset (ours or a baseline)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import baselines, jobs, measure, streams

logger = logging.getLogger(__name__)

MIB = 2**20
PIPELINES = ("loader", "tfds_load", "hmdb51_seek", "fire_get_img", "mri_get_fdata")


@dataclasses.dataclass
class ReadJob:
    """One pipeline to time: what it reads and how long to stream it."""

    pipeline: str
    name: str  # dataset name (loader) or a label for a baseline
    batch_size: int
    config: str = ""
    split: str = "train"
    data_dir: str = ""
    paths: list[str] = dataclasses.field(default_factory=list)  # baseline inputs
    labels: list[float] = dataclasses.field(default_factory=list)
    shape: list[int] = dataclasses.field(default_factory=list)  # baseline output shape (frame or volume)
    window: int = 1  # frames per example of the fire baseline
    frames_per_example: int = 1  # for frames/s
    runs: int = 3
    min_seconds: float = 2.0
    warmup_batches: int = 2
    limit_files: list[str] = dataclasses.field(default_factory=list)  # shards whose stored JPEG frames set the limit
    limit_max_frames: int = 2000
    output_dtype: str = "float32"  # vidvol.load(output_dtype=...)
    mask_dtype: str | None = "float32"  # vidvol.load(mask_dtype=...); None leaves the mask out
    volume_limit_files: list[str] = dataclasses.field(default_factory=list)  # shards whose stored volumes set the limit
    seed: int | None = None  # loader: vidvol.load(seed=...)
    augment: dict[str, Any] | None = None  # loader: ReadSpec(augment=vidvol.VolumeAugment(**augment))
    float_ceiling: bool = False  # JPEG jobs: also pair each run with the float32 ceiling (`baselines.decode_rate` with `ring_frames`)

    def __post_init__(self):
        if self.pipeline not in PIPELINES:
            raise ValueError(f"pipeline must be one of {PIPELINES}, got {self.pipeline!r}")


def make_dataset(job: ReadJob) -> tf.data.Dataset:
    """The tf.data pipeline a job names, repeating forever (epochs flow into each other, as in training)."""
    if job.pipeline == "loader":  # our loader's model-ready batches
        from vidvol import readers  # registers the datasets too

        spec = readers.ReadSpec(output=readers.Output(dtype=job.output_dtype, mask_dtype=job.mask_dtype),
                                augment=readers.VolumeAugment(**job.augment) if job.augment else None)
        return readers.load(f"{job.name}/{job.config}", split=job.split, batch_size=job.batch_size,
                            data_dir=job.data_dir, repeat=True, seed=job.seed, spec=spec)
    if job.pipeline == "tfds_load":  # plain `tfds.load` as a notebook user writes it: cast to float32 / 255, batched
        import tensorflow_datasets as tfds
        import vidvol  # noqa: F401  (registers the datasets)

        ds = tfds.load(f"{job.name}/{job.config}", split=job.split, data_dir=job.data_dir, shuffle_files=True,
                       download=False, read_config=tfds.ReadConfig(try_autocache=False))
        ds = ds.repeat().map(lambda ex: (tf.cast(ex["video"], tf.float32) / 255.0, ex["label"]),
                             num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(job.batch_size).prefetch(tf.data.AUTOTUNE)
    labels = [int(v) for v in job.labels] if job.pipeline != "fire_get_img" else job.labels
    if job.pipeline == "hmdb51_seek":
        return baselines.hmdb51_seek_dataset(job.paths, labels, batch_size=job.batch_size, repeat=True)
    if job.pipeline == "fire_get_img":
        height, width = job.shape[:2]
        return baselines.fire_get_img_dataset(job.paths, labels, window=job.window, height=height, width=width,
                                              batch_size=job.batch_size, repeat=True)
    return baselines.mri_get_fdata_dataset(job.paths, labels, shape=job.shape, batch_size=job.batch_size, repeat=True)


def measure_read(job: ReadJob, *, interval: float = 0.1) -> dict[str, Any]:
    """Streams the job's pipeline `runs` times; returns per-run rates and peak RSS while streaming."""
    cores = len(os.sched_getaffinity(0))
    rss_before = measure.rss_mib() * MIB
    with measure.TreeSampler(os.getpid(), interval) as monitor:
        frames = baselines.stored_jpeg_frames(job.limit_files, max_frames=job.limit_max_frames) if job.limit_files else None
        if job.volume_limit_files:  # MRI: stored int16 bytes -> float32 volume, NumPy (one "frame" = a volume)
            frames = baselines.stored_volume_spans(job.volume_limit_files)
        runs, limits = [], []
        rate_fn = baselines.volume_rate if job.volume_limit_files else baselines.decode_rate

        def limit(fn=rate_fn) -> dict[str, float]:  # every core at once, half a run's time
            return baselines.on_every_core(fn, frames, cores, min_seconds=job.min_seconds / 2)

        count = lambda b: int(tf.nest.flatten(b)[-1].shape[0])  # examples: the last leaf's (the label's) length
        ring = job.batch_size * job.frames_per_example
        ceiling_fn = functools.partial(baselines.decode_rate, ring_frames=ring)
        with_ceiling = job.float_ceiling and job.limit_files and not job.volume_limit_files
        ceilings = []
        for _ in range(job.runs):
            before = limit() if frames is not None else None
            ceiling_before = limit(ceiling_fn) if with_ceiling else None
            runs.append(streams.stream_rate(lambda: iter(make_dataset(job)), count=count, cores=cores,
                                            min_seconds=job.min_seconds, warmup_batches=job.warmup_batches))
            if ceiling_before is not None:
                after = limit(ceiling_fn)
                ceilings.append({k: (ceiling_before[k] + after[k]) / 2 for k in ceiling_before})
            if before is not None:  # the run's limit: the mean of the limit timed right before and right after it
                after = limit()
                limits.append({k: (before[k] + after[k]) / 2 for k in before})
    summary = streams.run_summary(runs)
    return {
        "pipeline": job.pipeline,
        **summary,
        "frames_per_s": round(summary["examples_per_s"] * job.frames_per_example, 2),
        "cores": cores,
        "batch_size": job.batch_size,
        "seed": job.seed,
        "rss_before_mib": round(rss_before / MIB, 1),
        "peak_rss_mib": round(max(monitor.total_peak, rss_before) / MIB, 1),
        "hwm_rss_mib": round(measure.peak_rss_mib(), 1),  # cross-check: VmHWM (ru_maxrss would carry run.py's peak)
        **(paired_limit(runs, limits, frames, job.frames_per_example, cores) if frames is not None else {}),
        **({"ceiling": {**paired_limit(runs, ceilings, frames, job.frames_per_example, cores)["limit"],
                        "kind": f"JPEG decode + float32 / 255 into a ring of {ring} frames"}} if ceilings else {}),
        **({"output_dtype": job.output_dtype, "mask_dtype": job.mask_dtype}
           if (job.output_dtype, job.mask_dtype) != ("float32", "float32") else {}),
        **({"augment": job.augment} if job.augment else {}),
    }


def paired_limit(runs: Sequence[dict[str, Any]], limits: Sequence[dict[str, float]], frames: Sequence[bytes],
                 frames_per_example: int, cores: int) -> dict[str, Any]:
    """The decode limit measured before each run, and each run's ratio to its own limit (medians too)."""
    one = [lim["frames_per_s"] for lim in limits]
    cpu_one = [lim["cpu_frames_per_s"] for lim in limits]
    ratios = [r["examples_per_s"] * frames_per_example / (cores * f) for r, f in zip(runs, one)]
    cpu_ratios = [r["cpu_examples_per_s"] * frames_per_example / (cores * f) for r, f in zip(runs, cpu_one)]
    return {"limit": {
        "frames_per_s_one_core": round(statistics.median(one), 1), "frames_per_s_one_core_runs": [round(f, 1) for f in one],
        "cpu_frames_per_s_one_core": round(statistics.median(cpu_one), 1), "cores": cores, "frames_sampled": len(frames),
        "mean_stored_frame_bytes": int(sum(len(f) if isinstance(f, bytes) else f[-1] for f in frames) / len(frames)),
        "kind": "bytes -> float32 volume (NumPy)" if frames and not isinstance(frames[0], bytes) else "JPEG decode",
        "examples_per_s": round(statistics.median(one) * cores / frames_per_example, 3),
        "cpu_examples_per_s": round(statistics.median(cpu_one) * cores / frames_per_example, 3),
        "of_limit_runs": [round(x, 4) for x in ratios], "of_limit": round(statistics.median(ratios), 4),
        "of_limit_cpu": round(statistics.median(cpu_ratios), 4), "paired": True,
    }}


def run(job: ReadJob, folder: str, tag: str, *, isolate: bool, timeout: float) -> dict[str, Any]:
    """`measure_read(job)`: in a process of its own (this script as a job, files FOLDER/TAG.*) when `isolate`."""
    if not isolate:
        return measure_read(job)
    return jobs.json_job(__file__, dataclasses.asdict(job), folder, tag, timeout)[0]


if __name__ == "__main__":  # `python benchmarks/common/read_job.py JOB.json RESULT.json`
    sys.exit(jobs.job_main(__file__, lambda job: measure_read(ReadJob(**job))))
