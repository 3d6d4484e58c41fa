"""Stopping and resuming `vidvol.load`: checkpoint size, restore cost, and the shuffle's quality old vs new."""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import report, section

WINDOW = 32
OLD_BUFFER_BYTES = 256 * 2**20  # the release before's default shuffle buffer
# (label, examples, shard files, stored bytes per example): full-size splits of the three datasets.
SHAPES_FULL = (("hmdb51 split1 20x64x64 train", 3570, 4, 32_000), ("fire_hrr 161x540x960 windows", 1200, 113, 12 * 2**20),
               ("mri_volumes 128^3", 1000, 32, 4 * 2**20))
SHAPES_QUICK = (("hmdb51-like", 300, 4, 32_000), ("fire_hrr-like", 120, 12, 12 * 2**20))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumeSettings(section.Settings):
    epochs: int = 4  # epochs of each order the metrics average over
    seeds: int = 3
    cycle_length: int = 4  # the release before's interleave on 2 cores (min(files, 2 x cores, 16))
    shapes: tuple = SHAPES_FULL
    sample_sizes: dict = dataclasses.field(default_factory=lambda: dict(hmdb_videos=40, fire_experiments=4, mri=24))


METHOD = [
    "Restore cost: in this process, with vidvol's record indexes dropped before each measurement (a fresh process "
    "re-walks the shard files); the page cache is warm. On a shared machine the seconds are contended.",
    "Shuffle quality: the orders of example indices only (tf.data's shuffle/interleave ops on integers for the release "
    "before, vidvol.readers.order now, numpy.random.permutation for the ideal), several seeds and epochs each.",
]


