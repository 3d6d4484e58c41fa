"""Peak RSS of an mri_volumes build against the size of its source scan, with a header bomb beside it."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import shutil
import sys
import time
from typing import Any

import numpy as np

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import measure, report, section

MIB = 2**20
GIB = 2**30
BOMB_SHAPE = (20000, 20000, 20000)  # int16: 16 TB claimed by a 1.4 KB file
BOMB_BYTES = 1376  # 348-byte header, 4-byte extension flag, 1024 zero bytes
CONFIG = "128"  # mri_volumes' default config


@dataclasses.dataclass(frozen=True, kw_only=True)
class VolumeMemorySettings(section.Settings):
    sizes_mib: tuple[int, ...] = (64, 256, 768, 1536)  # what each source inflates to; the largest carries the target
    max_tree_gib: float = 3.0  # the largest source's build, header bomb included
    interval: float = 0.1  # RSS polling period, seconds
    timeout_s: float = 1800.0  # per build
    isolate: bool = True  # each build a `tfds build` subprocess; quick: in this process (plumbing, not memory)


def source_shape(nbytes: int) -> tuple[int, int, int]:
    """An (s, s, 3s/4) int16 shape of about `nbytes` (1024x1024x768 for 1.5 GiB)."""
    side = (nbytes / 2 / 0.75) ** (1 / 3)
    s = max(8, int(round(side / 4)) * 4)
    return (s, s, max(4, int(round(0.75 * s / 4)) * 4))


def _header(shape, spacing=(1.0, 1.0, 1.0)):
    """A NIfTI-1 single-file header for int16 `shape` at `spacing`, centred on the origin (nibabel)."""
    import nibabel as nib

    affine = np.diag([*map(float, spacing), 1.0])
    affine[:3, 3] = -0.5 * (np.asarray(shape) - 1) * np.asarray(spacing, np.float64)
    header = nib.Nifti1Header()
    header.set_data_shape(shape)
    header.set_data_dtype(np.int16)
    header.set_qform(affine, code="scanner")
    header.set_sform(affine, code="scanner")
    header.set_xyzt_units("mm", "sec")
    header.set_data_offset(352)
    return header


def write_source(path: str, shape: tuple[int, int, int]) -> int:
    """Writes an int16 .nii.gz of `shape` plane by plane (F order); returns its file size."""
    nx, ny, nz = shape
    i = np.arange(nx, dtype=np.float32)[:, None]
    j = np.arange(ny, dtype=np.float32)[None, :]
    radius = 0.42 * np.asarray(shape, np.float32)
    centre = (np.asarray(shape, np.float32) - 1) / 2
    pattern = ((np.arange(nx)[:, None] // 32) + (np.arange(ny)[None, :] // 32)).astype(np.int16)
    tmp = path + ".part"
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(_header(shape).binaryblock + b"\0" * 4)
        for k in range(nz):
            r = ((i - centre[0]) / radius[0]) ** 2 + ((j - centre[1]) / radius[1]) ** 2 + ((k - centre[2]) / radius[2]) ** 2
            plane = np.where(r <= 1.0, 200 + 50 * ((pattern + k // 32) % 4), 0).astype(np.int16)
            f.write(plane.T.tobytes())  # F order: i fastest
    os.replace(tmp, path)
    return os.path.getsize(path)


def write_inputs(root: str, sizes_mib: tuple[int, ...]) -> dict[int, dict[str, Any]]:
    """One manual_dir per size under root (source + bomb; sources reused when their stamp matches)."""
    os.makedirs(root, exist_ok=True)
    bomb = os.path.join(root, "header_bomb.nii")
    with open(bomb, "wb") as f:  # a .nii whose header claims BOMB_SHAPE int16 voxels, in BOMB_BYTES bytes
        f.write(_header(BOMB_SHAPE).binaryblock + b"\0" * (BOMB_BYTES - 348))
    out = {}
    for size in sizes_mib:
        shape = source_shape(size * MIB)
        source = os.path.join(root, f"source_{size}mib.nii.gz")
        stamp = source + ".json"
        spec = {"shape": list(shape), "version": 1}
        fresh = False
        if not (os.path.isfile(source) and os.path.isfile(stamp) and json.load(open(stamp, encoding="utf-8")) == spec):
            start = time.monotonic()
            write_source(source, shape)
            with open(stamp, "w", encoding="utf-8") as f:
                json.dump(spec, f)
            fresh = True
            print(f"[volume_memory] wrote {source} {shape} in {time.monotonic() - start:.0f} s", flush=True)
        manual = os.path.join(root, f"manual_{size}mib")
        shutil.rmtree(manual, ignore_errors=True)
        os.makedirs(os.path.join(manual, "volumes"))
        os.symlink(source, os.path.join(manual, "volumes", "source.nii.gz"))
        os.symlink(bomb, os.path.join(manual, "volumes", "header_bomb.nii"))
        with open(os.path.join(manual, "labels.csv"), "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([["path", "label", "subject", "split"], ["volumes/source.nii.gz", "scan", "sub-1",
                                     "train"], ["volumes/header_bomb.nii", "bomb", "sub-2", "train"]])
        out[size] = {"manual_dir": manual, "shape": list(shape), "inflated_bytes": int(np.prod(shape)) * 2 + 352,
                     "file_bytes": os.path.getsize(source), "bomb_file_bytes": os.path.getsize(bomb),
                     "generated_this_run": fresh}
    return out


def _record(monitor, data_dir: str, exit_code: int, wall: float, error: str) -> dict[str, Any]:
    """A build's peaks (whole tree, driver, worker), examples and whole-input skips; its data_dir is removed."""
    peak = lambda kind: round(max(monitor.peaks_of(kind), default=0) / MIB, 1)
    record: dict[str, Any] = {
        "exit_code": exit_code, "wall_s": round(wall, 1), "tree_peak_mib": round(monitor.total_peak / MIB, 1),
        "driver_peak_mib": peak("driver"), "worker_peak_mib": peak("worker"),
        # Short-lived processes of the tree (shells, forks while Beam starts its worker) count in the tree's sum.
        "other_peak_mib": peak("other"),
        "processes": len(monitor.peaks), "polls": monitor.samples, "examples": 0, "skipped": [],
    }
    reports = [os.path.join(root, "skip_report.json") for root, _, names in os.walk(data_dir) if "skip_report.json" in names]
    if exit_code == 0 and reports:
        with open(reports[0], encoding="utf-8") as f:
            skip_report = json.load(f)
        record["examples"] = sum(s["examples"] for s in skip_report["splits"].values())
        record["skipped"] = [{"source": s["source"], "reason": s["reason"]} for s in skip_report["skipped"]
                             if not s.get("example")]
    else:
        record["error"] = error
    shutil.rmtree(data_dir, ignore_errors=True)
    return record


