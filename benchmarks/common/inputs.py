"""Realistic benchmark inputs, written offline with the real encoders and reused between runs."""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import json
import logging
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import cv2
import nibabel as nib
import numpy as np
from scipy import ndimage

from vidvol.testing import samples

logger = logging.getLogger(__name__)

STAMP = "inputs.json"
FIRE_COLUMNS = ("experiment", "frame", "hrr", "time")
HMDB51_FPS = 30.0


Job = tuple[Callable[..., Any], dict[str, Any]]


@dataclasses.dataclass
class InputPlan:
    """One input set: where, with which parameters, the file-writing jobs, and what to do after them."""

    root: str
    spec: dict[str, Any]
    jobs: list[Job]
    finish: Callable[[list[Any]], None] = lambda results: None  # gets the jobs' results, in order

    @property
    def cached(self) -> bool:
        return os.path.isfile(os.path.join(self.root, STAMP)) and _source_spec(self.root) == self.spec


def write_inputs(plans: Sequence[InputPlan], *, workers: int = 1) -> list[bool]:
    """Runs the jobs of every plan not already on disk in one pool; returns, per plan, whether it was written."""
    pending = [p for p in plans if not p.cached]
    for plan in pending:
        shutil.rmtree(plan.root, ignore_errors=True)
        os.makedirs(plan.root)
    jobs = [(i, job) for i, plan in enumerate(pending) for job in plan.jobs]
    if workers <= 1 or len(jobs) <= 1:  # fn(**kwargs) per job, here or in `workers` spawned processes; in order
        results = [_call(job) for _, job in jobs]
    else:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold TF threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = list(pool.map(_call, [job for _, job in jobs]))
    for i, plan in enumerate(pending):
        plan.finish([r for (j, _), r in zip(jobs, results) if j == i])
        with open(os.path.join(plan.root, STAMP), "w", encoding="utf-8") as f:
            json.dump(plan.spec, f, indent=1)
        logger.info("wrote %s inputs under %s", plan.spec.get("kind"), plan.root)
    return [any(p is q for q in pending) for p in plans]


def _call(fn_job: tuple[Callable[..., Any], dict[str, Any]]) -> Any:
    """Unpacks one (fn, kwargs) job for a process pool."""
    fn, job = fn_job
    return fn(**job)


HMDB51_CONTENT = "footage"


def hmdb51_plan(root: str, *, num_classes: int, videos_per_class: int, num_frames: tuple[int, int],
                height: int = 240, width: int = 320) -> InputPlan:
    """Plan of an extracted HMDB51 layout of XVID clips (one job per class)."""
    spec = {"kind": "hmdb51", "content": HMDB51_CONTENT, "num_classes": num_classes, "videos_per_class": videos_per_class,
            "num_frames": list(num_frames), "height": height, "width": width, "fps": HMDB51_FPS}
    jobs = [(samples.write_hmdb51_layout, dict(root=root, classes=[name], videos_per_class=videos_per_class,
                                               num_frames=tuple(num_frames), height=height, width=width, seed=c,
                                               content=HMDB51_CONTENT))  # one class's clips, seeded by its index
            for c, name in enumerate(samples.HMDB51_CLASSES[:num_classes])]
    return InputPlan(root, spec, jobs)


def describe_hmdb51(root: str) -> dict[str, Any]:
    """Count, mean size and duration range of the clips (.avi files) of an HMDB51 input set."""
    sizes, durations = [], []
    for folder, _, files in os.walk(os.path.join(root, samples.HMDB51_ORG_DIR)):
        for name in files:
            if name.endswith(".avi"):
                path = os.path.join(folder, name)
                sizes.append(os.path.getsize(path))
                cap = cv2.VideoCapture(path)
                durations.append(cap.get(cv2.CAP_PROP_FRAME_COUNT) / max(cap.get(cv2.CAP_PROP_FPS), 1e-6))
                cap.release()
    if not sizes:
        raise FileNotFoundError(f"{root}: no .avi videos found")
    return {"videos": len(sizes), "mean_video_kib": round(float(np.mean(sizes)) / 1024, 1),
            "duration_s": [round(min(durations), 2), round(max(durations), 2)]}


