"""The headline's reads: every dataset via `vidvol.load` against its read-time baseline and its limit."""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any

from vidvol.testing import samples

from common import baselines, inputs, section
from common import read_job
from common.read_job import ReadJob
from common.suite import FIRE_WINDOW, HMDB51_CLIPS, HMDB51_FRAMES, fire_config_size, mri_augment

GIB = 2**30
READ_TIMEOUT_S = 3600.0  # one read job (a full run's longest takes a few minutes)

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
    "MRI augmentation row (`mri_volumes_<first source>_augment`): the same loader, float32 volume + mask, with "
    "`ReadSpec(augment=vidvol.VolumeAugment(...))` set as the MONAI peer's augmented pipeline (`suite.mri_augment`: "
    "patches of 3/4 of the grid's side, 96^3 of 128^3; flip on axis 0 and a quarter turn in axes (0, 1) with p=0.5; "
    "intensity scale and shift 0.1 on every volume); its cost is its share of the volume limit against the plain "
    "row's, both paired with the limit timed next to them.",
    "Every read pipeline repeats its epochs without pause (repeat before batching); a run is a fresh iterator, "
    "warm-up batches, then at least the timed seconds. `cpu-normalized` = examples per CPU-second of the reading "
    "process x cores: what it would reach with the machine to itself.",
]


def _read(ctx: section.Context, tag: str, job: ReadJob) -> dict[str, Any]:
    """Runs one read job (in its own process when isolating); returns its result."""
    print(f"[bench] read {tag} via {job.pipeline}", flush=True)
    result = read_job.run(job, ctx.path("jobs"), tag, isolate=ctx.settings.isolate, timeout=READ_TIMEOUT_S)
    print(f"[bench]   {result['examples_per_s']:.3g} examples/s (runs {result['examples_per_s_runs']}), "
          f"{result['cores_used']:.2f} cores busy (others {result['other_cores_busy']:.2f}), "
          f"peak RSS {result['peak_rss_mib']:.0f} MiB", flush=True)
    return result


