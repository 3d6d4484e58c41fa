"""How close a build comes to the limit of its own work: source frames per second per core."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np

def _builder_sources(name: str, config: str, manual_dir: str) -> Iterator[tuple[str, Any, Any]]:
    """(split, source, example_fn) of every input a build of name/config decodes, from the builder itself."""
    import tensorflow_datasets as tfds
    import vidvol  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        builder = tfds.builder(f"{name}/{config}", data_dir=tmp)
        # The builder's own download manager, as download_and_prepare makes it (benchmark code: private calls).
        dl_manager = builder._make_download_manager(
            tmp, tfds.download.DownloadConfig(manual_dir=manual_dir))
        generators = builder._split_generators(dl_manager)
        for split, gen in generators.items():
            for source in gen.sources:
                yield split, source, gen.example_fn


def _encode(bgr: np.ndarray, size: tuple[int, int], quality: int) -> bytes:
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if rgb.shape[:2] != size:
        interp = cv2.INTER_AREA if size[0] <= rgb.shape[0] and size[1] <= rgb.shape[1] else cv2.INTER_LINEAR
        rgb = cv2.resize(rgb, (size[1], size[0]), interpolation=interp)
    # As stored: the RGB array handed to the JPEG encoder (channel order does not change the cost).
    ok, data = cv2.imencode(".jpg", rgb, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()


def _video_frames(path: str, num_samples: int, size: tuple[int, int], quality: int) -> int:
    """Grab every frame, retrieve/resize/encode `num_samples` evenly spaced ones; returns frames grabbed."""
    cap = cv2.VideoCapture(path)
    count = max(int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), 1)
    wanted = set(np.linspace(0, count - 1, num_samples).round().astype(int).tolist())
    grabbed = 0
    while cap.grab():
        if grabbed in wanted:
            ok, frame = cap.retrieve()
            if ok:
                _encode(frame, size, quality)
        grabbed += 1
    cap.release()
    return grabbed


def stages(name: str, config: str, manual_dir: str, *, num_samples: int, size: tuple[int, int],
           quality: int) -> dict[str, Any]:
    """CPU seconds for the inputs of name/config, one core: tight loop, our example function, + serialization."""
    import tensorflow_datasets as tfds
    from vidvol.builders import example_io
    from vidvol.builders.writer import example_bytes

    cv2.setNumThreads(1)
    sources = list(_builder_sources(name, config, manual_dir))
    features = tfds.builder(f"{name}/{config}").info.features
    serializer = example_bytes.Serializer(features)  # what each Beam worker runs per example

    frames = 0
    start = time.process_time()
    for _, (_, record), _ in sources:  # each builder source (key, record): its tight-loop work
        if hasattr(record, "frames"):  # fire_hrr: FrameSeriesSource (image files)
            for path in record.frames:
                _encode(cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_COLOR), size, quality)
            frames += len(record.frames)
        else:  # hmdb51: ClipSource
            frames += _video_frames(record.path, num_samples, size, quality)
    tight_cpu = time.process_time() - start

    example_cpu = serialize_cpu = 0.0
    examples = 0
    for split, source, example_fn in sources:
        t0 = time.process_time()
        items = [i for i in example_io.run_example_fn(example_fn, source, split) if not isinstance(i, example_io.Skip)]
        t1 = time.process_time()
        for _, example in items:
            serializer(example)
        serialize_cpu += time.process_time() - t1
        example_cpu += t1 - t0
        examples += len(items)
    return {"sources": len(sources), "examples": examples, "source_frames": frames,
            "tight_cpu_s": round(tight_cpu, 2), "example_fn_cpu_s": round(example_cpu, 2),
            "serialize_cpu_s": round(serialize_cpu, 2), "limit_frames_per_s_one_core": round(frames / tight_cpu, 1),
            "example_fn_frames_per_s_one_core": round(frames / example_cpu, 1),
            "with_serialization_frames_per_s_one_core": round(frames / (example_cpu + serialize_cpu), 1)}


def efficiency(stage: dict[str, Any], build: dict[str, Any], *, cores: int, frames_per_source_scale: float = 1.0
               ) -> dict[str, Any]:
    """The build's source frames/s per core against the tight-loop limit; where the rest goes."""
    frames = stage["source_frames"] * frames_per_source_scale
    limit = stage["limit_frames_per_s_one_core"] * cores
    write_rate = frames / max(build["write_s"], 1e-3)
    e2e_rate = frames / build["wall_s"]
    # Each stage as a share of the limit: the gaps are what that step costs.
    return {
        "cores": cores, "build_workers": build["workers"], "source_frames": int(frames),
        "limit_frames_per_s": round(limit, 1),
        "example_fn_share": round(stage["example_fn_frames_per_s_one_core"] / stage["limit_frames_per_s_one_core"], 3),
        "serialized_share": round(stage["with_serialization_frames_per_s_one_core"]
                                  / stage["limit_frames_per_s_one_core"], 3),
        "write_frames_per_s_per_core": round(write_rate / cores, 1),
        "e2e_frames_per_s_per_core": round(e2e_rate / cores, 1),
        "write_share": round(write_rate / limit, 3),
        "e2e_share": round(e2e_rate / limit, 3),
        "startup_s": round(build["wall_s"] - build["write_s"], 1),
    }

