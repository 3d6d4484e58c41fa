"""vidvol beside the tools users know (OpenCV, decord, PyAV, TorchCodec, TFDS, MONAI, TorchIO)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from peers import report as peers_report
from common import section
from peers.jobs import VIDEO_PEERS, VOLUME_PEERS

CORR_MIN = 0.95  # a peer's example 0 against vidvol's stored frames (volume) of the same file
KEEP = ("examples_per_s", "examples_per_s_runs", "cpu_examples_per_s", "cores_used", "other_cores_busy", "peak_rss_mib",
        "batch_size", "seed")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeersSettings(section.Settings):
    """Sizes of one mode (`runs`: timed runs per row, medians reported)."""

    min_seconds: float = 2.0
    video_batches: tuple[int, ...] = (8, 32)  # the headline's hmdb51 read-path batches (its seed=0 rows)
    raw_batch: int = 32  # the headline's hmdb51 batch (its stored-raw row)
    mri_batch: int = 4
    mri_size: int = 128  # output grid side (the first MRI source size of the run)
    num_workers: int = 2
    warmup_batches: int = 2
    rounds: int = 8  # a peer's timed run spans at least rounds x num_workers batches
    create_venv: bool = True  # full: make OUT/peers_venv when it is missing; quick: never
    isolate: bool = True  # vidvol-side common/read_job.py jobs in their own process (quick: in this one)
    job_timeout_s: float = 1200.0


METHOD = [
    "Same files as vidvol's rows: the hmdb51 split-1 train clips and the mri_volumes train split of the first MRI source "
    "size (the files vidvol's train split holds). Video: 20 frames at vidvol's builder's indices (centre of 20 equal "
    "segments) decoded by the peer, then the same resize as vidvol's build (cv2.resize INTER_AREA to 64x64) and / 255 to "
    "float32, so the peers differ only in how they get the frames out of the file. Decoder threads: each library's "
    "default.",
    "Read-time peers: a map-style dataset decoding one file per item under torch.utils.data.DataLoader(num_workers=2) "
    "(MONAI: monai.data.DataLoader; TorchIO: SubjectsLoader), shuffled by a seeded RandomSampler that runs over the files "
    "again and again (batches flow across epochs, as vidvol.load(repeat=True) does). Each row is one process of the peers "
    "venv: first batch (checked), warm-up batches, then `runs` fresh iterators of at least min_seconds and `rounds` (8) "
    "batches per worker each (each worker makes whole batches, which arrive in rounds: a short window would miscount a "
    "round); "
    "rates are medians; cpu-normalized = examples per CPU-second of the process and its workers x cores. vidvol's rows "
    "were timed earlier in the run (the headline): compare the `others` columns for the load each row met.",
    "TFDS stock video: a GeneratorBasedBuilder storing the same frames as tfds.features.Video(encoding_format='jpeg') "
    "(ucf101's layout), read by the headline's `tfds_load` job (plain tfds.load, shuffle_files, autocache off, map "
    "cast/255, batch, prefetch). It decodes at build time like vidvol, so it is not a read-time peer.",
    "vidvol's augmented row: vidvol.load float32 + mask with ReadSpec(augment=VolumeAugment(...)) set as MONAI's "
    "augmented pipeline below (patch_size 96^3, flip_prob 0.5 on axis 0, rotate_prob 0.5 in axes (0, 1), scale_prob 1 "
    "with factors 0.1, shift_prob 1 with offsets 0.1; the shift where the mask is 1), same batch; the augmented peer rows "
    "are compared with it, the plain ones with the plain float32 + mask row.",
    "MONAI: LoadImaged -> EnsureChannelFirstd -> Orientationd(RAS) -> ResizeWithPadOrCropd(128^3); PersistentDataset's "
    "disk cache is filled before timing (decoded once, like a build), CacheDataset holds every volume in memory. "
    "Augmented: + RandSpatialCropd(96^3), RandFlipd(p=0.5), RandRotate90d(p=0.5), RandScaleIntensityd(0.1), "
    "RandShiftIntensityd(0.1) (after the caches). TorchIO: ToCanonical -> CropOrPad(128) -> To(float32); augmented: + "
    "RandomFlip(axis 0, p=0.5) + RandomGamma(log_gamma +-0.1), the nearest stock set without affine (TorchIO has no "
    "random crop outside its patch Queue, nor intensity scale/shift).",
    "vidvol rows are the headline's own measurements on the same builds (common/read_job.py jobs), or the same ReadJob at the peers' "
    "MRI batch; the augmented video row is the video_augment section's random resized crop + flip back to 64x64 (the "
    "peers' output size), against the peers' plain decode (which augmenting would only slow down). Ratios: vidvol.load "
    "examples/s over the peer's, at the same batch size; `best read-time video peer` is the fastest decoder whose first "
    "batch passed the check.",
]


def _keep(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in KEEP if k in result}


def vidvol_rows(headline: dict[str, Any], settings: PeersSettings) -> dict[str, Any]:
    """vidvol's video rows as the headline measured them: float32 seed=0 per batch size, the stored-raw config, and
    (from the video_augment section) float32 with read-time augmentation (random resized crop + flip)."""
    out: dict[str, Any] = {"video": []}
    for r in (headline.get("hmdb51_paths") or {}).get("rows", []):
        if r["pipeline"] == "vidvol.load" and r["seed"] == 0 and r["batch_size"] in settings.video_batches:
            out["video"].append({"pipeline": "vidvol.load", "config": headline["hmdb51_paths"]["config"], **_keep(r)})
    raw = headline.get("read", {}).get("hmdb51_raw")
    if raw:
        out["raw"] = {"pipeline": "vidvol.load", "config": raw["config"], **_keep(raw["loader"])}
    from sections import video_augment

    augmented = video_augment.vidvol_row(headline.get("video_augment"))
    if augmented:
        out["augmented"] = augmented
    return out


def mri_rows(work: str, settings: PeersSettings, headline: dict[str, Any], mri_key: str, mri_config: str,
             mri_data: str) -> dict[str, Any]:
    """vidvol's float32 + mask, int16 and augmented (float32 + mask, the MONAI peer's set: `suite.mri_augment`) rows at
    the peers' batch: the headline's, or the same ReadJob run here."""
    from common.suite import mri_augment

    read = headline.get("read", {})
    rows = {}
    augment = mri_augment(settings.mri_size)
    for mode, key in (("float32", mri_key), ("int16", f"{mri_key}_int16"), ("augment", f"{mri_key}_augment")):
        mine = read.get(key, {}).get("loader")
        if mine and mine["batch_size"] == settings.mri_batch and mine.get("augment") == (
                augment if mode == "augment" else None):
            result = mine
        else:
            from common.read_job import ReadJob

            modes = ({"output_dtype": "int16", "mask_dtype": None} if mode == "int16" else
                     {"augment": augment} if mode == "augment" else {})
            result = read_job(work, f"vidvol_mri_{mode}", ReadJob(
                "loader", "mri_volumes", settings.mri_batch, mri_config, data_dir=mri_data, runs=settings.runs,
                min_seconds=settings.min_seconds, **modes), settings)
        rows[mode] = {"pipeline": "vidvol.load", "config": mri_config, "output_dtype": "int16" if mode == "int16" else
                      "float32", "mask": mode != "int16", **({"augment": augment} if mode == "augment" else {}),
                      **_keep(result)}
    return rows


def read_job(work: str, tag: str, job: Any, settings: PeersSettings) -> dict[str, Any]:
    """A `read_job.ReadJob` in its own process (`common/read_job.py`), or in this one when not isolating."""
    from common import read_job

    print(f"[peers] {tag} ({job.pipeline}, batch {job.batch_size})", flush=True)
    return read_job.run(job, os.path.join(work, "jobs"), tag, isolate=settings.isolate, timeout=settings.job_timeout_s)


def peer_rows(doc: dict[str, Any], kind: str, work: str, python: str, settings: PeersSettings, peers: Sequence[str],
              paths: Sequence[str], labels: Sequence[int], batch: int, **extra: Any) -> None:
    """Each peer pipeline timed by `peers/jobs.py` in the peers venv: its row into doc[kind], or into doc['failed']."""
    from common import jobs

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers", "jobs.py")
    for peer in peers:
        tag = f"{peer}_b{batch}" + ("_aug" if extra.get("augment") else "")
        print(f"[peers] {tag}", flush=True)
        job = dict(peer=peer, paths=list(paths), labels=list(labels), batch_size=batch, work=os.path.join(work, tag),
                   num_workers=settings.num_workers, runs=settings.runs, min_seconds=settings.min_seconds,
                   warmup_batches=settings.warmup_batches, rounds=settings.rounds, **extra)
        try:
            r = jobs.json_job(script, job, os.path.join(work, "jobs"), tag, settings.job_timeout_s, python=python)[0]
        except RuntimeError as e:  # one peer that cannot run does not hide the others
            print(f"[peers]   {tag} failed: {e}", flush=True)
            doc.setdefault("failed", []).append({"pipeline": peer, "batch_size": batch, "augment": bool(
                extra.get("augment")), "error": str(e)[-2000:], "log": os.path.join(work, "jobs", f"{tag}.log")})
            continue
        print(f"[peers]   {r['examples_per_s']:.3g} examples/s (runs {r['examples_per_s_runs']}), {r['cores_used']:.2f} "
              f"cores (others {r['other_cores_busy']:.2f}), first batch {r['first_batch']['shape']}", flush=True)
        doc[kind].append({"pipeline": peer, **r})


def correlation(a: Any, b: Any) -> float:
    """Pearson correlation of two equally shaped arrays (0 where either is constant)."""
    import numpy as np

    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if x.size != y.size or x.std() == 0 or y.std() == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def stored_examples(data_dir: str, name: str, key: str, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """{key value: example} of the train examples of a vidvol build whose `key` feature is in `wanted` (None: all)."""
    import tensorflow_datasets as tfds
    import vidvol  # noqa: F401  (registers the datasets)

    out = {}
    ds = tfds.builder(name, data_dir=data_dir).as_dataset(split="train", shuffle_files=False)
    for ex in tfds.as_numpy(ds):
        k = ex[key].decode()
        if wanted is None or k in wanted:
            out[k] = ex
            if wanted is not None and len(out) == len(wanted):
                break
    return out


def check_row(row: dict[str, Any], expect_shape: Sequence[int], stored: dict[str, Any], key_of, array_of, *,
              video: bool) -> None:
    """Adds `check` to a peer row: its first batch's shape/dtype and its example 0 against vidvol's stored one."""
    import numpy as np

    first = row["first_batch"]
    check: dict[str, Any] = {"shape_ok": list(first["shape"]) == list(expect_shape),
                             "dtype_ok": first["dtype"] == "float32", "file": key_of(first["path"])}
    ex = stored.get(check["file"])
    if row.get("augment"):
        check["frames"] = "not compared (augmented)"
        ok = True
    elif ex is None:
        check["frames"] = "no stored example for that file"
        ok = False
    else:
        sample, got = np.load(first["sample"]), array_of(ex)
        corr = correlation(sample if video else sample.reshape(got.shape), got)
        check["corr"] = round(corr, 4)
        ok = corr >= CORR_MIN
        if video:  # the control: a clip against vidvol's next frames (off by one index) must correlate less
            shifted = correlation(sample[1:], got[:-1]) if len(sample) > 1 else 0.0
            check["shifted_corr"] = round(shifted, 4)
            ok = bool(ok and corr > shifted)
    check["ok"] = bool(ok and check["shape_ok"] and check["dtype_ok"])
    row["check"] = check


class Peers(section.Section):
    """vidvol.load beside the read-time tools users know (and TFDS's stock video), on the same files and batches."""

    key = "peers"
    label = "peers"
    summary = "peers section (sections/peers.py: decord, PyAV, TorchCodec, OpenCV, TFDS Video, MONAI, TorchIO; its own venv)"
    FULL = PeersSettings(mode="full", runs=3)
    QUICK = PeersSettings(mode="quick", runs=1, min_seconds=0.3, video_batches=(2,), raw_batch=2, mri_size=32,
                          warmup_batches=1, rounds=2, create_venv=False, isolate=False, job_timeout_s=300.0)
    method = METHOD

    def measure(self, work: str, settings: PeersSettings, *, hmdb51_root: str, hmdb51_data: str, hmdb51_config: str,
                mri_root: str, mri_data: str, mri_config: str, mri_key: str, venv: str,
                headline: dict[str, Any]) -> dict[str, Any]:
        from common import inputs
        from peers import env as peers_env
        from vidvol.testing import samples

        classes = list(samples.HMDB51_CLASSES)
        videos = inputs.hmdb51_split_videos(hmdb51_root, 1, "train")
        paths, labels = [p for p, _ in videos], [classes.index(c) for _, c in videos]
        doc: dict[str, Any] = {"mode": settings.mode, "cores": len(os.sched_getaffinity(0)), "venv": venv,
                               "settings": dataclasses.asdict(settings), "hmdb51_config": hmdb51_config,
                               "mri": {"key": mri_key, "config": mri_config, "size": settings.mri_size},
                               "clips": len(paths), "vidvol": vidvol_rows(headline, settings), "video": [], "volume": []}
        try:
            python = peers_env.ensure(venv, create=settings.create_venv, log_path=os.path.join(work, "venv_install.log"))
        except peers_env.PeersUnavailable as e:
            python, doc["skipped"] = None, f"read-time peers not measured: {e}"
            print(f"[peers] {doc['skipped']}", flush=True)
        hmdb51_name = f"hmdb51/{hmdb51_config}"
        doc["video"] += self.tfds_rows(work, settings, hmdb51_root)
        if python:
            for batch in settings.video_batches:
                peer_rows(doc, "video", work, python, settings, VIDEO_PEERS, paths, labels, batch, size=64, num_frames=20)
        ids = {os.path.basename(r["first_batch"]["path"]) for r in doc["video"]}
        stored = stored_examples(hmdb51_data, hmdb51_name, "video_id", ids)
        for r in doc["video"]:
            check_row(r, [r["batch_size"], 20, 64, 64, 3], stored, os.path.basename, lambda ex: ex["video"], video=True)
        if python:
            volumes = stored_examples(mri_data, f"mri_volumes/{mri_config}", "path")
            files = sorted(volumes)
            vpaths = [os.path.join(mri_root, f) for f in files]
            vlabels = [int(volumes[f]["label"]) for f in files]
            doc["volumes"] = len(files)
            doc["vidvol"].update(mri_rows(work, settings, headline, mri_key, mri_config, mri_data))
            crop = 3 * settings.mri_size // 4
            for augment in (False, True):
                peer_rows(doc, "volume", work, python, settings, VOLUME_PEERS, vpaths, vlabels, settings.mri_batch,
                          size=settings.mri_size, augment=augment, crop=crop)
            for r in doc["volume"]:
                side = crop if r["augment"] and r["pipeline"] != "torchio" else settings.mri_size
                check_row(r, [settings.mri_batch, 1, side, side, side], volumes,
                          lambda p: os.path.relpath(p, mri_root), lambda ex: ex["volume"], video=False)
        doc["versions"] = versions(doc)
        return doc

    def tfds_rows(self, work: str, settings: PeersSettings, hmdb51_root: str) -> list[dict[str, Any]]:
        """TFDS's stock `tfds.features.Video` of the same frames, built afresh, read with plain tfds.load per batch."""
        import shutil
        from peers import tfds as peers_tfds
        from common.read_job import ReadJob

        data_dir = os.path.join(work, "tfds_video")
        shutil.rmtree(data_dir, ignore_errors=True)  # the inputs may have changed since the last run
        built = peers_tfds.build(hmdb51_root, data_dir)
        video_id, clip = peers_tfds.first_clip(data_dir)
        sample = os.path.join(work, "tfds_video_first.npy")
        import numpy as np

        np.save(sample, clip.astype(np.float32) / 255.0)
        rows = []
        for batch in settings.video_batches:
            r = read_job(work, f"tfds_video_b{batch}", ReadJob(
                "tfds_load", peers_tfds.NAME, batch, peers_tfds.CONFIG, data_dir=data_dir, frames_per_example=20,
                runs=settings.runs, min_seconds=settings.min_seconds), settings)
            rows.append({"pipeline": "tfds_video", **_keep(r), "build_s": built["build_s"],
                         "first_batch": {"shape": [batch, *clip.shape], "dtype": "float32", "path": video_id,
                                         "sample": sample}})
        return rows

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        return peers_report.summarize(doc)

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        return peers_report.targets(doc)

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        return peers_report.markdown(doc)

    def run_settings(self, ctx: section.Context) -> PeersSettings:
        s = ctx.settings
        batches = tuple(s.hmdb51_path_batches)[:1] if s.quick else tuple(s.hmdb51_path_batches)  # quick: one, cheap
        return dataclasses.replace(self.mode_settings(s.quick), runs=s.runs, min_seconds=s.min_seconds,
                                   video_batches=batches, raw_batch=s.hmdb51_batch, mri_size=int(s.mri[0][1]["shape"][0]))

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        s = ctx.settings
        tag = s.mri[0][0]
        return {"hmdb51_root": os.path.join(ctx.inputs_dir, "hmdb51"), "hmdb51_data": ctx.path("data", "hmdb51"),
                "hmdb51_config": s.hmdb51_config, "mri_root": os.path.join(ctx.inputs_dir, f"mri_{tag}"),
                "mri_data": ctx.path("data", f"mri_{tag}"), "mri_config": s.mri_config, "mri_key": f"mri_volumes_{tag}",
                "venv": ctx.path("peers_venv"),
                "headline": {k: ctx.results.get(k) for k in ("read", "hmdb51_paths", "video_augment")}}

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--peers-venv", default=None, help="the peers venv (default OUT/peers_venv); made there "
                            "in full mode when missing, never in quick mode")

    def standalone_inputs(self, out: str, settings: PeersSettings, inputs_dir: str, args: Any) -> dict[str, Any]:
        from common import suite

        path = os.path.join(out, "results.json")
        if not os.path.isfile(path):
            raise SystemExit(f"{path}: not found; run `python benchmarks/run.py --out {out}"
                             f"{' --quick' if settings.quick else ''}` first (its inputs, builds and vidvol rows)")
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        if results["mode"] != settings.mode:
            raise SystemExit(f"{path} is a {results['mode']} run; this is {settings.mode} mode")
        ctx = section.Context(out, suite.QUICK if settings.quick else suite.FULL, inputs_dir)
        ctx.results = results
        found = self.run_inputs(ctx)
        if args.peers_venv:
            found["venv"] = os.path.abspath(args.peers_venv)
        return found


def versions(doc: dict[str, Any]) -> dict[str, Any]:
    """Exact versions: the peers venv's libraries (from its jobs), each video peer's FFmpeg, TFDS and TF here."""
    import tensorflow
    import tensorflow_datasets

    peers = [r for r in doc["video"] + doc["volume"] if "versions" in r]
    out: dict[str, Any] = {"tensorflow-datasets": tensorflow_datasets.__version__, "tensorflow": tensorflow.__version__}
    if peers:
        out["peers_venv"] = peers[0]["versions"]
        out["ffmpeg"] = {r["pipeline"]: r["ffmpeg"] for r in peers if r.get("ffmpeg")}
    return out


SECTION = Peers()

if __name__ == "__main__":
    sys.exit(SECTION.main())