def build(manual_dir: str, data_dir: str, log_path: str, *, interval: float, timeout: float) -> dict[str, Any]:
    """`tfds build mri_volumes/128` in a subprocess (one Beam worker process) under a process-tree RSS sampler."""
    from common import jobs

    shutil.rmtree(data_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", f"mri_volumes/{CONFIG}",
           "--imports", "vidvol", "--manual_dir", manual_dir, "--data_dir", data_dir,
           "--beam_pipeline_options=direct_num_workers=1,direct_running_mode=multi_processing"]
    start = time.monotonic()
    returncode, _, monitor = jobs.run_command(cmd, log_path, timeout, interval=interval)
    record = _record(monitor, data_dir, returncode, time.monotonic() - start, jobs.tail(log_path, 1500))
    record["log"] = log_path
    return record


def build_here(manual_dir: str, data_dir: str, *, interval: float) -> dict[str, Any]:
    """The same build in this process (Beam in memory), under a sampler of this process: quick mode's plumbing."""
    from common import build_job

    shutil.rmtree(data_dir, ignore_errors=True)
    start, exit_code, error = time.monotonic(), 0, ""
    with measure.TreeSampler(os.getpid(), interval) as monitor:
        try:
            build_job.prepare(f"mri_volumes/{CONFIG}", manual_dir, data_dir)
        except Exception as e:  # a dead build is this measurement's result
            exit_code, error = 1, f"{type(e).__name__}: {e}"[-1500:]
    return _record(monitor, data_dir, exit_code, time.monotonic() - start, error)


