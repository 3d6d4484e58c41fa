"""One peer read pipeline, timed inside the peers' virtual environment (PyTorch, no TensorFlow, no vidvol)."""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VIDEO_PEERS = ("opencv", "decord", "pyav", "torchcodec")
VOLUME_PEERS = ("monai_dataset", "monai_persistent", "monai_cache", "torchio")
MIB = 2**20
EPOCHS = 10_000  # the sampler's length in passes over the files: endless for any timed run


@dataclasses.dataclass
class PeerJob:
    """One peer pipeline to time, on which files, with which loader settings."""

    peer: str
    paths: list[str]
    labels: list[int]
    batch_size: int
    work: str  # a folder of its own: the saved first example, MONAI's disk cache
    num_workers: int = 2
    runs: int = 3
    min_seconds: float = 2.0
    warmup_batches: int = 2
    rounds: int = 8  # a timed run spans at least this many batches per worker (`streams.stream_rate`'s min_batches)
    seed: int = 0
    num_frames: int = 20  # video: frames per clip
    size: int = 64  # video: frame side; volume: grid side
    augment: bool = False
    crop: int = 96  # MONAI's RandSpatialCropd side when augmenting

    def __post_init__(self):
        if self.peer not in VIDEO_PEERS + VOLUME_PEERS:
            raise ValueError(f"peer must be one of {VIDEO_PEERS + VOLUME_PEERS}, got {self.peer!r}")
        if not self.paths or len(self.paths) != len(self.labels):
            raise ValueError(f"{self.peer}: need as many labels as paths "
                             f"(got {len(self.paths)} and {len(self.labels)})")

    @property
    def video(self) -> bool:
        return self.peer in VIDEO_PEERS


def uniform_indices(num_frames: int, num_samples: int) -> list[int]:
    """The centre frame of each of `num_samples` equal segments (vidvol's `builders.video.uniform_indices`)."""
    if num_frames <= num_samples:
        return list(range(max(num_frames, 0)))
    return [((2 * k + 1) * num_frames) // (2 * num_samples) for k in range(num_samples)]


def frames_opencv(path: str, num_frames: int) -> Any:
    """RGB uint8 (T, H, W, 3): one sequential grab() pass, retrieve() only at the wanted indices."""
    import cv2
    import numpy as np

    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise FileNotFoundError(f"{path}: cv2.VideoCapture cannot open it")
    try:
        wanted = uniform_indices(int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), num_frames)
        out, index = [], 0
        for target in wanted:
            while index <= target and cap.grab():
                index += 1
            ok, bgr = cap.retrieve()
            if not ok:
                raise ValueError(f"{path}: frame {target} could not be retrieved")
            out.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        return np.stack(out)
    finally:
        cap.release()


def frames_decord(path: str, num_frames: int) -> Any:
    """RGB uint8 (T, H, W, 3) from `decord.VideoReader(path).get_batch(indices)`."""
    import decord

    reader = decord.VideoReader(path, ctx=decord.cpu(0))
    return reader.get_batch(uniform_indices(len(reader), num_frames)).asnumpy()


def frames_pyav(path: str, num_frames: int) -> Any:
    """RGB uint8 (T, H, W, 3): PyAV decodes the stream in order and converts the wanted frames."""
    import av
    import numpy as np

    with av.open(path) as container:
        stream = container.streams.video[0]
        wanted = uniform_indices(int(stream.frames), num_frames)
        out: list[Any] = []
        for index, frame in enumerate(container.decode(stream)):
            if index == wanted[len(out)]:
                out.append(frame.to_ndarray(format="rgb24"))
                if len(out) == len(wanted):
                    break
    if len(out) != len(wanted):
        raise ValueError(f"{path}: PyAV decoded {len(out)} of the {len(wanted)} wanted frames")
    return np.stack(out)