def old_orders(shard_lengths: Sequence[int], cycle: int, buffer: int, seed: int, epochs: int) -> list[np.ndarray]:
    """The release before's training order over a split: file shuffle, interleave (block 1), example shuffle buffer."""
    import tensorflow as tf

    starts = np.cumsum([0] + list(shard_lengths))[:-1].astype(np.int64)
    files = tf.data.Dataset.from_tensor_slices((starts, np.asarray(shard_lengths, np.int64)))
    files = files.shuffle(len(shard_lengths), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(lambda s, n: tf.data.Dataset.range(s, s + n), cycle_length=min(cycle, len(shard_lengths)),
                          block_length=1)
    ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    return [np.fromiter(ds.as_numpy_iterator(), np.int64) for _ in range(epochs)]


def metrics(orders: Sequence[np.ndarray], shard_lengths: Sequence[int]) -> dict[str, float]:
    """The order metrics of one run of epochs, averaged over them: `shard_tv`, the total-variation distance between
    the shard mix of each window of WINDOW consecutive examples (a batch) and the split's (0: every batch mixes the
    shards in proportion; not 0 for the ideal either); `position_corr`, |Pearson| of an example's place in the epoch
    and in storage; `neighbours`, consecutive examples that are storage neighbours, as a multiple of the ideal's 2/n;
    `epoch_corr`, |Pearson| of an example's places in two successive epochs (0 ideal for the correlations)."""
    n = int(sum(shard_lengths))
    bounds = np.cumsum(shard_lengths)
    share = np.asarray(shard_lengths, float) / n
    tv, corr, neighbours = [], [], []
    for o in orders:
        assert sorted(o.tolist()) == list(range(n)), "not a permutation"
        shard = np.searchsorted(bounds, o, side="right")
        windows = shard[: len(o) // WINDOW * WINDOW].reshape(-1, WINDOW)
        hist = np.stack([np.bincount(w, minlength=len(shard_lengths)) for w in windows]) / WINDOW
        tv.append(float(np.mean(0.5 * np.abs(hist - share).sum(axis=1))))
        corr.append(abs(float(np.corrcoef(np.arange(n), o)[0, 1])))
        neighbours.append(float(np.mean(np.abs(np.diff(o)) == 1)) / (2.0 / n))
    places = [np.argsort(o) for o in orders]
    epoch_corr = [abs(float(np.corrcoef(a, b)[0, 1])) for a, b in zip(places, places[1:])]
    return {"shard_tv": float(np.mean(tv)), "position_corr": float(np.mean(corr)),
            "neighbours": float(np.mean(neighbours)), "epoch_corr": float(np.mean(epoch_corr)) if epoch_corr else 0.0}


def quality(shapes: Sequence[tuple], settings: ResumeSettings) -> list[dict[str, Any]]:
    """The order metrics of the release before's order, vidvol's now and the ideal (numpy permutations), per shape."""
    from vidvol.readers import order

    out = []
    for label, n, shards, example_bytes in shapes:
        lengths = [n // shards + (1 if i < n % shards else 0) for i in range(shards)]  # as TFDS balances n examples
        buffer = max(1, min(n, OLD_BUFFER_BYTES // int(example_bytes)))
        rows = {"old": [], "new": [], "ideal": []}
        layout, epochs = order.Layout(n, 1, 0, True), range(settings.epochs)
        for seed in range(settings.seeds):
            rng = np.random.default_rng(seed)
            rows["old"].append(metrics(old_orders(lengths, settings.cycle_length, buffer, seed, settings.epochs), lengths))
            rows["new"].append(metrics([layout.examples_np(np.arange(n), e, seed, 0)[0] for e in epochs], lengths))
            rows["ideal"].append(metrics([rng.permutation(n) for _ in epochs], lengths))
        entry = {"label": label, "examples": n, "shards": shards, "example_bytes": example_bytes, "old_buffer": buffer}
        for kind, ms in rows.items():
            entry[kind] = {k: round(statistics.mean(m[k] for m in ms), 5) for k in ms[0]}
        out.append(entry)
        print(f"[resume] {label}: shard_tv old {entry['old']['shard_tv']:.3f} new {entry['new']['shard_tv']:.3f} "
              f"ideal {entry['ideal']['shard_tv']:.3f}", flush=True)
    return out


def _drop_indexes() -> None:
    from vidvol.core import tfrecord
    from vidvol.readers.tfdata import direct_volumes

    tfrecord._indexes.clear()
    direct_volumes._indexes.clear()


def restore_cost(label: str, data_path: str, batch: int, work: str, runs: int) -> dict[str, Any]:
    """Checkpoint bytes and seconds to the first batch after a restore at 10 % and 90 % of an epoch: a pipeline (seed=0)
    read that far is checkpointed; then, record indexes dropped (as in a fresh process), a new one (seed=1) restores it
    and reads its first batch, against a fresh pipeline's first batch; medians of `runs`."""
    import tensorflow as tf
    import tensorflow_datasets as tfds
    import vidvol

    builder = tfds.builder_from_directory(data_path)
    n = builder.info.splits["train"].num_examples
    per_epoch = max(2, n // batch)
    out: dict[str, Any] = {"label": label, "dataset": builder.info.full_name, "examples": n, "batch_size": batch,
                           "batches_per_epoch": per_epoch, "positions": {}}
    starts = []
    for _ in range(runs):
        _drop_indexes()
        t = time.perf_counter()
        next(iter(vidvol.load(builder, "train", batch, seed=0, repeat=True)))
        starts.append(time.perf_counter() - t)
    out["start_to_first_batch_s"] = round(statistics.median(starts), 3)
    for fraction in (0.1, 0.9):
        skip = max(1, min(per_epoch - 1, round(fraction * per_epoch)))
        it = iter(vidvol.load(builder, "train", batch, seed=0, repeat=True))
        for _ in range(skip):
            next(it)
        prefix = os.path.join(work, label.replace(" ", "_"), f"at_{int(fraction * 100)}", "ckpt")
        tf.train.Checkpoint(iterator=it).write(prefix)
        folder, name = os.path.split(prefix)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith(name + "."))
        times = []
        for _ in range(runs):
            _drop_indexes()
            t = time.perf_counter()
            restored = iter(vidvol.load(builder, "train", batch, seed=1, repeat=True))
            tf.train.Checkpoint(iterator=restored).read(prefix).assert_consumed()
            next(restored)
            times.append(time.perf_counter() - t)
        out["positions"][f"{int(fraction * 100)}%"] = {"batches_skipped": skip, "checkpoint_bytes": size,
                                                       "restore_to_first_batch_s": round(statistics.median(times), 3),
                                                       "runs_s": [round(x, 3) for x in times]}
        print(f"[resume] {label} at {fraction:.0%}: checkpoint {size} bytes, restore to first batch "
              f"{statistics.median(times):.2f} s", flush=True)
    out["old_buffer_bytes"] = int(min(OLD_BUFFER_BYTES, builder.info.splits["train"].num_bytes))
    return out


def sample_builds(work: str, sizes: dict[str, int]) -> list[tuple[str, str, int]]:
    """Small sample builds (standalone runs): (label, data_path, batch size) of hmdb51, fire_hrr, mri_volumes."""
    from common import build_job
    from vidvol.testing import samples

    plans = [("hmdb51", "hmdb51/split1_20x64x64", 8, lambda m: samples.write_hmdb51_layout(
                 m, videos_per_class=sizes["hmdb_videos"], num_frames=(20, 40), height=120, width=160, splits=(1,))),
             ("fire_hrr", "fire_hrr/161x135x240", 1, lambda m: samples.write_fire_hrr_frames(
                 m, experiments=tuple((f"exp_{i}", 12 + i) for i in range(sizes["fire_experiments"])), height=135,
                 width=240)),
             ("mri_volumes", "mri_volumes/small_32", 4, lambda m: samples.write_mri_volumes(m, num_subjects=sizes["mri"],
                                                                                            with_split=True))]
    out = []
    for label, name, batch, write in plans:
        manual, data_dir = os.path.join(work, "manual", label), os.path.join(work, "data")
        builder = build_job.prepare(name, manual, data_dir, before=lambda w=write, m=manual: w(m))
        out.append((label, os.fspath(builder.data_path), batch))
    return out


class Resume(section.Section):
    key = "resume"
    label = "resume"
    summary = "resume section (sections/resume.py: checkpoint size, restore cost, shuffle quality old vs new)"
    FULL = ResumeSettings(mode="full", runs=3)
    QUICK = ResumeSettings(mode="quick", runs=1, epochs=2, seeds=1, shapes=SHAPES_QUICK,
                           sample_sizes=dict(hmdb_videos=4, fire_experiments=2, mri=6))
    method = METHOD

    def measure(self, work: str, settings: ResumeSettings, *, builds: Sequence[tuple[str, str, int]] | None = None
                ) -> dict[str, Any]:
        builds = list(builds) if builds else sample_builds(work, settings.sample_sizes)
        return {"mode": settings.mode, "runs": settings.runs, "cores": len(os.sched_getaffinity(0)),
                "restore": [restore_cost(label, path, batch, work, settings.runs) for label, path, batch in builds],
                "quality": quality(settings.shapes, settings),
                "settings": {"epochs": settings.epochs, "seeds": settings.seeds, "cycle_length": settings.cycle_length,
                             "window": WINDOW}}

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        rows = []
        biggest = max(p["checkpoint_bytes"] for r in doc["restore"] for p in r["positions"].values())
        rows.append(section.target("largest iterator checkpoint (any dataset, any position)", biggest / 1024, 64 * 1024.0,
                                   op="<=", unit="KiB", note="the target is 64 MiB"))
        for r in doc["restore"]:
            p10, p90 = r["positions"]["10%"], r["positions"]["90%"]
            rows.append(section.target(
                f"{r['label']}: restore at 90 % vs at 10 % of an epoch (time to the first batch)",
                p90["restore_to_first_batch_s"] / max(p10["restore_to_first_batch_s"], 1e-9), 1.5, op="<=",
                note="a position, not a replay: the cost must not grow with the position"))
        for q in doc["quality"]:
            rows.append(section.target(f"{q['label']}: batch shard mix (TV distance) new vs the release before",
                                       q["new"]["shard_tv"] / max(q["old"]["shard_tv"], 1e-9), 1.05, op="<=",
                                       note=f"ideal (uniform permutation) {q['ideal']['shard_tv']:.3f}"))
        return rows

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["## Stopping and resuming: checkpoints, restore cost, shuffle quality", "",
               f"`benchmarks/sections/resume.py` ({doc['mode']} mode, {doc['duration_s'] / 60:.1f} min, {doc['cores']} cores, "
               f"medians of {doc['runs']} run(s)).", ""]
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
        out += report.table(
            ["dataset", "examples", "checkpoint at 10 % / 90 %", "restore to first batch 10 % / 90 %",
             "fresh start to first batch", "the old checkpoint's buffer (up to)"],
            [[r["dataset"], str(r["examples"]),
              " / ".join(f"{r['positions'][k]['checkpoint_bytes'] / 1024:.1f} KiB" for k in ("10%", "90%")),
              " / ".join(f"{r['positions'][k]['restore_to_first_batch_s']:.2f} s" for k in ("10%", "90%")),
              f"{r['start_to_first_batch_s']:.2f} s", f"{r['old_buffer_bytes'] / 2**20:.1f} MiB"]
             for r in doc["restore"]])
        out += report.table(
            ["split shape", "examples / shards / old buffer", "shard_tv old / new / ideal", "position_corr old / new",
             "neighbours old / new (x ideal)", "epoch_corr old / new"],
            [[q["label"], f"{q['examples']} / {q['shards']} / {q['old_buffer']}",
              f"{q['old']['shard_tv']:.3f} / {q['new']['shard_tv']:.3f} / {q['ideal']['shard_tv']:.3f}",
              f"{q['old']['position_corr']:.3f} / {q['new']['position_corr']:.3f}",
              f"{q['old']['neighbours']:.2f} / {q['new']['neighbours']:.2f}",
              f"{q['old']['epoch_corr']:.3f} / {q['new']['epoch_corr']:.3f}"] for q in doc["quality"]])
        out += [f"- {line}" for line in doc.get("method", [])] + [""]
        return out

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        s = ctx.settings
        wanted = [("hmdb51", ctx.path("data", "hmdb51"), f"hmdb51/{s.hmdb51_config}", s.hmdb51_batch),
                  ("fire_hrr", ctx.path("data", f"fire_{min(s.fire_counts)}"), f"fire_hrr/{s.fire_config}", s.fire_batch),
                  ("mri_volumes", ctx.path("data", f"mri_{s.mri[0][0]}"), f"mri_volumes/{s.mri_config}", s.mri_batch)]
        builds = []
        for label, data_dir, name, batch in wanted:
            folder = os.path.join(data_dir, *name.split("/"))
            versions = sorted(v for v in (os.listdir(folder) if os.path.isdir(folder) else [])
                              if os.path.isfile(os.path.join(folder, v, "dataset_info.json")))
            if versions:
                builds.append((label, os.path.join(folder, versions[-1]), batch))
        return {"builds": builds}


SECTION = Resume()

if __name__ == "__main__":
    sys.exit(SECTION.main())
