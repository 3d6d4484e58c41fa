"""What read-time video augmentation costs: `vidvol.load` with `VideoAugment` on vs off.

`VideoAugment(56)`: pytorchvideo's RandomResizedCrop defaults (boxes of 8-100 % of the frame, aspect 3/4-4/3) to 7/8
of the stored side, and a flip; `training_crop="random_short_side_scale"`: DMVR's crop at the stored short side (a
copy, no resize); `VideoAugment(64)`: the peers' output size (their augmented row, no target of its own);
`multi_crop=True, training=False`: three views per clip (no target). Cost: `1 - rate / off's rate` within a round.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import report, section

TARGET_COST = 0.10
PIPELINES = ("off", "random_resized_crop", "random_crop", "random_resized_crop_stored_size", "eval_multi_crop")
TRAINING = ("random_resized_crop", "random_crop")
LABELS = {"off": "vidvol.load (no augmentation)",
          "random_resized_crop": "VideoAugment({s}): random resized crop + flip",
          "random_resized_crop_stored_size": "VideoAugment({c}): random resized crop to the stored size + flip",
          "random_crop": "VideoAugment({s}, training_crop='random_short_side_scale'): random crop + flip",
          "eval_multi_crop": "VideoAugment({s}, multi_crop=True), training=False: 3 crops per clip"}
METHOD = [
    "One process, every pipeline timed in each round (rounds alternate pipelines, so load changes hit all alike): "
    "vidvol.load over the hmdb51 train split (TFRecord), seed=0, repeat=True, float32 model-ready batches; at least "
    "min_seconds per pipeline and round after warm-up batches.",
    "Cost: 1 - (rate with augmentation / rate without) within a round, median over rounds; cpu: the same on examples per "
    "CPU-second of this process times the cores. Augmentation runs on the decoded uint8 frames in the batch's decode "
    "stage (one Python call per batch: OpenCV resize and flip), before the float conversion, which then converts the "
    "smaller crops.",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VideoAugmentSettings(section.Settings):
    """Sizes of one mode (`runs`: timed rounds, every pipeline once per round)."""

    hmdb51: dict[str, Any]  # inputs.hmdb51_plan arguments (standalone runs)
    config: str = "split1_20x64x64"
    min_seconds: float = 2.0
    batch_size: int = 32
    crop_size: int = 64  # the stored frame size: the output of `off`, of the peers' rows and of one augmented row
    small_crop: int = 56  # the crops of the other augmented rows (7/8 of the stored side)
    step_rounds: int = 15  # alternating rounds of the augmentation step timed alone (`step_rounds`)
    step_calls: int = 4  # calls per pipeline and round


def augments(crop: int, small: int) -> dict[str, tuple[Any, bool]]:
    """{pipeline: (VideoAugment or None, training)}."""
    from vidvol import VideoAugment

    return {"off": (None, True), "random_resized_crop": (VideoAugment(small), True),
            "random_crop": (VideoAugment(small, training_crop="random_short_side_scale"), True),
            "random_resized_crop_stored_size": (VideoAugment(crop), True),
            "eval_multi_crop": (VideoAugment(small, multi_crop=True), False)}


def step_rounds(frames: Any, made: dict[str, tuple[Any, bool]], rounds: int, calls: int) -> dict[str, dict[str, Any]]:
    """CPU ms per batch of each pipeline's crop call (one thread) and of the float conversion after it, alternating."""
    import time
    import numpy as np
    import tensorflow as tf
    from vidvol.readers import rng
    from vidvol.readers.tfdata import stages

    keys = rng.seed_np(0, 0, np.arange(len(frames)), rng.VIDEO_AUGMENT)
    steps: dict[str, Any] = {}
    for p, (augment, training) in made.items():
        if augment is None:
            steps[p] = (None, frames)
            continue
        g = augment.geometry(frames.shape[-3:], training)
        out = np.empty(g.crop(frames, frames.shape[1:2], keys).shape, np.uint8)  # written again by every timed call
        steps[p] = (lambda g=g, out=out: g.crop(frames, frames.shape[1:2], keys, out), out)
    for _, out in steps.values():  # warm-up: TensorFlow's first conversion of a shape traces and allocates
        stages.as_float(tf.constant(out), 255.0, 0.0, 1.0).numpy()
    crop_ms: dict[str, list[float]] = {p: [] for p in steps}
    float_ms: dict[str, list[float]] = {p: [] for p in steps}
    for _ in range(rounds):
        for p, (crop, out) in steps.items():
            if crop is not None:
                start = time.thread_time()
                for _ in range(calls):
                    crop()
                crop_ms[p].append((time.thread_time() - start) / calls * 1e3)
            x = tf.constant(out)
            start = time.process_time()  # TensorFlow's conversion may use its intra-op threads
            for _ in range(calls):
                stages.as_float(x, 255.0, 0.0, 1.0).numpy()
            float_ms[p].append((time.process_time() - start) / calls * 1e3)
    return {p: {"crop_ms": round(statistics.median(crop_ms[p]), 3) if crop_ms[p] else 0.0,
                "crop_ms_runs": [round(v, 3) for v in crop_ms[p]],
                "float_ms": round(statistics.median(float_ms[p]), 3),
                "float_ms_runs": [round(v, 3) for v in float_ms[p]]} for p in steps}