class VolumeMemory(section.Section):
    """Build memory against MRI source size: the worker holds what the example needs, not what a header claims."""

    key = "volume_memory"
    label = "volume memory"
    summary = "MRI build peak RSS against source size, with a header bomb (sections/volume_memory.py)"
    FULL = VolumeMemorySettings(mode="full", runs=1)
    QUICK = VolumeMemorySettings(mode="quick", runs=1, sizes_mib=(1, 4), isolate=False)
    method = [
        "Per source size: one int16 .nii.gz scan inflating to that size (header by nibabel, voxels gzip-streamed) and "
        "a 1.4 KB .nii whose header claims 20000^3 int16, built together by `tfds build mri_volumes/128` (128^3 "
        "centre crop) in a subprocess with one Beam worker process; the RSS (VmRSS) of the whole process tree (driver "
        "+ worker) sampled every 0.1 s (`measure.TreeSampler`).",
    ]

    def measure(self, work: str, settings: VolumeMemorySettings, *, inputs_dir: str) -> dict[str, Any]:
        sources = write_inputs(os.path.join(inputs_dir, "volume_memory"), settings.sizes_mib)
        rows = []
        for size in settings.sizes_mib:
            src = sources[size]
            print(f"[volume_memory] building {size} MiB source {tuple(src['shape'])} + header bomb", flush=True)
            data_dir = os.path.join(work, f"data_{size}mib")
            if settings.isolate:
                record = build(src["manual_dir"], data_dir, os.path.join(work, f"build_{size}mib.log"),
                               interval=settings.interval, timeout=settings.timeout_s)
            else:
                record = build_here(src["manual_dir"], data_dir, interval=settings.interval)
            rows.append({"size_mib": size, **{k: v for k, v in src.items() if k != "manual_dir"}, **record})
        return {"mode": settings.mode, "config": CONFIG, "max_tree_gib": settings.max_tree_gib,
                "isolated": settings.isolate, "rows": rows}

    def summarize(self, doc: dict[str, Any]) -> dict[str, Any]:
        for row in doc["rows"]:
            row["accounted"] = row["examples"] + len(row["skipped"])
        lo, hi = doc["rows"][0], doc["rows"][-1]
        doc["source_growth_mib"] = round((hi["inflated_bytes"] - lo["inflated_bytes"]) / MIB, 1)
        doc["peak_growth_mib"] = round(hi["tree_peak_mib"] - lo["tree_peak_mib"], 1)
        return doc

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        last = doc["rows"][-1]
        size = f"{last['inflated_bytes'] / GIB:.2f} GiB" if last["inflated_bytes"] >= GIB else f"{last['size_mib']} MiB"
        failed = [r["size_mib"] for r in doc["rows"] if r["exit_code"] != 0]
        note = f"build failed (exit {last['exit_code']})" if last["exit_code"] != 0 else ""
        accounted = sum(min(r["accounted"], 2) for r in doc["rows"]) / (2 * len(doc["rows"]))
        return [
            section.target(f"mri_volumes build peak RSS (process tree), {size} .nii.gz source + header bomb",
                           last["tree_peak_mib"] / 1024, doc["max_tree_gib"], op="<=", unit="GiB", note=note),
            section.target("MRI inputs that end as an example or a skip (source + header bomb, every size)",
                           accounted, 1.0, unit="%", note=f"builds failed at {failed} MiB" if failed else ""),
        ]

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["## MRI build memory against source size", "",
               f"`benchmarks/sections/volume_memory.py` ({doc['mode']} mode, {doc['duration_s'] / 60:.1f} min): "
               f"`tfds build mri_volumes/{doc['config']}` over one int16 .nii.gz source and a 1.4 KB header bomb "
               "claiming 20000^3 int16, " + ("one Beam worker process." if doc["isolated"] else
                                              "built in the benchmark's process (quick mode: plumbing, not memory)."), ""]
        out += report.targets_table(doc["targets"], cpu=False) + report.misses(doc["targets"])
        out += report.table(
            ["source inflates to", "shape", ".nii.gz", "tree peak", "driver", "worker", "largest other", "examples",
             "skips", "wall"],
            [[f"{r['inflated_bytes'] / MIB:.0f} MiB", "x".join(map(str, r["shape"])), f"{r['file_bytes'] / MIB:.2f} MiB",
              f"{r['tree_peak_mib']:.0f} MiB", f"{r['driver_peak_mib']:.0f} MiB", f"{r['worker_peak_mib']:.0f} MiB",
              f"{r.get('other_peak_mib', 0):.0f} MiB", r["examples"], len(r["skipped"]), f"{r['wall_s']:.0f} s"]
             for r in doc["rows"]])
        out += [f"- From the smallest source to the largest (+{doc['source_growth_mib']:.0f} MiB inflated), the tree "
                f"peak moved by {doc['peak_growth_mib']:+.0f} MiB."]
        out += [f"- The header bomb's skip reason: {s['reason']}" for s in doc["rows"][-1]["skipped"][:2]]
        out += [f"- Build error: {r['error'][-300:]}" for r in doc["rows"] if r.get("error")][:1]
        out += [f"- {line}" for line in doc.get("method", [])] + [""]
        return out

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        return {"inputs_dir": ctx.inputs_dir}

    def standalone_inputs(self, out: str, settings: section.Settings, inputs_dir: str, args: Any) -> dict[str, Any]:
        return {"inputs_dir": inputs_dir}


SECTION = VolumeMemory()

if __name__ == "__main__":
    sys.exit(SECTION.main())
