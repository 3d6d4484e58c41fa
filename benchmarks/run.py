"""vidvol benchmark: read throughput against the read-time pipelines and the decode limit, build scaling, memory.

    python benchmarks/run.py --out bench_out           # full (`make bench`), ~10 min on 2 cores
    python benchmarks/run.py --quick --out bench_out   # tiny inputs, 1 run (`make bench-quick`, CI smoke)

The benchmarks are a repository tool, not part of the installed package: they run as scripts from
a source checkout (their folder is `sys.path[0]`, so sibling modules import as `import reads`).
Writes OUT/results.json, OUT/RESULTS.md and OUT/results.png; a full run also publishes them to the
checkout's `benchmarks/` folder (unless --no-publish; never outside a git work tree). Inputs are
generated offline under OUT/inputs (OUT/inputs_quick, or --inputs) and reused by later runs.
Measured, each against its baseline in the same run on the same files:

- reads: hmdb51 (default config) via `vidvol.load` vs the users' per-frame-seek OpenCV pipeline and
  vs the decode limit; hmdb51 through plain `tfds.load` (+ cast/255, batch, prefetch) and through
  `vidvol.load` seeded and unseeded, at batch 8 and 32, each against the decode limit; its stored-raw
  twin (`<config>_raw`) vs the same baseline, vs the JPEG decode limit and its disk cost; fire_hrr at
  full resolution vs per-frame `get_img` and the decode limit;
  mri_volumes from 128^3 and 256x256x160 scans vs `nib.load(...).get_fdata()`; peak RSS of each;
- builds: fire_hrr full resolution with 1 vs 2 Beam workers; peak RSS of the driver and of every
  Beam worker building 4 vs 16 experiments;
- cluster (`cluster.py`): the same builds on Beam's DaskRunner (a local dask scheduler + 1 or 2
  worker processes): 1 vs 2 workers, dask worker peak RSS for 4 vs 16 experiments, and the
  driver's part of a build for 10k / 100k / 1M synthetic sources (Kinetics is ~650k videos).
  `--no-cluster` leaves it out (it adds ~15 min to a full run).
- random access (`random_access.py`): the hmdb51 inputs built again with ArrayRecord shards; random
  index reads (`vidvol.data_source`, one index and batches of 32) and Grain's model-ready batches
  vs the sequential `vidvol.load` rate on the same data. `--no-random-access` leaves it out.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import glob
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Sequence

import psutil
from vidvol import samples

import baselines
import build_limit
import builds
import cluster
import fire_memory
import inputs
import random_access
import report
from reads import ReadJob

logger = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))  # benchmarks/ of the source checkout
GIB = 2**30


def repeat_experiments(labels: str, manual_dir: str, repeat: int) -> int:
    """Writes manual_dir/labels.csv listing every experiment `repeat` times (same frames, new names).

    A build long enough that worker start-up (a few seconds of imports) does not dominate the
    1-vs-2-worker comparison, without generating more full-resolution frames.
    """
    os.makedirs(manual_dir, exist_ok=True)
    with open(labels, newline="") as f:
        reader = csv.DictReader(f)
        rows, fields = list(reader), reader.fieldnames
    with open(os.path.join(manual_dir, "labels.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for j in range(repeat):
            for row in rows:
                writer.writerow({**row, "experiment": f"{row['experiment']}_r{j}" if repeat > 1 else row["experiment"]})
    return len(rows) * repeat


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes and repetitions of one benchmark mode."""

    mode: str
    runs: int  # timed runs per read pipeline (median reported)
    build_runs: int  # builds per worker count for the scaling measurement
    scaling_repeat: int  # each experiment listed this many times (same frames) for the 1-vs-2-worker builds
    min_seconds: float  # timed seconds per read run
    isolate: bool  # builds via the tfds CLI (multi-process Beam) and each read in its own process
    hmdb51: dict[str, Any]
    hmdb51_config: str
    hmdb51_batch: int
    fire: dict[str, Any]
    fire_config: str
    fire_counts: tuple[int, int]  # experiments built for the memory comparison; the smaller one is read
    fire_batch: int
    mri: tuple[tuple[str, dict[str, Any]], ...]
    mri_config: str
    mri_batch: int
    hmdb51_path_batches: tuple[int, ...] = (8, 32)  # tfds.load and seeded/unseeded vidvol.load at each


FULL = Settings(
    mode="full", runs=3, build_runs=3, scaling_repeat=4, min_seconds=2.0, isolate=True,
    # 240 clips, 80 in split 1's train list: an epoch of several batches, so per-epoch costs (files
    # reopened, shuffle refilled) weigh as little as in HMDB51's 3,570-clip train split.
    hmdb51=dict(num_classes=8, videos_per_class=30, num_frames=(60, 300), height=240, width=320),
    hmdb51_config="split1_20x64x64", hmdb51_batch=32,
    fire=dict(experiments=16, frames=161, height=540, width=960), fire_config="full_161x540x960",
    fire_counts=(4, 16), fire_batch=1,
    mri=(("128", dict(num=12, shape=(128, 128, 128))), ("256x256x160", dict(num=8, shape=(256, 256, 160)))),
    mri_config="128", mri_batch=2,
)
QUICK = Settings(
    mode="quick", runs=1, build_runs=1, scaling_repeat=1, min_seconds=0.3, isolate=False,
    hmdb51=dict(num_classes=2, videos_per_class=3, num_frames=(20, 40), height=120, width=160),
    hmdb51_config="split1_20x64x64", hmdb51_batch=2,
    fire=dict(experiments=2, frames=161, height=135, width=240), fire_config="161x135x240",
    fire_counts=(1, 2), fire_batch=1,
    mri=(("32", dict(num=2, shape=(32, 32, 32))), ("40x40x24", dict(num=2, shape=(40, 40, 24)))),
    mri_config="small_32", mri_batch=2, hmdb51_path_batches=(2, 4),
)
FIRE_WINDOW = 161
HMDB51_FRAMES = 20
HMDB51_CLIPS = 6766  # clips in the real HMDB51 (the disk cost of a config is stated for all of them)
CONTENDED_CORES = 0.25  # other processes busier than this during a timed window make it "shared"