def read_all(ctx: section.Context, built: dict[str, Any]) -> dict[str, Any]:
    """Times every dataset through the loader, its baseline and (video) the decode limit."""
    start = time.monotonic()
    s = ctx.settings
    common = dict(runs=s.runs, min_seconds=s.min_seconds)
    read: dict[str, Any] = {}

    hmdb_root = os.path.join(ctx.inputs_dir, "hmdb51")
    videos = inputs.hmdb51_split_videos(hmdb_root, 1, "train")
    classes = list(samples.HMDB51_CLASSES)
    data = ctx.path("data", "hmdb51")
    hmdb = dict(data_dir=data, frames_per_example=HMDB51_FRAMES, limit_max_frames=2000, **common,
                limit_files=baselines.shard_files(data, "hmdb51", s.hmdb51_config, "train"))
    r = {"config": s.hmdb51_config, "unit": "clip (20 frames)", "frames_per_example": HMDB51_FRAMES,
         "baseline_name": "OpenCV seek per frame (py_function)", "examples": len(videos)}
    r["loader"] = _read(ctx, "hmdb51_loader", ReadJob("loader", "hmdb51", s.hmdb51_batch, s.hmdb51_config,
                                                     float_ceiling=True, **hmdb))
    r["baseline"] = _read(ctx, "hmdb51_baseline", ReadJob(
        "hmdb51_seek", "hmdb51", s.hmdb51_batch, paths=[p for p, _ in videos],
        labels=[classes.index(c) for _, c in videos], frames_per_example=HMDB51_FRAMES, warmup_batches=1, **common))
    r["limit"] = r["loader"].pop("limit")
    read["hmdb51"] = _ratios(r)
    read["hmdb51_uint8"] = _dtype_entry(ctx, "hmdb51_uint8", read["hmdb51"], ReadJob(
        "loader", "hmdb51", s.hmdb51_batch, s.hmdb51_config, output_dtype="uint8", **hmdb))
    read["hmdb51_raw"] = read_hmdb51_raw(ctx, read["hmdb51"], common)

    rows = inputs.fire_frame_rows(os.path.join(built["fire_read_manual"], "labels.csv"))
    height, width = s.fire["height"], s.fire["width"]
    cfg_h, cfg_w = fire_config_size(s.fire_config)
    r = {"config": s.fire_config, "unit": f"window ({FIRE_WINDOW} frames)", "frames_per_example": FIRE_WINDOW,
         "baseline_name": "per-frame get_img (numpy_function)", "examples": len(rows) // FIRE_WINDOW or 1}
    fire_common = dict(common, min_seconds=1.5 * s.min_seconds, warmup_batches=1)  # ~1 s per window
    r["loader"] = _read(ctx, "fire_hrr_loader", ReadJob(
        "loader", "fire_hrr", s.fire_batch, s.fire_config, data_dir=built["fire_read_dir"],
        frames_per_example=FIRE_WINDOW, limit_max_frames=FIRE_WINDOW, **fire_common,
        limit_files=baselines.shard_files(built["fire_read_dir"], "fire_hrr", s.fire_config, "train")))
    r["baseline"] = _read(ctx, "fire_hrr_baseline", ReadJob(
        "fire_get_img", "fire_hrr", s.fire_batch, paths=[p for _, p, _ in rows], labels=[h for _, _, h in rows],
        shape=[height, width], window=min(FIRE_WINDOW, len(rows)), frames_per_example=FIRE_WINDOW, **fire_common))
    if (height, width) != (cfg_h, cfg_w):
        r["note"] = f"sources {height}x{width}, stored {cfg_h}x{cfg_w}"
    r["limit"] = r["loader"].pop("limit")
    read["fire_hrr"] = _ratios(r)

    for i, (tag, spec) in enumerate(s.mri):
        root = os.path.join(ctx.inputs_dir, f"mri_{tag}")
        names = sorted(set(inputs.mri_labels(root)))
        data = ctx.path("data", f"mri_{tag}")
        # The first source size is seed 004's case (sources already at the grid): limit and int16 rows.
        limit = dict(volume_limit_files=baselines.shard_files(data, "mri_volumes", s.mri_config, "train")) if i == 0 else {}
        r = {"config": s.mri_config, "unit": f"volume ({tag} source)", "frames_per_example": 1,
             "baseline_name": "nib.load().get_fdata() (py_function)", "examples": spec["num"]}
        r["loader"] = _read(ctx, f"mri_{tag}_loader", ReadJob("loader", "mri_volumes", s.mri_batch, s.mri_config,
                                                             data_dir=data, **limit, **common))
        r["baseline"] = _read(ctx, f"mri_{tag}_baseline", ReadJob(
            "mri_get_fdata", "mri_volumes", s.mri_batch, paths=inputs.mri_paths(root),
            labels=[names.index(x) for x in inputs.mri_labels(root)], shape=list(spec["shape"]), **common))
        if limit:
            r["limit"] = r["loader"].pop("limit")
        read[f"mri_volumes_{tag}"] = _ratios(r)
        if i == 0:  # every voxel is real here (sources at the grid): the mask can be left out
            for dtype in ("float32", "int16"):
                read[f"mri_volumes_{tag}_{dtype}"] = _dtype_entry(
                    ctx, f"mri_{tag}_{dtype}", read[f"mri_volumes_{tag}"], ReadJob(
                        "loader", "mri_volumes", s.mri_batch, s.mri_config, data_dir=data, output_dtype=dtype,
                        mask_dtype=None, **limit, **common))
            # The default output (float32 + mask) with the MONAI peer's augmentation: 3/4-side patches (96^3 of 128^3).
            augment = mri_augment(int(spec["shape"][0]))
            entry = _dtype_entry(ctx, f"mri_{tag}_augment", read[f"mri_volumes_{tag}"], ReadJob(
                "loader", "mri_volumes", s.mri_batch, s.mri_config, data_dir=data, augment=augment, **limit, **common))
            entry["loader_label"] = (f"vidvol.load(augment: {augment['patch_size'][0]}^3 patches, flip, rot90, "
                                     "scale, shift)")
            read[f"mri_volumes_{tag}_augment"] = entry
    ctx.phase("reads", start)
    return read


def read_hmdb51_raw(ctx: section.Context, jpeg: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """The stored-raw hmdb51 config via `vidvol.load`, against the JPEG config's decode limit and the same baseline run."""
    s = ctx.settings
    data, jpeg_data = ctx.path("data", "hmdb51_raw"), ctx.path("data", "hmdb51")
    config = f"{s.hmdb51_config}_raw"  # the stored-raw twin of the hmdb51 config
    r = {"config": config, "unit": "clip (20 frames)", "frames_per_example": HMDB51_FRAMES,
         "baseline_name": "OpenCV seek per frame (the hmdb51 row's run)", "examples": jpeg["examples"],
         "limit_of": s.hmdb51_config}
    r["loader"] = _read(ctx, "hmdb51_raw_loader", ReadJob(
        "loader", "hmdb51", s.hmdb51_batch, config, data_dir=data, frames_per_example=HMDB51_FRAMES,
        limit_files=baselines.shard_files(jpeg_data, "hmdb51", s.hmdb51_config, "train"), limit_max_frames=2000,
        **common))
    r["baseline"] = jpeg["baseline"]
    r["limit"] = r["loader"].pop("limit")
    r["disk"] = disk_cost("hmdb51", {s.hmdb51_config: jpeg_data, config: data})
    return _ratios(r)


def _dtype_entry(ctx: section.Context, tag: str, base: dict[str, Any], job: ReadJob) -> dict[str, Any]:
    """A read entry for the loader in another output mode, against `base`'s baseline (timed once, not repeated)."""
    r = {k: base[k] for k in ("config", "unit", "frames_per_example", "baseline_name", "examples")}
    r["loader"] = _read(ctx, tag, job)
    r["loader_label"] = (f"vidvol.load(output_dtype={job.output_dtype!r}"
                         + (f", mask_dtype={job.mask_dtype!r}" if job.mask_dtype != "float32" else "") + ")")
    r["baseline_ref"] = base["baseline_name"]
    if "limit" in r["loader"]:
        r["limit"] = r["loader"].pop("limit")
    return _ratios(r, base["baseline"])


def hmdb51_paths(ctx: section.Context, hmdb51: dict[str, Any]) -> dict[str, Any]:
    """hmdb51 through plain `tfds.load` and seeded/unseeded `vidvol.load` at each batch size, vs the limit."""
    start = time.monotonic()
    s = ctx.settings
    data = ctx.path("data", "hmdb51")
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
                result = _read(ctx, tag, ReadJob(pipeline, "hmdb51", batch, s.hmdb51_config, seed=seed,
                                                 float_ceiling=pipeline == "loader", **common))
            lim = result.pop("limit")
            ceiling = result.get("ceiling")
            rows.append({**result, "pipeline": "tfds.load" if pipeline == "tfds_load" else "vidvol.load",
                         "batch_size": batch, "seed": seed, "limit": lim,
                         **({"of_ceiling": ceiling["of_limit"], "of_ceiling_cpu": ceiling["of_limit_cpu"]}
                            if ceiling else {}),
                         "of_limit": lim["of_limit"], "of_limit_cpu": lim["of_limit_cpu"],
                         "x_baseline": result["examples_per_s"] / base["examples_per_s"],
                         "x_baseline_cpu": result["cpu_examples_per_s"] / base["cpu_examples_per_s"]})
    ctx.phase("hmdb51_paths", start)
    return {"config": s.hmdb51_config, "main_batch": s.hmdb51_batch, "baseline_examples_per_s": base["examples_per_s"],
            "rows": rows}


def disk_cost(name: str, configs: dict[str, str], clips: int = HMDB51_CLIPS) -> dict[str, Any]:
    """Shard bytes per example of each prepared config (`{config: data_dir}`, every split), and for `clips` examples."""
    out = {}
    for config, data_dir in configs.items():
        folder = os.path.join(data_dir, name, config)
        files = glob.glob(os.path.join(folder, "*", f"{name}-*.tfrecord-*"))
        infos = glob.glob(os.path.join(folder, "*", "dataset_info.json"))
        if not infos:
            raise FileNotFoundError(f"{folder}: no */dataset_info.json (expected a prepared config)")
        with open(infos[0], encoding="utf-8") as f:  # examples of every split: its shard lengths
            examples = sum(int(n) for split in json.load(f)["splits"] for n in split.get("shardLengths", []))
        per_clip = sum(os.path.getsize(f) for f in files) / max(1, examples)
        out[config] = {"examples": examples, "shards": len(files), "bytes_per_clip": round(per_clip, 1),
                       "gib_for_all": round(per_clip * clips / GIB, 3)}
    return {"clips_for_all": clips, "configs": out}


def _ratios(r: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Adds loader/baseline (its own baseline run's, or `base`) and loader/limit ratios (wall and CPU-normalized) to a
    read entry."""
    loader, base = r["loader"], base or r["baseline"]
    r["x_baseline"] = loader["examples_per_s"] / base["examples_per_s"]
    r["x_baseline_cpu"] = loader["cpu_examples_per_s"] / base["cpu_examples_per_s"]
    if "limit" in r:  # median of the per-run ratios, each run against the limit timed just before it
        r["of_limit"], r["of_limit_cpu"] = r["limit"]["of_limit"], r["limit"]["of_limit_cpu"]
    return r


def targets(read: dict[str, Any]) -> list[dict[str, Any]]:
    """The read promises: each dataset against its baseline and its limit, in each output mode."""
    rows = [
        section.target("hmdb51: vidvol.load vs OpenCV seek baseline", read["hmdb51"]["x_baseline"], 50,
                       cpu_value=read["hmdb51"]["x_baseline_cpu"]),
        section.target(
            f"hmdb51: vidvol.load (batch {read['hmdb51']['loader']['batch_size']}, unseeded) vs decode limit",
            read["hmdb51"]["of_limit"], 0.8, unit="%",
            cpu_value=read["hmdb51"]["of_limit_cpu"],
            note="the loader also parses, shuffles, converts to float32 and batches; the limit only decodes"),
        section.target("fire_hrr: vidvol.load vs decode limit", read["fire_hrr"]["of_limit"], 0.8, unit="%",
                       cpu_value=read["fire_hrr"]["of_limit_cpu"],
                       note="a 161-frame window becomes float32 (1 GiB at 540x960): the cast and batch copies cost "
                            "memory bandwidth the limit does not pay"),
    ]
    if "hmdb51_uint8" in read:
        rows.append(section.target(
            "hmdb51: vidvol.load(output_dtype='uint8') vs decode limit", read["hmdb51_uint8"]["of_limit"], 0.8,
            unit="%", cpu_value=read["hmdb51_uint8"]["of_limit_cpu"],
            note="uint8 frames, normalized on the device (vidvol.layers.Dequantize): no float32 pass on the host"))
    rows += hmdb51_raw_targets(read)
    for key, r in read.items():
        if key.startswith("mri_volumes_") and key.endswith("_int16"):
            rows.append(section.target(
                f"{key[:-6]}: vidvol.load(output_dtype='int16', mask_dtype=None) vs get_fdata baseline",
                r["x_baseline"], 20, cpu_value=r["x_baseline_cpu"],
                note="int16 volumes as stored (4 MiB per 128^3 example), dequantized on the device; no mask (every "
                     "voxel is real when the sources are at least the grid)"))
        elif key.startswith("mri_volumes_") and key.endswith("_float32"):
            rows.append(section.target(
                f"{key[:-8]}: vidvol.load(output_dtype='float32', mask_dtype=None) vs volume limit", r["of_limit"], 0.8,
                unit="%", cpu_value=r["of_limit_cpu"],
                note="the limit: stored int16 bytes read from the page cache -> a new float32 volume (NumPy, every "
                     "core at once); the loader also checks each record's CRC32C, parses the label and batches"))
        elif key.startswith("mri_volumes_") and key.endswith("_augment") and "of_limit" in r:
            plain = read[key[:-8]]
            rows.append(section.target(
                f"{key[:-8]}: augmentation cost (vidvol.load float32 + mask, {r['loader']['augment']['patch_size'][0]}^3 "
                "patches + flip + rot90 + scale/shift vs whole volumes, share of the volume limit)",
                1 - r["of_limit"] / plain["of_limit"], 0.10, op="<=", unit="%",
                cpu_value=1 - r["of_limit_cpu"] / plain["of_limit_cpu"],
                note="both rows paired with the volume limit timed next to them; the augmented read reads the patch's "
                     "rows only, and writes a smaller (patch) volume and mask"))
    for key, r in read.items():
        if key.startswith("mri_volumes_") and not key.endswith(("_int16", "_float32", "_augment")):
            rows.append(section.target(
                f"{key}: vidvol.load vs get_fdata baseline", r["x_baseline"], 20, cpu_value=r["x_baseline_cpu"],
                note="the baseline's cost is gunzip + int16->float of the source; a source already at (or below) the "
                     "output grid is cheap to read that way, while the loader still reads the stored volume (4 MiB "
                     "int16 at 128^3) and writes float32 volume and mask (16 MiB) per example"))
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
        section.target(f"hmdb51 raw ({r['config']}): vidvol.load vs JPEG decode limit", r["of_limit"], 1.5,
                       cpu_value=r["of_limit_cpu"],
                       note="no decode, but every clip is parsed, copied and written as float32 (1 MB per 20x64x64 "
                            "clip): memory bandwidth bounds it; " + cost),
        section.target(f"hmdb51 raw ({r['config']}): vidvol.load vs OpenCV seek baseline", r["x_baseline"], 100,
                       cpu_value=r["x_baseline_cpu"], note=cost),
    ]


def path_targets(paths: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Headline rows of the hmdb51 read paths: tfds.load vs limit and baseline, vidvol.load per batch and seed."""
    if not paths:
        return []
    rows, by_key = [], {(r["pipeline"], r["batch_size"], r["seed"]): r for r in paths["rows"]}
    for r in paths["rows"]:
        b = r["batch_size"]
        if r["pipeline"] == "tfds.load":
            rows.append(section.target(
                f"hmdb51: tfds.load (batch {b}) vs decode limit", r["of_limit"], 0.7, unit="%",
                cpu_value=r["of_limit_cpu"],
                note="TFDS parses each example in its own call and the user's map casts each clip"))
            rows.append(section.target(f"hmdb51: tfds.load (batch {b}) vs OpenCV seek baseline", r["x_baseline"], 60,
                                       cpu_value=r["x_baseline_cpu"]))
        elif not (r["seed"] is None and b == paths["main_batch"]):  # the main hmdb51 row (targets())
            seed = "unseeded" if r["seed"] is None else f"seed={r['seed']}"
            rows.append(section.target(f"hmdb51: vidvol.load (batch {b}, {seed}) vs decode limit", r["of_limit"], 0.8,
                                       unit="%", cpu_value=r["of_limit_cpu"]))
    for r in paths["rows"]:
        if "of_ceiling" in r:
            seed = "unseeded" if r["seed"] is None else f"seed={r['seed']}"
            rows.append(section.target(
                f"hmdb51: vidvol.load (batch {r['batch_size']}, {seed}) vs float32 ceiling", r["of_ceiling"], 0.9,
                unit="%", cpu_value=r["of_ceiling_cpu"],
                note="the ceiling: the decode limit's loop plus each frame written as float32 / 255 into a ring of a "
                     "batch's frames, every core at once, timed right before and after each run"))
    for (pipeline, b, seed), r in by_key.items():
        plain = by_key.get((pipeline, b, None))
        if pipeline == "vidvol.load" and seed is not None and plain:
            rows.append(section.target(
                f"hmdb51: vidvol.load seed cost (batch {b}: seed={seed} vs unseeded, share of limit)",
                1 - r["of_limit"] / plain["of_limit"], 0.10, op="<=", unit="%",
                cpu_value=1 - r["of_limit_cpu"] / plain["of_limit_cpu"]))
    return rows