def frames_torchcodec(path: str, num_frames: int) -> Any:
    """RGB uint8 (T, H, W, 3) from TorchCodec's exact-seek `VideoDecoder.get_frames_at(indices)`."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(path, seek_mode="exact", dimension_order="NHWC")
    return decoder.get_frames_at(indices=uniform_indices(decoder.metadata.num_frames, num_frames)).data.numpy()


DECODERS: dict[str, Callable[[str, int], Any]] = {
    "opencv": frames_opencv, "decord": frames_decord, "pyav": frames_pyav, "torchcodec": frames_torchcodec}


def clip_uint8(peer: str, path: str, num_frames: int, size: int) -> Any:
    """RGB uint8 (T, size, size, 3): the peer's frames, resized as vidvol's build resizes (INTER_AREA)."""
    import cv2
    import numpy as np

    frames = DECODERS[peer](path, num_frames)
    return np.stack([cv2.resize(f, (size, size), interpolation=cv2.INTER_AREA) for f in frames])


class ClipDataset:
    """Map-style dataset: item i = (float32 (T, size, size, 3) clip in [0, 1], label, i), decoded on demand."""

    def __init__(self, job: PeerJob):
        self.job = job

    def __len__(self) -> int:
        return len(self.job.paths)

    def __getitem__(self, i: int) -> tuple[Any, int, int]:
        import numpy as np

        clip = clip_uint8(self.job.peer, self.job.paths[i], self.job.num_frames, self.job.size)
        return clip.astype(np.float32) / np.float32(255.0), self.job.labels[i], i


def MONAI_AUGMENT(keys: Sequence[str], crop: int) -> list[Any]:
    """MONAI's set: RandSpatialCropd(crop^3), RandFlipd(p=0.5, axis 0), RandRotate90d(p=0.5, axes 0-1),
    RandScaleIntensityd(factors=0.1, p=1), RandShiftIntensityd(offsets=0.1, p=1)."""
    from monai import transforms as mt

    return [mt.RandSpatialCropd(keys=keys, roi_size=(crop,) * 3, random_size=False),
            mt.RandFlipd(keys=keys, prob=0.5, spatial_axis=0),
            mt.RandRotate90d(keys=keys, prob=0.5, spatial_axes=(0, 1)),
            mt.RandScaleIntensityd(keys=keys, factors=0.1, prob=1.0),
            mt.RandShiftIntensityd(keys=keys, offsets=0.1, prob=1.0)]


def volume_loader(job: PeerJob, sampler: Any) -> tuple[Any, dict[str, Any], Callable[[Any], tuple[Any, str]]]:
    """(DataLoader, setup figures, first(batch) -> (volume tensor batch, path of its example 0)) of a volume peer."""
    setup: dict[str, Any] = {}
    if job.peer == "torchio":
        import torchio as tio

        subjects = [tio.Subject(image=tio.ScalarImage(p), label=label, file=p)
                    for p, label in zip(job.paths, job.labels)]
        import torch

        steps = [tio.ToCanonical(), tio.CropOrPad(job.size), tio.To(torch.float32)]  # float32 like the others
        if job.augment:  # TorchIO's set (no affine, no crop: TorchIO crops at random only through its patch Queue):
            # RandomFlip(axis 0, p=0.5) and RandomGamma(log_gamma in [-0.1, 0.1]) as the intensity change
            steps += [tio.RandomFlip(axes=(0,), flip_probability=0.5), tio.RandomGamma(log_gamma=(-0.1, 0.1))]
        dataset = tio.SubjectsDataset(subjects, transform=tio.Compose(steps))
        loader = tio.SubjectsLoader(dataset, batch_size=job.batch_size, num_workers=job.num_workers, sampler=sampler)
        return loader, setup, lambda b: (b["image"]["data"], b["file"][0])
    from monai import data as md
    from monai import transforms as mt

    items = [{"image": p, "label": label, "file": p} for p, label in zip(job.paths, job.labels)]
    keys = ["image"]  # LoadImaged -> EnsureChannelFirstd -> Orientationd(RAS) -> ResizeWithPadOrCropd(S^3), augmented
    transform = mt.Compose([mt.LoadImaged(keys=keys), mt.EnsureChannelFirstd(keys=keys),
                            mt.Orientationd(keys=keys, axcodes="RAS"),
                            mt.ResizeWithPadOrCropd(keys=keys, spatial_size=(job.size,) * 3),
                            *(MONAI_AUGMENT(keys, job.crop) if job.augment else [])])
    start = time.perf_counter()
    if job.peer == "monai_dataset":
        dataset = md.Dataset(items, transform)
    elif job.peer == "monai_persistent":
        cache = os.path.join(job.work, "monai_cache")
        shutil.rmtree(cache, ignore_errors=True)
        dataset = md.PersistentDataset(items, transform, cache_dir=cache)
        for i in range(len(dataset)):  # decoded once, before timing, like our build
            dataset[i]
        setup["cache_mib"] = round(sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache)) / MIB, 1)
    else:
        dataset = md.CacheDataset(items, transform, cache_rate=1.0, num_workers=job.num_workers, progress=False)
    setup["setup_s"] = round(time.perf_counter() - start, 2)
    loader = md.DataLoader(dataset, batch_size=job.batch_size, num_workers=job.num_workers, sampler=sampler)
    return loader, setup, lambda b: (b["image"], b["file"][0])


def make_loader(job: PeerJob) -> tuple[Any, dict[str, Any], Callable[[Any], tuple[Any, str]]]:
    """The job's DataLoader over an endless seeded shuffle, its setup figures, and its first-batch accessor."""
    import torch

    n = len(job.paths)
    sampler = torch.utils.data.RandomSampler(range(n), num_samples=n * EPOCHS,
                                             generator=torch.Generator().manual_seed(job.seed))
    if not job.video:
        return volume_loader(job, sampler)
    loader = torch.utils.data.DataLoader(ClipDataset(job), batch_size=job.batch_size, num_workers=job.num_workers,
                                         sampler=sampler)
    return loader, {}, lambda b: (b[0], job.paths[int(b[2][0])])