METHOD = [
    "hmdb51 baseline: list of video paths -> `tf.py_function` opening each with `cv2.VideoCapture`, seeking "
    "`CAP_PROP_POS_FRAMES` to each of 20 evenly spaced frames, BGR->RGB, resize to 64x64, /255; "
    "`map(num_parallel_calls=AUTOTUNE)`, batch, prefetch. Same train-split videos the loader's shards hold.",
    "fire_hrr baseline: list of frame files -> per-frame `get_img` (cv2.imread, RGB, float32 /255) in "
    "`tf.numpy_function`, AUTOTUNE map, windows of 161 frames, batch, prefetch. Same experiments as the loader reads.",
    "mri_volumes baseline: list of .nii.gz paths -> `nib.load(path).get_fdata(dtype=np.float32)` in "
    "`tf.py_function`, AUTOTUNE map, batch, prefetch (native grid, no resampling: cheaper than what the loader "
    "returns).",
    "Our side: `vidvol.load(name/config, split='train', batch_size, repeat=True)`: shuffled, float32 model-ready "
    "`((x, mask), target)` batches.",
    "hmdb51 read paths: plain `tfds.load(name/config, split='train', shuffle_files=True, "
    "read_config=tfds.ReadConfig(try_autocache=False))` -> repeat -> `map(cast(video, float32) / 255, label; "
    "AUTOTUNE)` -> batch -> prefetch (autocache off: TFDS would keep a small split's decoded clips in memory); and "
    "`vidvol.load` with seed=None and seed=0; each at batch 8 and 32, each in its own process with its own paired "
    "decode limit. The seed cost compares the seeded and unseeded shares of the limit at the same batch size. "
    "x baseline: against the OpenCV seek baseline above (its rate does not depend on the batch size).",
    "hmdb51_raw: the same videos built again as the stored-raw config (`<config>_raw`: uncompressed uint8 clips), "
    "read the same way; its limit is the JPEG config's decode limit (the stored JPEG frames of the same clips, timed "
    "in the raw reader's process before each run), its baseline the hmdb51 row's OpenCV run. Disk: the shard files "
    "of both splits per clip, times the 6,766 clips of HMDB51.",
    "Decode limit: the JPEG frames exactly as stored in our shards (read back from the TFRecords), `cv2.imdecode` "
    "(libjpeg-turbo) in a tight loop, one thread per core, every core at once (OpenCV lets go of the GIL); as "
    "examples/s it is that frame rate divided by the frames per example. No float conversion, batching or copying "
    "is charged to it. It is timed in the reading process right before and right after each loader run (the run's "
    "limit is the mean of the two), and the loader/limit ratio is the median of the per-run ratios, so a machine "
    "that drifts between measurements moves both sides alike. (Until 2026-12-01 the limit was one core for half a "
    "second before each run, times the cores: on this VM that swung by up to 30 % from run to run.)",
    "MRI volume limit (mri_volumes from sources at the grid, seed 004's case): the stored int16 volume bytes of the "
    "train shards read from the page cache (`os.pread` at each record's offset) and converted to a new float32 "
    "volume (`np.frombuffer(...).astype(np.float32)`) in a tight loop on every core at once; timed in the "
    "reading process before and after each loader run, like the decode limit. `output_dtype` rows: the same loader returning "
    "uint8 frames (hmdb51) or int16 volumes without the mask (mri_volumes), to be dequantized on the device "
    "(`vidvol.layers.Dequantize`), against the same baseline run as the float32 row.",
    "Every read pipeline repeats its epochs without pause (repeat before batching); a run is a fresh iterator, "
    "warm-up batches, then at least the timed seconds. `cpu-normalized` = examples per CPU-second of the reading "
    "process x cores: what it would reach with the machine to itself.",
    "Builds run the real `tfds build` CLI (multi-process Beam FnApiRunner) in a subprocess; RSS of the driver and "
    "every SDK worker subprocess is polled with psutil every 0.1 s (`TreeMonitor` in `benchmarks/fire_memory.py`).",
]


# --------------------------------------------------------------------------------------------
# Machine


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or platform.processor())."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, platform and the current load average."""
    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "platform": platform.platform(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }


def versions() -> dict[str, str]:
    """Versions of the libraries the numbers depend on."""
    import apache_beam  # pylint: disable=g-import-not-at-top
    import cv2  # pylint: disable=g-import-not-at-top
    import nibabel  # pylint: disable=g-import-not-at-top
    import numpy  # pylint: disable=g-import-not-at-top
    import tensorflow  # pylint: disable=g-import-not-at-top
    import tensorflow_datasets  # pylint: disable=g-import-not-at-top

    jpeg = next((line.split(":", 1)[1].strip() for line in cv2.getBuildInformation().splitlines()
                 if line.strip().startswith("JPEG:")), "unknown")
    return {
        "python": platform.python_version(), "tensorflow": tensorflow.__version__,
        "tensorflow-datasets": tensorflow_datasets.__version__, "apache-beam": apache_beam.__version__,
        "opencv": cv2.__version__, "opencv JPEG": jpeg, "nibabel": nibabel.__version__, "numpy": numpy.__version__,
    }


# --------------------------------------------------------------------------------------------
# Phases