def hmdb51_split_videos(root: str, split_number: int, subset: str) -> list[tuple[str, str]]:
    """(video path, class name) of one official-style split subset ("train" or "test"), sorted."""
    wanted = {"train": "1", "test": "2"}[subset]
    splits_dir = os.path.join(root, samples.HMDB51_SPLITS_DIR)
    out = []
    for name in sorted(os.listdir(splits_dir)):
        suffix = f"_test_split{split_number}.txt"
        if not name.endswith(suffix):
            continue
        class_name = name[: -len(suffix)]
        with open(os.path.join(splits_dir, name), encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != 2:
                    raise ValueError(f"{name}:{line_number}: expected '<video>.avi <id>', got {line!r}")
                if parts[1] == wanted:
                    out.append((os.path.join(root, samples.HMDB51_ORG_DIR, class_name, parts[0]), class_name))
    return sorted(out)


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int], sigma: float) -> np.ndarray:
    """Gaussian-blurred white noise scaled to [0, 1] (turbulence, textures)."""
    field = cv2.GaussianBlur(rng.normal(0.0, 1.0, shape).astype(np.float32), (0, 0), sigma)
    return (field - field.min()) / max(float(field.max() - field.min()), 1e-6)


class FireScene:
    """Precomputed textures of one experiment; `frame(i, size)` renders frame i cheaply."""

    def __init__(self, height: int, width: int, seed: int):
        rng = np.random.default_rng(seed)
        self.height, self.width = height, width
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        phase = rng.uniform(0, 2 * np.pi, 3)
        room = np.stack([45 + 25 * np.sin(x / width * 3 + phase[0]) + 25 * y / height,
                         40 + 18 * np.cos(y / height * 2 + phase[1]),
                         35 + 14 * np.sin((x + y) / (width + height) * 4 + phase[2])], axis=-1)
        room += 40 * (_smooth_noise(rng, (height, width), 2.0)[..., None] - 0.5)
        floor = int(height * 0.82)
        room[floor:] += 25  # a floor with an edge, a wall corner, a burner tray
        room[:, int(width * 0.12): int(width * 0.12) + 3] -= 20
        cv2.rectangle(room, (int(width * 0.38), floor - 12), (int(width * 0.62), floor + 6), (70.0, 70.0, 75.0), -1)
        self.room = room.astype(np.float32)
        self.room_u8 = np.clip(self.room, 0, 255).astype(np.uint8)
        self.turbulence = _smooth_noise(rng, (2 * height, width), max(2.0, height / 90))
        sensor = rng.normal(0.0, 4.0, (height + 32, width + 32, 3))
        self.noise_up = np.clip(np.rint(sensor), 0, 255).astype(np.uint8)  # sensor noise, split by sign
        self.noise_down = np.clip(np.rint(-sensor), 0, 255).astype(np.uint8)

    def frame(self, index: int, size: float) -> np.ndarray:
        """RGB uint8 frame `index` with a flame (and smoke) of relative size `size` in [0, 1]."""
        h, w = self.height, self.width
        cx, cy = w / 2 + 0.06 * w * np.sin(index / 9.0), h * 0.8
        rx, ry = (0.05 + 0.2 * size) * w, (0.1 + 0.55 * size) * h
        x0, x1 = max(0, int(cx - 1.4 * rx)), min(w, int(cx + 1.4 * rx) + 1)
        y0, y1 = max(0, int(cy - 1.4 * ry)), h
        off = (index * max(1, h // 70)) % h  # turbulence rises with time
        turb = self.turbulence[h - off + y0: h - off + y1, x0:x1]
        xs = (np.arange(x0, x1, dtype=np.float32) - cx) / rx
        ys = (np.arange(y0, y1, dtype=np.float32) - cy) / ry
        below = (ys > 0)[:, None]
        r2 = xs[None, :] ** 2 + (ys ** 2)[:, None] * (1.0 + 0.6 * below)
        flame = np.clip((1.15 - r2) * (0.35 + turb) * 1.6, 0.0, 1.0)
        box = self.room[y0:y1, x0:x1].copy()
        box[..., 0] += 230 * flame
        box[..., 1] += 170 * flame ** 1.6
        box[..., 2] += 70 * flame ** 3
        box += (np.clip(0.6 - r2 / 3, 0, 1) * ~below * 40 * size)[..., None]  # smoke above the flame
        img = self.room_u8.copy()
        img[y0:y1, x0:x1] = np.clip(box, 0, 255).astype(np.uint8)
        oy, ox = (index * 13) % 32, (index * 5) % 32
        img = cv2.add(img, self.noise_up[oy: oy + h, ox: ox + w])
        return cv2.subtract(img, self.noise_down[oy: oy + h, ox: ox + w])


def _write_fire_experiment(root: str, experiment: str, index: int, frames: int, height: int, width: int,
                           quality: int, fps: float) -> list[list[Any]]:
    """Writes one experiment's JPEG frames; returns its labels.csv rows."""
    scene = FireScene(height, width, seed=1000 + index)
    times = np.arange(frames) / fps
    curve = samples.hrr_curve(times, peak_kw=300.0 + 40.0 * index, peak_time_s=max(times[-1], 1.0) * 0.55)
    rows = []
    folder = os.path.join(root, "frames", experiment)
    os.makedirs(folder, exist_ok=True)
    for i in range(frames):
        rel = f"frames/{experiment}/frame_{i:04d}.jpg"
        rgb = scene.frame(i, size=float(curve[i] / curve.max()))
        path = os.path.join(root, *rel.split("/"))
        if not cv2.imwrite(path, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]):
            raise samples.SampleWriteError(f"{path}: cv2.imwrite failed to write a JPEG")
        rows.append([experiment, rel, round(float(curve[i]), 3), round(float(times[i]), 6)])
    return rows


def fire_plan(root: str, *, experiments: int, frames: int, height: int = 540, width: int = 960,
              quality: int = 95, fps: float = 2.0) -> InputPlan:
    """Plan of fire_hrr's frames layout: JPEG frames (one job per experiment), then labels.csv."""
    spec = {"kind": "fire_hrr", "generator": 2, "experiments": experiments, "frames": frames, "height": height, "width": width,
            "quality": quality, "fps": fps}
    jobs = [(_write_fire_experiment, dict(root=root, experiment=f"exp_{e:03d}", index=e, frames=frames,
                                          height=height, width=width, quality=quality, fps=fps))
            for e in range(experiments)]

    return InputPlan(root, spec, jobs, lambda results: _write_labels(root, FIRE_COLUMNS, (
        row for chunk in results for row in chunk)))


def _write_labels(root: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with open(os.path.join(root, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _source_spec(root: str) -> dict[str, Any]:
    with open(os.path.join(root, STAMP), encoding="utf-8") as f:
        return json.load(f)


def _link_hmdb51(source: str, root: str, times: int) -> None:
    """Hard links of every clip of `source`'s HMDB51 layout, `times` copies each (`NAME_rK.avi`), with the split lines."""
    videos, splits = os.path.join(source, samples.HMDB51_ORG_DIR), os.path.join(source, samples.HMDB51_SPLITS_DIR)
    os.makedirs(os.path.join(root, samples.HMDB51_SPLITS_DIR), exist_ok=True)
    for class_name in sorted(os.listdir(videos)):
        os.makedirs(os.path.join(root, samples.HMDB51_ORG_DIR, class_name), exist_ok=True)
        for name in sorted(os.listdir(os.path.join(videos, class_name))):
            for k in range(times):
                _link(os.path.join(videos, class_name, name),
                      os.path.join(root, samples.HMDB51_ORG_DIR, class_name, f"{name[:-4]}_r{k}.avi"))
    for split_file in sorted(os.listdir(splits)):
        with open(os.path.join(splits, split_file), encoding="utf-8") as f:
            lines = [line.split() for line in f if line.strip()]
        with open(os.path.join(root, samples.HMDB51_SPLITS_DIR, split_file), "w", encoding="utf-8") as f:
            f.writelines(f"{name[:-4]}_r{k}.avi {split_id} \n" for name, split_id in lines for k in range(times))


def hmdb51_replicated_plan(root: str, source: str, times: int) -> InputPlan:
    """`source`'s HMDB51 clips, each hard-linked `times` times under new names (a larger build, decoded for real,
    without writing `times` as many files); `source` must be written first."""
    spec = {"kind": "hmdb51", "replicated_from": _source_spec(source), "times": times}
    return InputPlan(root, spec, [(_link_hmdb51, dict(source=source, root=root, times=times))])


def _link_fire(source: str, root: str, experiments: int) -> list[list[Any]]:
    """`experiments` experiments whose frames are hard links of `source`'s, in turn; their labels.csv rows."""
    rows: dict[str, list[list[Any]]] = {}
    with open(os.path.join(source, "labels.csv"), newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader)
        for row in reader:
            rows.setdefault(row[0], []).append(row)
    names, out = sorted(rows), []
    for e in range(experiments):
        experiment = f"exp_{e:03d}"
        os.makedirs(os.path.join(root, "frames", experiment))
        for _, rel, hrr, t in rows[names[e % len(names)]]:
            new = f"frames/{experiment}/{rel.rsplit('/', 1)[1]}"
            _link(os.path.join(source, *rel.split("/")), os.path.join(root, *new.split("/")))
            out.append([experiment, new, hrr, t])
    return out


def fire_replicated_plan(root: str, source: str, experiments: int) -> InputPlan:
    """`experiments` fire_hrr experiments made of hard links of `source`'s frames (its experiments in turn)."""
    spec = {"kind": "fire_hrr", "replicated_from": _source_spec(source), "experiments": experiments}
    return InputPlan(root, spec, [(_link_fire, dict(source=source, root=root, experiments=experiments))],
                     lambda results: _write_labels(root, FIRE_COLUMNS, results[0]))


def describe_fire(root: str) -> dict[str, Any]:
    """Frame count and mean JPEG size of a fire_hrr input set."""
    rows = fire_frame_rows(os.path.join(root, "labels.csv"))
    sizes = [os.path.getsize(path) for _, path, _ in rows[:200]]
    return {"frames_total": len(rows), "mean_jpeg_kib": round(float(np.mean(sizes)) / 1024, 1)}


def fire_frame_rows(labels_csv: str) -> list[tuple[str, str, float]]:
    """(experiment, absolute frame path, hrr) per labels.csv row, in file order."""
    root = os.path.dirname(os.path.abspath(labels_csv))
    out = []
    with open(labels_csv, newline="", encoding="utf-8") as f:
        for line_number, row in enumerate(csv.DictReader(f), 2):
            try:
                out.append((row["experiment"], os.path.join(root, row["frame"]), float(row["hrr"])))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{labels_csv}:{line_number}: expected experiment,frame,hrr, got {row!r}") from e
    return out


def subset_labels(labels: str, manual_dir: str, count: int) -> int:
    """Writes manual_dir/labels.csv with the first `count` experiments of `labels` (absolute frame paths)."""
    root = os.path.dirname(os.path.abspath(labels))
    os.makedirs(manual_dir, exist_ok=True)
    kept: list[str] = []
    rows = 0
    with open(labels, newline="", encoding="utf-8") as src, \
            open(os.path.join(manual_dir, "labels.csv"), "w", newline="", encoding="utf-8") as dst:
        reader, writer = csv.DictReader(src), None
        for row in reader:
            if row["experiment"] not in kept:
                if len(kept) == count:
                    continue
                kept.append(row["experiment"])
            row["frame"] = os.path.join(root, row["frame"])
            if writer is None:
                writer = csv.DictWriter(dst, fieldnames=reader.fieldnames)
                writer.writeheader()
            writer.writerow(row)
            rows += 1
    if len(kept) < count:
        raise ValueError(f"{labels}: asked for {count} experiments, found {len(kept)}")
    return rows


def repeat_experiments(labels: str, manual_dir: str, repeat: int) -> int:
    """Writes manual_dir/labels.csv listing every experiment of `labels` `repeat` times (same frames, new names)."""
    os.makedirs(manual_dir, exist_ok=True)
    with open(labels, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows, fields = list(reader), reader.fieldnames
    with open(os.path.join(manual_dir, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for j in range(repeat):
            for row in rows:
                writer.writerow({**row, "experiment": f"{row['experiment']}_r{j}" if repeat > 1 else row["experiment"]})
    return len(rows) * repeat


def _smooth_field(shape: Sequence[int], rng: np.random.Generator, grid: int, amplitude: float) -> np.ndarray:
    """Low-frequency random field: a `grid`^3 normal lattice linearly upsampled to `shape`."""
    small = rng.normal(0.0, amplitude, size=(grid, grid, grid)).astype(np.float32)
    return ndimage.zoom(small, [n / grid for n in shape], order=1)


def head_phantom(shape: Sequence[int], *, seed: int) -> np.ndarray:
    """Float32 noise-free head-like phantom in scanner-like intensities (0 to ~850)."""
    rng = np.random.default_rng(seed)
    axes = [np.linspace(-1.0, 1.0, n, dtype=np.float32) for n in shape]
    x, y, z = np.meshgrid(*axes, indexing="ij", sparse=True)
    radii = rng.uniform(0.7, 0.8, 3)
    r = np.sqrt((x / radii[0]) ** 2 + (y / (radii[1] + 0.06)) ** 2 + (z / radii[2]) ** 2)
    r = r + _smooth_field(shape, rng, 6, 0.04)
    vol = 650.0 * ((r < 0.99) & (r >= 0.94)) + 120.0 * ((r < 0.94) & (r >= 0.88)) + 260.0 * ((r < 0.88) & (r >= 0.84))
    brain = r < 0.84
    white = brain & (_smooth_field(shape, rng, 20, 1.0) + 2.2 * (0.84 - r) > 0.9)
    vol = vol + np.where(white, 780.0, 0.0) + np.where(brain & ~white, 560.0, 0.0)
    ventricles = (x / 0.12) ** 2 + (y / 0.25) ** 2 + ((z - 0.1) / 0.15) ** 2 < 1.0
    vol = np.where(ventricles, 240.0, vol).astype(np.float32)
    vol *= 1.0 + _smooth_field(shape, rng, 4, 0.06)  # coil bias field
    return ndimage.gaussian_filter(vol, 0.7)


def mri_volume(shape: Sequence[int], *, seed: int, noise_sigma: float = 5.0) -> np.ndarray:
    """Int16 scan-like volume: the phantom drawn at half resolution, upsampled, with Rician noise."""
    rng = np.random.default_rng([seed, 1])
    half = [max(8, n // 2) for n in shape]
    clean = ndimage.zoom(head_phantom(half, seed=seed), [n / h for n, h in zip(shape, half)], order=1)
    real = clean + rng.normal(0.0, noise_sigma, clean.shape).astype(np.float32)
    imag = rng.normal(0.0, noise_sigma, clean.shape).astype(np.float32)
    return np.clip(np.rint(np.sqrt(real * real + imag * imag)), 0, 32767).astype(np.int16)


def _write_mri(path: str, shape: Sequence[int], spacing: Sequence[float], seed: int) -> None:
    """Writes one int16 .nii.gz (RAS, slope 1)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    affine = np.diag([*map(float, spacing), 1.0])
    affine[:3, 3] = -0.5 * (np.asarray(shape) - 1) * np.asarray(spacing, np.float64)
    image = nib.Nifti1Image(mri_volume(shape, seed=seed), affine)
    image.set_data_dtype(np.int16)
    image.header.set_xyzt_units("mm", "sec")
    nib.save(image, path)


def mri_plan(root: str, *, num: int, shape: Sequence[int], spacing: Sequence[float] = (1.0, 1.0, 1.2)) -> InputPlan:
    """Plan of `num` int16 .nii.gz scans (one job each) and labels.csv (path,label,subject)."""
    spec = {"kind": "mri_volumes", "num": num, "shape": list(shape), "spacing": list(spacing)}
    rels = [f"volumes/sub-{i + 1:03d}.nii.gz" for i in range(num)]
    jobs = [(_write_mri, dict(path=os.path.join(root, rel), shape=tuple(shape), spacing=tuple(spacing), seed=i))
            for i, rel in enumerate(rels)]
    return InputPlan(root, spec, jobs, lambda results: _write_labels(root, ["path", "label", "subject"], (
        [rel, "patient" if i % 2 else "control", f"sub-{i + 1:03d}"] for i, rel in enumerate(rels))))


def describe_mri(root: str) -> dict[str, Any]:
    """Mean file size and gzip compression ratio (raw int16 bytes / .nii.gz bytes) of an MRI input set."""
    paths = mri_paths(root)
    stored = sum(os.path.getsize(p) for p in paths)
    raw = sum(int(np.prod(nib.load(p).shape)) * 2 for p in paths)
    return {"mean_file_mib": round(stored / len(paths) / 2**20, 2), "gzip_ratio": round(raw / stored, 2)}


def mri_paths(root: str, column: str = "path") -> list[str]:
    """Absolute paths (or another column) of the volumes listed in root/labels.csv, in file order."""
    with open(os.path.join(root, "labels.csv"), newline="", encoding="utf-8") as f:
        return [os.path.join(root, row[column]) if column == "path" else row[column] for row in csv.DictReader(f)]


def mri_labels(root: str) -> list[str]:
    """Label of each volume listed in root/labels.csv, in file order."""
    return mri_paths(root, "label")