def first_batch(job: PeerJob, loader: Any, first: Callable[[Any], tuple[Any, str]]) -> dict[str, Any]:
    """Shape and dtype of the first batch; its example 0 saved (float32 .npy) with the file it came from."""
    import numpy as np

    tensor, path = first(next(iter(loader)))
    sample = os.path.join(job.work, f"{job.peer}_first.npy")
    np.save(sample, np.asarray(tensor[0].numpy() if hasattr(tensor[0], "numpy") else tensor[0], np.float32))
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", ""), "path": path,
            "sample": sample, "min": float(tensor.min()), "max": float(tensor.max())}


def versions() -> dict[str, str]:
    """Python and every peer library's version (those that import), with the FFmpeg each video peer links."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "decord", "av", "torchcodec", "monai", "torchio", "nibabel", "SimpleITK",
                 "opencv-python-headless", "numpy"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def ffmpeg_of(peer: str) -> str:
    """The FFmpeg libavcodec a video peer decodes with (bundled or the system's), or '' where it does not say."""
    if peer == "pyav":
        import av

        return "libavcodec " + ".".join(map(str, av.library_versions["libavcodec"])) + " (bundled)"
    if peer == "torchcodec":
        from torchcodec import _core

        v = _core.get_ffmpeg_library_versions()
        codec = v.get("libavcodec")
        codec = ".".join(map(str, codec)) if isinstance(codec, (list, tuple)) else codec
        return f"libavcodec {codec} (system FFmpeg {v.get('ffmpeg_version', '?')})"
    if peer == "opencv":
        import cv2

        line = [x for x in cv2.getBuildInformation().splitlines() if x.strip().startswith("avcodec:")]
        return f"libavcodec {line[0].split('(')[-1].rstrip(') ')} (bundled)" if line else ""
    if peer == "decord":
        import glob
        import decord

        site = os.path.dirname(os.path.dirname(decord.__file__))
        libs = glob.glob(os.path.join(site, "decord.libs", "libavcodec-*.so.*"))
        return f"libavcodec {libs[0].split('.so.')[-1]} (bundled)" if libs else ""
    return ""


def run_peer(job: PeerJob) -> dict[str, Any]:
    """Times one peer pipeline `runs` times; returns the read-row figures, first-batch check data and versions."""
    import torch
    from common import measure, streams

    os.makedirs(job.work, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    rss_before = measure.rss_mib() * MIB
    with measure.TreeSampler(os.getpid(), 0.1) as monitor:
        loader, setup, first = make_loader(job)
        check = first_batch(job, loader, first)
        count = lambda b: len(b["label"] if isinstance(b, dict) else b[1])  # examples in a batch: its labels
        runs = [streams.stream_rate(lambda: iter(loader), count=count, min_seconds=job.min_seconds,
                                    warmup_batches=job.warmup_batches, cores=cores,
                                    cpu_seconds=streams.tree_cpu_seconds,
                                    min_batches=job.rounds * max(1, job.num_workers)) for _ in range(job.runs)]
    return {"peer": job.peer, **streams.run_summary(runs), "cores": cores, "batch_size": job.batch_size,
            "num_workers": job.num_workers, "augment": job.augment, "examples": len(job.paths), **setup,
            "rss_before_mib": round(rss_before / MIB, 1),
            "peak_rss_mib": round(max(monitor.total_peak, rss_before) / MIB, 1),
            "first_batch": check, "versions": versions(), "ffmpeg": ffmpeg_of(job.peer) if job.video else "",
            "torch_threads": torch.get_num_threads()}


if __name__ == "__main__":  # `python benchmarks/peers/jobs.py JOB.json RESULT.json`: one peer pipeline, timed
    from common import jobs

    sys.exit(jobs.job_main(__file__, lambda job: run_peer(PeerJob(**job))))