NOTES = {"random_resized_crop": "every frame resampled (OpenCV bilinear, uint8); the float pass then converts the "
                                 "smaller frames",
         "random_crop": "a copy of the crop, no resize; the float pass then converts the smaller frames"}


def _label(doc: dict[str, Any], pipeline: str) -> str:
    return LABELS[pipeline].format(c=doc["crop_size"], s=doc["small_crop"])


class VideoAugmentCost(section.Hmdb51Section):
    """vidvol.load with read-time video augmentation vs without, on the same data and batches."""

    key = "video_augment"
    label = "video augmentation"
    summary = "video augmentation section (sections/video_augment.py: vidvol.load with VideoAugment on vs off)"
    FULL = VideoAugmentSettings(mode="full", runs=3, hmdb51=dict(num_classes=8, videos_per_class=30,
                                                                  num_frames=(60, 300), height=240, width=320))
    QUICK = VideoAugmentSettings(mode="quick", runs=1, hmdb51=dict(num_classes=2, videos_per_class=3,
                                                                    num_frames=(20, 40), height=120, width=160),
                                 min_seconds=0.3, batch_size=2, step_rounds=2, step_calls=1)
    method = METHOD

    def measure(self, work: str, settings: VideoAugmentSettings, *, manual_dir: str,
                tfrecord_dir: str | None = None) -> dict[str, Any]:
        import tensorflow_datasets as tfds
        import vidvol
        from common import streams
        from sections.random_access import build, rounds

        name = f"hmdb51/{settings.config}"
        data_dir = tfrecord_dir or os.path.join(work, "data_tfrecord")
        build(manual_dir, data_dir, settings.config)
        examples = tfds.builder(name, data_dir=data_dir).info.splits["train"].num_examples
        made = augments(settings.crop_size, settings.small_crop)

        def factory(pipeline: str):
            augment, training = made[pipeline]
            ds = vidvol.load(name, "train", settings.batch_size, data_dir=data_dir, seed=0, repeat=True,
                             training=training, drop_remainder=True, spec=vidvol.ReadSpec(augment=augment))
            batches = iter(tfds.as_numpy(ds))
            return lambda: len(next(batches)[1])

        runs = rounds({p: lambda p=p: factory(p) for p in PIPELINES}, settings, "video_augment", "clips")
        ds = vidvol.load(name, "train", settings.batch_size, data_dir=data_dir, seed=0, repeat=True, drop_remainder=True,
                         spec=vidvol.ReadSpec(output=vidvol.Output(features=["video"], dtype="uint8")))
        frames = next(iter(tfds.as_numpy(ds)))["video"]
        step = step_rounds(frames, made, settings.step_rounds, settings.step_calls)
        for p, r in step.items():
            print(f"[video_augment] step {p}: crop {r['crop_ms']:.2f} ms, float conversion {r['float_ms']:.2f} ms "
                  f"per batch", flush=True)
        return {"mode": settings.mode, "dataset": name, "split": "train", "examples": examples, "step": step,
                "batch_size": settings.batch_size, "crop_size": settings.crop_size,
                "small_crop": settings.small_crop, "rounds": settings.runs, "cores": len(os.sched_getaffinity(0)),
                "runs": runs, "results": {p: streams.run_summary(r) for p, r in runs.items()},
                "augments": {p: repr(a) for p, (a, _) in made.items()}}

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        off = doc["runs"]["off"]
        for p, r in doc["results"].items():
            pairs = list(zip(doc["runs"][p], off))
            r["cost"] = round(statistics.median(1 - a["examples_per_s"] / b["examples_per_s"] for a, b in pairs), 4)
            r["cost_cpu"] = round(statistics.median(1 - a["cpu_examples_per_s"] / b["cpu_examples_per_s"]
                                                    for a, b in pairs), 4)
        doc["notes"] = section.run_notes(doc, doc["results"], "the cpu-normalized costs are steadier")
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        r = doc["results"]
        return [section.target(
            f"hmdb51 (batch {doc['batch_size']}): vidvol.load with {_label(doc, p)} costs vs without", r[p]["cost"],
            TARGET_COST, op="<=", unit="%", cpu_value=r[p]["cost_cpu"], note=NOTES[p]) for p in TRAINING]

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["## Video augmentation: vidvol.load with VideoAugment on vs off", "",
               f"`benchmarks/sections/video_augment.py` ({doc['mode']} mode, {doc.get('duration_s', 0) / 60:.1f} min): "
               f"`{doc['dataset']}` {doc['split']} ({doc['examples']} clips), batches of {doc['batch_size']}, "
               f"{doc['rounds']} round(s) on {doc['cores']} cores.", ""]
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
        out += report.table(
            ["pipeline", "clips/s", "rounds", "cost", "cpu clips/s", "cost (cpu)", "cores busy (others)"],
            [[_label(doc, p), report.rate(r["examples_per_s"]),
              ", ".join(report.rate(x) for x in r["examples_per_s_runs"]),
              "" if p == "off" else f"{100 * r['cost']:.1f}%", report.rate(r["cpu_examples_per_s"]),
              "" if p == "off" else f"{100 * r['cost_cpu']:.1f}%", f"{r['cores_used']:.2f} ({r['other_cores_busy']:.2f})"]
             for p, r in doc["results"].items()])
        out += [f"- {line}" for line in doc.get("notes", []) + doc.get("method", [])] + [""]
        if doc.get("step"):
            off = doc["step"]["off"]["float_ms"]
            out += [f"The augmentation step alone: CPU ms per batch of {doc['batch_size']} clips of stored frames (crop call on "
                    f"one thread; float conversion by TensorFlow), medians of {len(doc['step']['off']['float_ms_runs'])} "
                    "alternating rounds; `net` is what the step adds to the float conversion of the stored frames.", ""]
            out += report.table(["pipeline", "crop call", "float conversion", "net"],
                                [[_label(doc, p), "" if p == "off" else f"{r['crop_ms']:.2f}", f"{r['float_ms']:.2f}",
                                  "" if p == "off" else f"{r['crop_ms'] + r['float_ms'] - off:+.2f}"]
                                 for p, r in doc["step"].items()])
            out += [""]
        return out

    def run_settings(self, ctx: section.Context) -> VideoAugmentSettings:
        return dataclasses.replace(super().run_settings(ctx), min_seconds=ctx.settings.min_seconds)


def vidvol_row(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The peers section's view of the augmented pipeline at the stored size (None without this section's document)."""
    pipeline = "random_resized_crop_stored_size"
    if not doc or pipeline not in doc.get("results", {}):
        return None
    r = doc["results"][pipeline]
    return {"pipeline": "vidvol.load", "config": doc["dataset"].split("/", 1)[1], "batch_size": doc["batch_size"],
            "seed": 0, "augment": _label(doc, pipeline), **{k: r[k] for k in (
                "examples_per_s", "examples_per_s_runs", "cpu_examples_per_s", "cores_used", "other_cores_busy")}}


SECTION = VideoAugmentCost()

if __name__ == "__main__":
    sys.exit(SECTION.main())