class Bench:
    """One benchmark run: folders, settings, and the results document being filled."""

    def __init__(self, out: str, settings: Settings, inputs_dir: str | None = None):
        self.out = os.path.abspath(out)
        # Per-mode default, so a quick run never replaces a full run's cached inputs (or the reverse).
        default = "inputs" if settings.mode == "full" else f"inputs_{settings.mode}"
        self.inputs_dir = os.path.abspath(inputs_dir or os.path.join(self.out, default))
        self.s = settings
        self.cores = len(os.sched_getaffinity(0))
        self.phases: dict[str, float] = {}
        os.makedirs(self.out, exist_ok=True)

    def path(self, *parts: str) -> str:
        """A path under the output folder."""
        return os.path.join(self.out, *parts)

    def _phase(self, name: str, start: float) -> None:
        self.phases[name] = round(time.monotonic() - start, 1)
        print(f"[bench] {name} done in {self.phases[name]:.0f} s", flush=True)

    # -- inputs ---------------------------------------------------------------------------------

    def write_inputs(self) -> dict[str, Any]:
        """Generates (or reuses) every input set; returns their descriptions."""
        start = time.monotonic()
        root = self.inputs_dir
        plans = [inputs.hmdb51_plan(os.path.join(root, "hmdb51"), **self.s.hmdb51),
                 inputs.fire_plan(os.path.join(root, "fire_hrr"), **self.s.fire)]
        plans += [inputs.mri_plan(os.path.join(root, f"mri_{tag}"), **spec) for tag, spec in self.s.mri]
        written = inputs.write_inputs(plans, workers=self.cores if self.s.isolate else 1)
        desc = {
            "hmdb51": {**plans[0].spec, **inputs.describe_hmdb51(plans[0].root)},
            "fire_hrr": {**plans[1].spec, **inputs.describe_fire(plans[1].root)},
        }
        for (tag, _), plan in zip(self.s.mri, plans[2:]):
            desc[f"mri_{tag}"] = {**plan.spec, **inputs.describe_mri(plan.root)}
        for d, w in zip(desc.values(), written):
            d["generated_this_run"] = w
        self._phase("inputs", start)
        return desc

    # -- builds ---------------------------------------------------------------------------------

    def _build(self, name: str, config: str, manual_dir: str, data_dir: str, workers: int, *,
               measured: bool = True, target: str | None = None) -> dict[str, Any]:
        """One build; `measured` ones run as a user runs them (the tfds CLI) in a full run.

        `target`: what the tfds command names (e.g. `hmdb51` alone for its default config).
        """
        print(f"[bench] build {target or name + '/' + config} from {manual_dir} with {workers} worker(s)", flush=True)
        isolate = self.s.isolate and measured
        mode = "multi_processing" if self.s.isolate else "multi_threading"
        r = builds.build(name, config, manual_dir, data_dir, workers=workers, isolate=isolate, running_mode=mode,
                         target=target)
        print(f"[bench]   {r['examples']} examples, wall {r['wall_s']:.1f} s, writing {r['write_s']:.1f} s, "
              f"{r['shards_in_flight'] or 0:.2f} shards in flight, {r['cores_used']:.2f} cores busy "
              f"(others {r['other_cores_busy']:.2f}), driver {r['driver_peak_mib']:.0f} MiB, "
              f"worker {r['worker_peak_mib']:.0f} MiB", flush=True)
        return r

    def build_all(self) -> dict[str, Any]:
        """Builds every dataset read later, the fire memory pair and the 1 vs 2 worker scaling runs."""
        start = time.monotonic()
        out: dict[str, Any] = {"reads": {}}
        s = self.s
        # Datasets that are only read: built in this process (Beam worker subprocesses in a full run).
        out["reads"]["hmdb51"] = self._build("hmdb51", s.hmdb51_config, os.path.join(self.inputs_dir, "hmdb51"),
                                             self.path("data", "hmdb51"), self.cores, measured=False)
        out["reads"]["hmdb51_raw"] = self._build("hmdb51", raw_config(s.hmdb51_config),
                                                 os.path.join(self.inputs_dir, "hmdb51"),
                                                 self.path("data", "hmdb51_raw"), self.cores, measured=False)
        for tag, _ in s.mri:
            out["reads"][f"mri_{tag}"] = self._build("mri_volumes", s.mri_config, os.path.join(self.inputs_dir, f"mri_{tag}"),
                                                     self.path("data", f"mri_{tag}"), self.cores, measured=False)
        labels = os.path.join(self.inputs_dir, "fire_hrr", "labels.csv")
        memory: dict[int, dict[str, Any]] = {}
        for count in s.fire_counts:
            manual = self.path("manual", f"fire_{count}")
            fire_memory.subset_labels(labels, manual, count)
            memory[count] = self._build("fire_hrr", s.fire_config, manual, self.path("data", f"fire_{count}"), self.cores)
        small, large = s.fire_counts
        # 1 and 2 workers alternate, so a change in the machine's load hits both alike.
        scaling: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        manual = self.path("manual", f"fire_{large}_x{s.scaling_repeat}")
        repeat_experiments(os.path.join(self.path("manual", f"fire_{large}"), "labels.csv"), manual, s.scaling_repeat)
        for _ in range(s.build_runs):
            for workers in (1, 2):
                scaling[workers].append(self._build("fire_hrr", s.fire_config, manual, self.path("data", "fire_scaling"),
                                                    workers))
        ok, text = fire_memory.verdict(memory, max_worker_gib=2.0, flat_tolerance=0.10)
        out["build_memory"] = {
            "dataset": f"fire_hrr/{s.fire_config}", "interval_s": 0.1,
            "results": {str(k): v for k, v in memory.items()}, "verdict": text, "pass": ok,
        }
        out["scaling_runs"] = scaling
        out["build_scaling"] = {
            "dataset": f"fire_hrr/{s.fire_config}", "examples": scaling[1][0]["examples"],
            "running_mode": "multi_processing" if s.isolate else "multi_threading",
            **{f"workers_{w}": _median_build(runs) for w, runs in scaling.items()},
        }
        b = out["build_scaling"]
        b["speedup"] = b["workers_2"]["examples_per_s"] / b["workers_1"]["examples_per_s"]
        b["e2e_speedup"] = b["workers_2"]["e2e_examples_per_s"] / b["workers_1"]["e2e_examples_per_s"]
        b["pairs"] = [{"speedup": round(two["examples_per_s"] / one["examples_per_s"], 3),
                       "other_cores_busy": max(one["other_cores_busy"], two["other_cores_busy"])}
                      for one, two in zip(scaling[1], scaling[2])]
        b["quietest_pair"] = min(b["pairs"], key=lambda p: p["other_cores_busy"])
        # hmdb51 as a user builds it (tfds CLI, one worker per core): no config vs its default config by name,
        # alternating; the last default-config build also stands for the build-vs-limit comparison.
        hmdb_manual = os.path.join(self.inputs_dir, "hmdb51")
        user: dict[str, list[dict[str, Any]]] = {"no_config": [], "default_config": []}
        for _ in range(max(1, s.build_runs - 1)):
            user["no_config"].append(self._build("hmdb51", s.hmdb51_config, hmdb_manual, self.path("data", "hmdb51_cli"),
                                                 self.cores, target="hmdb51"))
            user["default_config"].append(self._build("hmdb51", s.hmdb51_config, hmdb_manual,
                                                      self.path("data", "hmdb51_cli"), self.cores))
        out["no_config"] = {"dataset": "hmdb51", "config": s.hmdb51_config,
                            **{k: _median_build(v) for k, v in user.items()}}
        out["no_config"]["ratio"] = out["no_config"]["no_config"]["wall_s"] / out["no_config"]["default_config"]["wall_s"]
        out["hmdb51_build"] = user["default_config"][-1]
        out["fire_read_dir"] = self.path("data", f"fire_{small}")
        out["fire_read_manual"] = self.path("manual", f"fire_{small}")
        self._phase("builds", start)
        return out

    # -- cluster (Beam's DaskRunner) ------------------------------------------------------------

    def cluster_settings(self) -> cluster.Settings:
        """The cluster section's sizes: this run's fire inputs and build runs, the mode's driver-scale sizes."""
        s = self.s
        base = cluster.FULL if s.mode == "full" else cluster.QUICK
        counts = (s.fire_counts[-1], s.fire_counts[-1] * s.scaling_repeat) if s.scaling_repeat > 1 else tuple(s.fire_counts)
        return dataclasses.replace(base, mode=s.mode, fire_config=s.fire_config, fire=dict(s.fire), runs=s.build_runs,
                                   scaling_experiments=s.fire_counts[-1], scaling_repeat=s.scaling_repeat,
                                   memory_counts=counts)

    def cluster_all(self) -> dict[str, Any]:
        """Dask builds (1 vs 2 workers, worker memory) on build_all's manual folders, then the driver at scale."""
        start = time.monotonic()
        s = self.s
        settings = self.cluster_settings()
        scaling_manual = self.path("manual", f"fire_{s.fire_counts[-1]}_x{s.scaling_repeat}")
        repeated = s.fire_counts[-1] * s.scaling_repeat
        section = cluster.measure_section(
            self.path("cluster"), settings, scaling_manual=scaling_manual,
            memory_manuals={n: scaling_manual if n == repeated and s.scaling_repeat > 1 else self.path("manual", f"fire_{n}")
                            for n in settings.memory_counts})
        self._phase("cluster", start)
        return section

    # -- random access (ArrayRecord) ------------------------------------------------------------

    def random_access_all(self) -> dict[str, Any]:
        """random_access.py's section on this run's hmdb51 inputs and TFRecord build."""
        start = time.monotonic()
        base = random_access.FULL if self.s.mode == "full" else random_access.QUICK
        settings = dataclasses.replace(base, hmdb51=dict(self.s.hmdb51), config=self.s.hmdb51_config,
                                       rounds=self.s.runs, batch_size=self.s.hmdb51_batch)
        section = random_access.measure_section(self.path("random_access"), settings,
                                                manual_dir=os.path.join(self.inputs_dir, "hmdb51"),
                                                tfrecord_dir=self.path("data", "hmdb51"))
        self._phase("random_access", start)
        return section

    # -- reads ----------------------------------------------------------------------------------

    def _read(self, tag: str, job: ReadJob) -> dict[str, Any]:
        """Runs one read job (in its own process when isolating); returns its result."""
        print(f"[bench] read {tag} via {job.pipeline}", flush=True)
        if not self.s.isolate:
            import reads  # pylint: disable=g-import-not-at-top

            result = reads.measure_read(job)
        else:
            jobs = self.path("jobs")
            os.makedirs(jobs, exist_ok=True)
            job_path, result_path = os.path.join(jobs, f"{tag}.json"), os.path.join(jobs, f"{tag}.result.json")
            with open(job_path, "w", encoding="utf-8") as f:
                json.dump(dataclasses.asdict(job), f)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
            with open(os.path.join(jobs, f"{tag}.log"), "w", encoding="utf-8") as log:
                proc = subprocess.run([sys.executable, os.path.join(HERE, "reads.py"), job_path, result_path],
                                      stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
            if proc.returncode != 0:
                with open(os.path.join(jobs, f"{tag}.log"), encoding="utf-8") as f:
                    raise RuntimeError(f"read job {tag} failed ({proc.returncode}):\n{f.read()[-4000:]}")
            with open(result_path, encoding="utf-8") as f:
                result = json.load(f)
        print(f"[bench]   {result['examples_per_s']:.3g} examples/s (runs {result['examples_per_s_runs']}), "
              f"{result['cores_used']:.2f} cores busy (others {result['other_cores_busy']:.2f}), "
              f"peak RSS {result['peak_rss_mib']:.0f} MiB", flush=True)
        return result

    def hmdb51_paths(self, hmdb51: dict[str, Any]) -> dict[str, Any]:
        """hmdb51 through plain `tfds.load` and seeded/unseeded `vidvol.load` at each batch size, vs the limit."""
        start = time.monotonic()
        s = self.s
        data = self.path("data", "hmdb51")
        common = dict(runs=s.runs, min_seconds=s.min_seconds, frames_per_example=HMDB51_FRAMES, data_dir=data,
                      limit_files=baselines.shard_files(data, "hmdb51", s.hmdb51_config, "train"), limit_max_frames=2000)
        base = hmdb51["baseline"]
        rows = []
        for batch in s.hmdb51_path_batches:
            for pipeline, seed in (("tfds_load", None), ("loader", None), ("loader", 0)):
                if pipeline == "loader" and seed is None and batch == s.hmdb51_batch:
                    result = {**hmdb51["loader"], "limit": hmdb51["limit"]}  # measured above: the same job
                else:
                    tag = f"hmdb51_{pipeline}_b{batch}" + ("" if seed is None else f"_seed{seed}")
                    result = self._read(tag, ReadJob(pipeline, "hmdb51", batch, s.hmdb51_config, seed=seed, **common))
                lim = result.pop("limit")
                rows.append({**result, "pipeline": "tfds.load" if pipeline == "tfds_load" else "vidvol.load",
                             "batch_size": batch, "seed": seed, "limit": lim,
                             "of_limit": lim["of_limit"], "of_limit_cpu": lim["of_limit_cpu"],
                             "x_baseline": result["examples_per_s"] / base["examples_per_s"],
                             "x_baseline_cpu": result["cpu_examples_per_s"] / base["cpu_examples_per_s"]})
        self._phase("hmdb51_paths", start)
        return {"config": s.hmdb51_config, "main_batch": s.hmdb51_batch, "baseline_examples_per_s": base["examples_per_s"],
                "rows": rows}

    def build_limit_all(self, built: dict[str, Any]) -> dict[str, Any]:
        """hmdb51 and fire_hrr builds (2 workers) against the tight-loop limit of their own work (build_limit.py)."""
        start = time.monotonic()
        s = self.s
        clip = s.hmdb51_config.split("_")[-1].split("x")  # split1_20x64x64 -> 20, 64, 64
        fire_size = _fire_config_size(s.fire_config)
        small, large = s.fire_counts
        out = {}
        print("[bench] build limit: hmdb51 tight loop, example function, serialization", flush=True)
        stage = build_limit.stages("hmdb51", s.hmdb51_config, os.path.join(self.inputs_dir, "hmdb51"),
                                   num_samples=int(clip[0]), size=(int(clip[1]), int(clip[2])), quality=90)
        out["hmdb51"] = {"config": s.hmdb51_config, "stages": stage,
                         **build_limit.efficiency(stage, built["hmdb51_build"], cores=self.cores)}
        print("[bench] build limit: fire_hrr tight loop, example function, serialization", flush=True)
        stage = build_limit.stages("fire_hrr", s.fire_config, self.path("manual", f"fire_{large}"),
                                   num_samples=FIRE_WINDOW, size=fire_size, quality=90)
        runs = sorted(built["scaling_runs"][2], key=lambda r: r["examples_per_s"])
        two = runs[len(runs) // 2]  # the median 2-worker scaling build (every experiment listed scaling_repeat times)
        out["fire_hrr"] = {"config": s.fire_config, "stages": stage,
                           **build_limit.efficiency(stage, two, cores=self.cores,
                                                    frames_per_source_scale=s.scaling_repeat)}
        self._phase("build_limit", start)
        return out

    def read_hmdb51_raw(self, jpeg: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
        """The stored-raw hmdb51 config via `vidvol.load`, against the JPEG config's decode limit and the same baseline run."""
        s = self.s
        data, jpeg_data = self.path("data", "hmdb51_raw"), self.path("data", "hmdb51")
        config = raw_config(s.hmdb51_config)
        r = {"config": config, "unit": "clip (20 frames)", "frames_per_example": HMDB51_FRAMES,
             "baseline_name": "OpenCV seek per frame (the hmdb51 row's run)", "examples": jpeg["examples"],
             "limit_of": s.hmdb51_config}
        r["loader"] = self._read("hmdb51_raw_loader", ReadJob(
            "loader", "hmdb51", s.hmdb51_batch, config, data_dir=data, frames_per_example=HMDB51_FRAMES,
            limit_files=baselines.shard_files(jpeg_data, "hmdb51", s.hmdb51_config, "train"), limit_max_frames=2000,
            **common))
        r["baseline"] = jpeg["baseline"]
        r["limit"] = r["loader"].pop("limit")
        r["disk"] = disk_cost("hmdb51", {s.hmdb51_config: jpeg_data, config: data})
        return _ratios(r)

    def read_all(self, built: dict[str, Any]) -> dict[str, Any]:
        """Times every dataset through the loader, its baseline and (video) the decode limit."""
        start = time.monotonic()
        s = self.s
        common = dict(runs=s.runs, min_seconds=s.min_seconds)
        read: dict[str, Any] = {}

        hmdb_root = os.path.join(self.inputs_dir, "hmdb51")
        videos = inputs.hmdb51_split_videos(hmdb_root, 1, "train")
        classes = list(samples.HMDB51_CLASSES)
        data = self.path("data", "hmdb51")
        r = {"config": s.hmdb51_config, "unit": "clip (20 frames)", "frames_per_example": HMDB51_FRAMES,
             "baseline_name": "OpenCV seek per frame (py_function)", "examples": len(videos)}
        r["loader"] = self._read("hmdb51_loader", ReadJob(
            "loader", "hmdb51", s.hmdb51_batch, s.hmdb51_config, data_dir=data, frames_per_example=HMDB51_FRAMES,
            limit_files=baselines.shard_files(data, "hmdb51", s.hmdb51_config, "train"), limit_max_frames=2000, **common))
        r["baseline"] = self._read("hmdb51_baseline", ReadJob(
            "hmdb51_seek", "hmdb51", s.hmdb51_batch, paths=[p for p, _ in videos],
            labels=[classes.index(c) for _, c in videos], frames_per_example=HMDB51_FRAMES, warmup_batches=1, **common))
        r["limit"] = r["loader"].pop("limit")
        read["hmdb51"] = _ratios(r)
        read["hmdb51_uint8"] = self._dtype_entry("hmdb51_uint8", read["hmdb51"], ReadJob(
            "loader", "hmdb51", s.hmdb51_batch, s.hmdb51_config, data_dir=data, frames_per_example=HMDB51_FRAMES,
            limit_files=baselines.shard_files(data, "hmdb51", s.hmdb51_config, "train"), limit_max_frames=2000,
            output_dtype="uint8", **common))
        read["hmdb51_raw"] = self.read_hmdb51_raw(read["hmdb51"], common)

        rows = inputs.fire_frame_rows(os.path.join(built["fire_read_manual"], "labels.csv"))
        height, width = s.fire["height"], s.fire["width"]
        cfg_h, cfg_w = _fire_config_size(s.fire_config)
        r = {"config": s.fire_config, "unit": f"window ({FIRE_WINDOW} frames)", "frames_per_example": FIRE_WINDOW,
             "baseline_name": "per-frame get_img (numpy_function)", "examples": len(rows) // FIRE_WINDOW or 1}
        fire_common = dict(common, min_seconds=1.5 * s.min_seconds, warmup_batches=1)  # ~1 s per window
        r["loader"] = self._read("fire_hrr_loader", ReadJob(
            "loader", "fire_hrr", s.fire_batch, s.fire_config, data_dir=built["fire_read_dir"],
            frames_per_example=FIRE_WINDOW, limit_max_frames=FIRE_WINDOW, **fire_common,
            limit_files=baselines.shard_files(built["fire_read_dir"], "fire_hrr", s.fire_config, "train")))
        r["baseline"] = self._read("fire_hrr_baseline", ReadJob(
            "fire_get_img", "fire_hrr", s.fire_batch, paths=[p for _, p, _ in rows], labels=[h for _, _, h in rows],
            shape=[height, width], window=min(FIRE_WINDOW, len(rows)), frames_per_example=FIRE_WINDOW, **fire_common))
        if (height, width) != (cfg_h, cfg_w):
            r["note"] = f"sources {height}x{width}, stored {cfg_h}x{cfg_w}"
        r["limit"] = r["loader"].pop("limit")
        read["fire_hrr"] = _ratios(r)

        for i, (tag, spec) in enumerate(s.mri):
            root = os.path.join(self.inputs_dir, f"mri_{tag}")
            names = sorted(set(inputs.mri_labels(root)))
            data = self.path("data", f"mri_{tag}")
            # The first source size is seed 004's case (sources already at the grid): limit and int16 rows.
            limit = dict(volume_limit_files=baselines.shard_files(data, "mri_volumes", s.mri_config, "train")) if i == 0 else {}
            r = {"config": s.mri_config, "unit": f"volume ({tag} source)", "frames_per_example": 1,
                 "baseline_name": "nib.load().get_fdata() (py_function)", "examples": spec["num"]}
            r["loader"] = self._read(f"mri_{tag}_loader", ReadJob("loader", "mri_volumes", s.mri_batch, s.mri_config,
                                                                 data_dir=data, **limit, **common))
            r["baseline"] = self._read(f"mri_{tag}_baseline", ReadJob(
                "mri_get_fdata", "mri_volumes", s.mri_batch, paths=inputs.mri_paths(root),
                labels=[names.index(x) for x in inputs.mri_labels(root)], shape=list(spec["shape"]), **common))
            if limit:
                r["limit"] = r["loader"].pop("limit")
            read[f"mri_volumes_{tag}"] = _ratios(r)
            if i == 0:  # every voxel is real here (sources at the grid): the mask can be left out
                for dtype in ("float32", "int16"):
                    read[f"mri_volumes_{tag}_{dtype}"] = self._dtype_entry(
                        f"mri_{tag}_{dtype}", read[f"mri_volumes_{tag}"], ReadJob(
                            "loader", "mri_volumes", s.mri_batch, s.mri_config, data_dir=data, output_dtype=dtype,
                            mask_dtype=None, **limit, **common))
        self._phase("reads", start)
        return read


    def _dtype_entry(self, tag: str, base: dict[str, Any], job: ReadJob) -> dict[str, Any]:
        """A read entry for the loader in another output mode, against `base`'s baseline (timed once, not repeated)."""
        r = {k: base[k] for k in ("config", "unit", "frames_per_example", "baseline_name", "examples")}
        r["loader"] = self._read(tag, job)
        r["loader_label"] = (f"vidvol.load(output_dtype={job.output_dtype!r}"
                             + (f", mask_dtype={job.mask_dtype!r}" if job.mask_dtype != "float32" else "") + ")")
        r["baseline_ref"] = base["baseline_name"]
        r["x_baseline"] = r["loader"]["examples_per_s"] / base["baseline"]["examples_per_s"]
        r["x_baseline_cpu"] = r["loader"]["cpu_examples_per_s"] / base["baseline"]["cpu_examples_per_s"]
        if "limit" in r["loader"]:
            r["limit"] = r["loader"].pop("limit")
            r["of_limit"], r["of_limit_cpu"] = r["limit"]["of_limit"], r["limit"]["of_limit_cpu"]
        return r


def raw_config(config: str) -> str:
    """The stored-raw twin of an hmdb51 config name (`split1_20x64x64` -> `split1_20x64x64_raw`)."""
    return f"{config}_raw"


def _examples_built(config_dir: str) -> int:
    """Examples of every split of a prepared config folder (its dataset_info.json shard lengths)."""
    infos = glob.glob(os.path.join(config_dir, "*", "dataset_info.json"))
    if not infos:
        raise FileNotFoundError(f"{config_dir}: no */dataset_info.json (expected a prepared config)")
    with open(infos[0], encoding="utf-8") as f:
        info = json.load(f)
    return sum(int(n) for split in info["splits"] for n in split.get("shardLengths", []))


def disk_cost(name: str, configs: dict[str, str], clips: int = HMDB51_CLIPS) -> dict[str, Any]:
    """Shard bytes per example of each prepared config (`{config: data_dir}`, every split), and for `clips` examples."""
    out = {}
    for config, data_dir in configs.items():
        folder = os.path.join(data_dir, name, config)
        files = glob.glob(os.path.join(folder, "*", f"{name}-*.tfrecord-*"))
        examples = _examples_built(folder)
        per_clip = sum(os.path.getsize(f) for f in files) / max(1, examples)
        out[config] = {"examples": examples, "shards": len(files), "bytes_per_clip": round(per_clip, 1),
                       "gib_for_all": round(per_clip * clips / GIB, 3)}
    return {"clips_for_all": clips, "configs": out}


def _fire_config_size(config: str) -> tuple[int, int]:
    """(height, width) of a fire_hrr config name such as 'full_161x540x960' or '161x135x240'."""
    parts = config.split("_")[-1 if config.startswith("full") else 0].split("x")
    if len(parts) != 3:
        raise ValueError(f"fire_hrr config {config!r}: expected '<T>x<H>x<W>' in its name")
    return int(parts[1]), int(parts[2])


def _median_build(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median rates and wall time of repeated builds, with every run's rate."""
    keys = ("examples_per_s", "e2e_examples_per_s", "write_s", "wall_s", "shards_in_flight", "cores_used",
            "other_cores_busy", "worker_peak_mib")
    return {
        "runs": [{k: r[k] for k in keys} for r in runs],
        "examples_per_s": statistics.median(r["examples_per_s"] for r in runs),
        "examples_per_s_runs": [r["examples_per_s"] for r in runs],
        "e2e_examples_per_s": statistics.median(r["e2e_examples_per_s"] for r in runs),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "cores_used": statistics.median(r["cores_used"] for r in runs),
        "other_cores_busy": statistics.median(r["other_cores_busy"] for r in runs),
        "shards_in_flight": statistics.median(r["shards_in_flight"] or 0.0 for r in runs),
        "write_s_runs": [r["write_s"] for r in runs],
        "worker_peak_mib": max(r["worker_peak_mib"] for r in runs),
    }


def _ratios(r: dict[str, Any]) -> dict[str, Any]:
    """Adds loader/baseline and loader/limit ratios (wall and CPU-normalized) to a read entry."""
    loader, base = r["loader"], r["baseline"]
    r["x_baseline"] = loader["examples_per_s"] / base["examples_per_s"]
    r["x_baseline_cpu"] = loader["cpu_examples_per_s"] / base["cpu_examples_per_s"]
    if "limit" in r:  # median of the per-run ratios, each run against the limit timed just before it
        r["of_limit"], r["of_limit_cpu"] = r["limit"]["of_limit"], r["limit"]["of_limit_cpu"]
    return r


def targets(read: dict[str, Any], built: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline promises and whether this run meets them."""
    rows = [
        report.target("hmdb51: vidvol.load vs OpenCV seek baseline", read["hmdb51"]["x_baseline"], 50,
                      cpu_value=read["hmdb51"]["x_baseline_cpu"]),
        report.target(f"hmdb51: vidvol.load (batch {read['hmdb51']['loader']['batch_size']}, unseeded) vs decode limit",
                      read["hmdb51"]["of_limit"], 0.8, unit="%",
                      cpu_value=read["hmdb51"]["of_limit_cpu"],
                      note="the loader also parses, shuffles, converts to float32 and batches; the limit only decodes"),
        report.target("fire_hrr: vidvol.load vs decode limit", read["fire_hrr"]["of_limit"], 0.8, unit="%",
                      cpu_value=read["fire_hrr"]["of_limit_cpu"],
                      note="a 161-frame window becomes float32 (1 GiB at 540x960): the cast and batch copies cost "
                           "memory bandwidth the limit does not pay"),
    ]
    if "hmdb51_uint8" in read:
        rows.append(report.target(
            "hmdb51: vidvol.load(output_dtype='uint8') vs decode limit", read["hmdb51_uint8"]["of_limit"], 0.8,
            unit="%", cpu_value=read["hmdb51_uint8"]["of_limit_cpu"],
            note="uint8 frames, normalized on the device (vidvol.layers.Dequantize): no float32 pass on the host"))
    rows += hmdb51_raw_targets(read)
    for key, r in read.items():
        if key.startswith("mri_volumes_") and key.endswith("_int16"):
            rows.append(report.target(
                f"{key[:-6]}: vidvol.load(output_dtype='int16', mask_dtype=None) vs get_fdata baseline",
                r["x_baseline"], 20, cpu_value=r["x_baseline_cpu"],
                note="int16 volumes as stored (4 MiB per 128^3 example), dequantized on the device; no mask (every "
                     "voxel is real when the sources are at least the grid)"))
        elif key.startswith("mri_volumes_") and key.endswith("_float32"):
            rows.append(report.target(
                f"{key[:-8]}: vidvol.load(output_dtype='float32', mask_dtype=None) vs volume limit", r["of_limit"], 0.8,
                unit="%", cpu_value=r["of_limit_cpu"],
                note="the limit: stored int16 bytes read from the page cache -> a new float32 volume (NumPy, every "
                     "core at once); the loader also checks each record's CRC32C, parses the label and batches"))
    for key, r in read.items():
        if key.startswith("mri_volumes_") and not key.endswith(("_int16", "_float32")):
            rows.append(report.target(
                f"{key}: vidvol.load vs get_fdata baseline", r["x_baseline"], 20, cpu_value=r["x_baseline_cpu"],
                note="the baseline's cost is gunzip + int16->float of the source; a source already at (or below) the "
                     "output grid is cheap to read that way, while the loader still reads the stored volume (4 MiB "
                     "int16 at 128^3) and writes float32 volume and mask (16 MiB) per example"))
    b = built["build_scaling"]
    quiet = b["quietest_pair"]
    contended = max(p["other_cores_busy"] for p in b["pairs"]) > CONTENDED_CORES
    rows.append(report.target(
        "build fire_hrr: 2 vs 1 Beam workers (writing phase)", b["speedup"], 1.7,
        note=f"end to end {b['e2e_speedup']:.2f}x"
             + (f"; in the quietest 1-then-2-worker pair (other processes kept {quiet['other_cores_busy']:.2f} cores "
                f"busy) {quiet['speedup']:.2f}x" if contended else "")
             + f". With 2 workers only {b['workers_2']['shards_in_flight']:.2f} shards are written at once on average "
               f"(1 worker: {b['workers_1']['shards_in_flight']:.2f}), and one worker alone keeps "
               f"{b['workers_1']['cores_used']:.2f} cores busy over its build"))
    for name, e in (built.get("build_limit") or {}).items():
        rows.append(report.target(
            f"build {name}: source frames/s per core vs tight-loop limit (2 workers, writing phase)", e["write_share"],
            0.7, unit="%",
            note=f"our example function alone reaches {e['example_fn_share']:.0%} of the limit, with TFDS encoding and "
                 f"serialization {e['serialized_share']:.0%}; end to end (start-up {e['startup_s']:.0f} s) "
                 f"{e['e2e_share']:.0%}"))
    nc = built.get("no_config")
    if nc:
        rows.append(report.target(
            "tfds build hmdb51 (no config) vs its default config alone", nc["ratio"], 2.0, op="<=", unit="x",
            note=f"{nc['no_config']['wall_s']:.1f} s vs {nc['default_config']['wall_s']:.1f} s (medians)"))
    mem = built["build_memory"]["results"]
    counts = sorted(mem, key=int)
    lo, hi = mem[counts[0]], mem[counts[-1]]
    rows.append(report.target(f"build fire_hrr: worker peak RSS growth {counts[0]} -> {counts[-1]} experiments",
                              hi["worker_peak_mib"] / max(lo["worker_peak_mib"], 1e-9) - 1, 0.10, op="<=", unit="%"))
    rows.append(report.target(f"build fire_hrr: driver peak RSS growth {counts[0]} -> {counts[-1]} experiments",
                              hi["driver_peak_mib"] / max(lo["driver_peak_mib"], 1e-9) - 1, 0.10, op="<=", unit="%"))
    rows.append(report.target("build fire_hrr: worst worker peak RSS",
                              max(r["worker_peak_mib"] for r in mem.values()) / 1024, 2.0, op="<=", unit="GiB"))
    return rows


def path_targets(paths: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Headline rows of the hmdb51 read paths: tfds.load vs limit and baseline, vidvol.load per batch and seed."""
    if not paths:
        return []
    rows, by_key = [], {(r["pipeline"], r["batch_size"], r["seed"]): r for r in paths["rows"]}
    for r in paths["rows"]:
        b = r["batch_size"]
        if r["pipeline"] == "tfds.load":
            rows.append(report.target(f"hmdb51: tfds.load (batch {b}) vs decode limit", r["of_limit"], 0.7, unit="%",
                                      cpu_value=r["of_limit_cpu"],
                                      note="TFDS parses each example in its own call and the user's map casts each clip"))
            rows.append(report.target(f"hmdb51: tfds.load (batch {b}) vs OpenCV seek baseline", r["x_baseline"], 60,
                                      cpu_value=r["x_baseline_cpu"]))
        elif not (r["seed"] is None and b == paths["main_batch"]):  # the main hmdb51 row (targets())
            seed = "unseeded" if r["seed"] is None else f"seed={r['seed']}"
            rows.append(report.target(f"hmdb51: vidvol.load (batch {b}, {seed}) vs decode limit", r["of_limit"], 0.8,
                                      unit="%", cpu_value=r["of_limit_cpu"]))
    for (pipeline, b, seed), r in by_key.items():
        plain = by_key.get((pipeline, b, None))
        if pipeline == "vidvol.load" and seed is not None and plain:
            rows.append(report.target(
                f"hmdb51: vidvol.load seed cost (batch {b}: seed={seed} vs unseeded, share of limit)",
                1 - r["of_limit"] / plain["of_limit"], 0.10, op="<=", unit="%",
                cpu_value=1 - r["of_limit_cpu"] / plain["of_limit_cpu"]))
    return rows


def hmdb51_raw_targets(read: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored-raw config's promises: past the JPEG decode limit, and far past the OpenCV baseline."""
    r = read.get("hmdb51_raw")
    if not r:
        return []
    disk = r["disk"]["configs"]
    raw, jpeg = disk[r["config"]], disk[r["limit_of"]]
    cost = (f"disk {raw['bytes_per_clip'] / 1024:.0f} KiB per clip vs {jpeg['bytes_per_clip'] / 1024:.0f} KiB as JPEG "
            f"({raw['gib_for_all']:.2f} vs {jpeg['gib_for_all']:.2f} GiB for all {r['disk']['clips_for_all']:,} HMDB51 clips)")
    return [
        report.target(f"hmdb51 raw ({r['config']}): vidvol.load vs JPEG decode limit", r["of_limit"], 1.5,
                      cpu_value=r["of_limit_cpu"],
                      note="no decode, but every clip is parsed, copied and written as float32 (1 MB per 20x64x64 "
                           "clip): memory bandwidth bounds it; " + cost),
        report.target(f"hmdb51 raw ({r['config']}): vidvol.load vs OpenCV seek baseline", r["x_baseline"], 100,
                      cpu_value=r["x_baseline_cpu"], note=cost),
    ]


def run(out: str, settings: Settings, *, inputs_dir: str | None = None, with_cluster: bool = True,
        with_random_access: bool = True) -> dict[str, Any]:
    """Runs every phase and returns the results document."""
    started = datetime.datetime.now().astimezone()
    t0 = time.monotonic()
    bench = Bench(out, settings, inputs_dir)
    results: dict[str, Any] = {
        "mode": settings.mode, "started": started.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(),
        "versions": versions(),
        "settings": {"runs": settings.runs, "build_runs": settings.build_runs, "min_seconds": settings.min_seconds,
                     "isolated": settings.isolate, "batch_sizes": {"hmdb51": settings.hmdb51_batch,
                                                                     "fire_hrr": settings.fire_batch,
                                                                     "mri_volumes": settings.mri_batch}},
    }
    results["inputs"] = bench.write_inputs()
    built = bench.build_all()
    results["build_limit"] = built["build_limit"] = bench.build_limit_all(built)
    results["no_config"] = built["no_config"]
    results["read"] = bench.read_all(built)
    results["hmdb51_paths"] = bench.hmdb51_paths(results["read"]["hmdb51"])
    lim = results["read"]["hmdb51"]["limit"]  # what the stored frames cost to decode: compare with real footage
    results["inputs"]["hmdb51"].update(stored_frame_kib=round(lim["mean_stored_frame_bytes"] / 1024, 2),
                                       decode_frames_per_s_per_core=round(lim["frames_per_s_one_core"]))
    if with_cluster:
        results["cluster"] = bench.cluster_all()
    if with_random_access:
        results["random_access"] = bench.random_access_all()
    results["build_scaling"] = built["build_scaling"]
    results["build_memory"] = built["build_memory"]
    results["builds_for_reads"] = built["reads"]
    results["targets"] = targets(results["read"], built) + path_targets(results.get("hmdb51_paths"))
    results["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["phases_s"] = bench.phases
    results["duration_s"] = round(time.monotonic() - t0, 1)
    results["method"] = METHOD
    results["machine"]["shared"] = other_cores_max(results) > CONTENDED_CORES
    results["notes"] = notes(results)
    return results


def other_cores_max(results: dict[str, Any]) -> float:
    """The most cores other processes kept busy during any timed read or scaling build (median over its runs)."""
    others = [p["other_cores_busy"] for r in results["read"].values() for k, p in r.items() if k in ("loader", "baseline")]
    others += [results["build_scaling"][f"workers_{w}"]["other_cores_busy"] for w in (1, 2)]
    others += [r["other_cores_busy"] for r in (results.get("hmdb51_paths") or {}).get("rows", [])]
    return max(others, default=0.0)


def notes(results: dict[str, Any]) -> list[str]:
    """Automatic remarks: machine load, inputs generated in this run."""
    out = []
    if results["mode"] == "quick":
        out.append("Quick mode: tiny inputs, one run, builds in this process with multi-threaded Beam and reads in "
                   "this process. It checks the plumbing; its numbers say nothing about speed or memory.")
    m = results["machine"]
    busiest = other_cores_max(results)
    if busiest > CONTENDED_CORES:
        out.append(f"Other processes kept up to {busiest:.2f} of the {m['cores']} cores busy during the timed "
                   "windows (columns `others`): those measurements had less than the whole machine, so their "
                   "wall-clock rates (and the 2-worker builds most) are understated; the cpu-normalized columns "
                   "are steadier.")
    else:
        out.append(f"Other processes kept at most {busiest:.2f} cores busy during the timed windows: "
                   "the machine was effectively this benchmark's (the load average counts the benchmark itself).")
    fresh = [k for k, v in results["inputs"].items() if v.get("generated_this_run")]
    if fresh:
        out.append(f"Inputs generated in this run ({results['phases_s'].get('inputs', 0):.0f} s): {', '.join(fresh)}; "
                   "later runs reuse them.")
    return out


def checkout_dir() -> str | None:
    """This folder when it is the `benchmarks/` of a source checkout (a `.git` beside it), else None.

    Only there do published results belong (they are committed); a copy of this folder anywhere else
    (an installed package, an unpacked archive) is never written into.
    """
    return HERE if os.path.exists(os.path.join(os.path.dirname(HERE), ".git")) else None


def publish(paths: dict[str, str], destination: str | None = None) -> list[str]:
    """Copies RESULTS.md, results.png and results.json into the checkout's benchmarks/ (the committed copy).

    Without a `destination`, only a source checkout's benchmarks/ folder is written (see
    `checkout_dir`); elsewhere nothing is copied and an empty list comes back.
    """
    destination = destination or checkout_dir()
    if destination is None:
        return []
    copied = []
    for path in paths.values():
        target_path = os.path.join(destination, os.path.basename(path))
        shutil.copyfile(path, target_path)
        copied.append(target_path)
    return copied


def _report_published(copied: Sequence[str]) -> None:
    """One line: where the results were published, or why they were not."""
    if copied:
        print(f"[bench] published {', '.join(copied)}", flush=True)
    else:
        print(f"[bench] not published: {HERE} is not in a source checkout (no .git beside it)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="output folder (inputs, datasets, logs, results)")
    parser.add_argument("--quick", action="store_true", help="tiny inputs, 1 run, in-process (CI smoke)")
    parser.add_argument("--inputs", default=None, help="where generated inputs live (default OUT/inputs, quick: "
                        "OUT/inputs_quick)")
    parser.add_argument("--runs", type=int, default=None, help="override the timed runs per read pipeline")
    parser.add_argument("--build-runs", type=int, default=None, help="override the builds per worker count")
    parser.add_argument("--isolate", action="store_true",
                        help="with --quick: still build with the tfds CLI and read in subprocesses (as a full run)")
    parser.add_argument("--report-only", action="store_true",
                        help="re-render RESULTS.md and results.png from OUT/results.json without measuring")
    parser.add_argument("--no-cluster", action="store_true",
                        help="leave out the Dask cluster section (cluster.py: dask builds, driver at 1M sources)")
    parser.add_argument("--no-random-access", action="store_true",
                        help="leave out the random-access section (random_access.py: ArrayRecord build, by-index reads, Grain)")
    parser.add_argument("--no-publish", action="store_true", help="do not copy the results into the checkout's benchmarks/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = QUICK if args.quick else FULL
    if args.runs:
        settings = dataclasses.replace(settings, runs=args.runs)
    if args.build_runs:
        settings = dataclasses.replace(settings, build_runs=args.build_runs)
    if args.isolate:
        settings = dataclasses.replace(settings, isolate=True)
    if args.report_only:
        with open(os.path.join(args.out, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        results["targets"] = targets(results["read"], results) + path_targets(results.get("hmdb51_paths"))
        results["machine"]["shared"] = other_cores_max(results) > CONTENDED_CORES
        results["notes"] = notes(results)
        paths = report.write_all(results, os.path.abspath(args.out))
        if results["mode"] == "full" and not args.no_publish:
            publish(paths)
        print(f"[bench] re-rendered {', '.join(paths.values())}", flush=True)
        return 0
    load = os.getloadavg()[0]
    print(f"[bench] {settings.mode} run into {os.path.abspath(args.out)}; load average {load:.2f} on "
          f"{len(os.sched_getaffinity(0))} cores", flush=True)
    results = run(args.out, settings, inputs_dir=args.inputs, with_cluster=not args.no_cluster,
                  with_random_access=not args.no_random_access)
    bad = report.finite_numbers(results)
    if bad:
        raise ValueError(f"non-finite numbers in the results: {bad[:10]}")
    paths = report.write_all(results, os.path.abspath(args.out))
    if settings.mode == "full" and not args.no_publish:
        _report_published(publish(paths))
    print(f"[bench] wrote {', '.join(paths.values())} in {results['duration_s'] / 60:.1f} min", flush=True)
    for t in results["targets"]:
        print(f"[bench] {'PASS' if t['pass'] else 'MISS'} {t['name']}: {t['value']:.3g} (target {t['op']} {t['target']:g})",
              flush=True)
    for t in results.get("random_access", {}).get("targets", []):
        print(f"[bench] random access: {'PASS' if t['pass'] else 'MISS'} {t['name']}: {t['value']:.3g} "
              f"(target {t['op']} {t['target']:g})", flush=True)
    for t in results.get("cluster", {}).get("targets", []):
        print(f"[bench] cluster: {'PASS' if t['pass'] else 'MISS'} {t['name']}: {t['value']:.3g} "
              f"(target {t['op']} {t['target']:g})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
