"""What we measure our loader against: the read-time pipelines users run today, and the decode limit."""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Sequence

import cv2
import nibabel as nib
import numpy as np
import tensorflow as tf

HMDB51_NUM_FRAMES = 20
HMDB51_SIZE = 64


def read_clip_by_seeking(path: str, *, num_frames: int = HMDB51_NUM_FRAMES, size: int = HMDB51_SIZE) -> np.ndarray:
    """Float32 (T, size, size, 3) RGB clip in [0, 1]: one CAP_PROP_POS_FRAMES seek per frame."""
    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise FileNotFoundError(f"{path}: cv2.VideoCapture cannot open it (expected a readable video)")
    try:
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        clip = np.zeros((num_frames, size, size, 3), np.float32)
        for t, index in enumerate(np.linspace(0, max(count - 1, 0), num_frames).round().astype(int)):
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(index))
            ok, bgr = cap.read()
            if ok:
                rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                clip[t] = cv2.resize(rgb, (size, size)) / 255.0
        return clip
    finally:
        cap.release()


def _mapped(paths: Sequence[str], targets: np.ndarray, repeat: bool, read, shape: Sequence[int],
            op=tf.py_function) -> tf.data.Dataset:
    """(path, target) pairs (repeated forever when `repeat`, before the map, as a training input would) mapped in
    parallel to (`read(path)` in `op`, a float32 tensor of `shape`; target)."""
    def map_fn(path, target):
        x = op(read, [path], tf.float32)
        x.set_shape(tuple(shape))
        return x, target

    ds = tf.data.Dataset.from_tensor_slices((list(paths), targets))
    return (ds.repeat() if repeat else ds).map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)


def hmdb51_seek_dataset(paths: Sequence[str], labels: Sequence[int], *, batch_size: int, repeat: bool = False
                        ) -> tf.data.Dataset:
    """Users' read-time HMDB51 pipeline: paths -> py_function(seek + resize + /255) -> batches."""
    read = lambda path: read_clip_by_seeking(path.numpy().decode())
    ds = _mapped(paths, np.asarray(labels, np.int64), repeat, read, (HMDB51_NUM_FRAMES, HMDB51_SIZE, HMDB51_SIZE, 3))
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def get_img(path: bytes) -> np.ndarray:
    """Float32 RGB frame in [0, 1] from one image file (the users' per-frame reader)."""
    name = path.decode() if isinstance(path, bytes) else str(path)
    bgr = cv2.imread(name, cv2.IMREAD_COLOR)
    if bgr is None:
        raise FileNotFoundError(f"{name}: cv2.imread cannot read it (expected a JPEG/PNG frame)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0


def fire_get_img_dataset(frame_paths: Sequence[str], hrr: Sequence[float], *, window: int, height: int, width: int,
                         batch_size: int, repeat: bool = False) -> tf.data.Dataset:
    """Users' read-time fire pipeline: frame paths -> numpy_function(get_img) -> windows of T frames -> batches."""
    ds = _mapped(frame_paths, np.asarray(hrr, np.float32), repeat, get_img, (height, width, 3), tf.numpy_function)
    return ds.batch(window, drop_remainder=True).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def mri_get_fdata_dataset(paths: Sequence[str], labels: Sequence[int], *, shape: Sequence[int],
                          batch_size: int, repeat: bool = False) -> tf.data.Dataset:
    """Users' read-time MRI pipeline: paths -> py_function(nib.load(p).get_fdata(float32)) -> batches."""
    read = lambda path: nib.load(path.numpy().decode()).get_fdata(dtype=np.float32)
    return _mapped(paths, np.asarray(labels, np.int64), repeat, read, shape).batch(batch_size).prefetch(tf.data.AUTOTUNE)


def shard_files(data_dir: str, name: str, config: str, split: str) -> list[str]:
    """The TFRecord shards of one split of a prepared dataset (any version), sorted."""
    pattern = os.path.join(data_dir, name, config, "*", f"{name}-{split}.tfrecord-*")
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"{pattern}: no TFRecord shards (expected a prepared {name}/{config})")
    return files


def stored_jpeg_frames(files: Sequence[str], *, feature: str = "video", max_frames: int | None = None) -> list[bytes]:
    """The encoded frames of `feature` exactly as stored in the TFRecord files (up to max_frames)."""
    frames: list[bytes] = []
    for record in tf.data.TFRecordDataset(list(files)).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        if feature not in example.features.feature:
            raise ValueError(f"{files[0]}: records have no {feature!r} feature "
                             f"(found {sorted(example.features.feature)})")
        frames.extend(example.features.feature[feature].bytes_list.value)
        if max_frames is not None and len(frames) >= max_frames:
            return frames[:max_frames]
    if not frames:
        raise ValueError(f"{files[0]}: no encoded frames found in feature {feature!r}")
    return frames


def decode_rate(encoded: Sequence[bytes], *, min_seconds: float = 1.0, ring_frames: int | None = None
                ) -> dict[str, float]:
    """Frames per second of `cv2.imdecode` over `encoded` in a tight loop on one core (wall and CPU time)."""
    buffers = [np.frombuffer(b, np.uint8) for b in encoded]
    for buf in buffers[: min(len(buffers), 8)]:  # warm up
        cv2.imdecode(buf, cv2.IMREAD_COLOR)
    ring, first = None, None
    if ring_frames is not None:
        first = cv2.imdecode(buffers[0], cv2.IMREAD_COLOR)
        if first is None:
            raise ValueError(f"cv2.imdecode failed on a stored frame of {len(buffers[0])} bytes")
        ring = np.empty((max(1, ring_frames),) + first.shape, np.float32)
    scale = np.float32(1 / 255)
    previous = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        decoded, slot = 0, 0
        start, cpu_start = time.perf_counter(), time.thread_time()
        while True:
            for buf in buffers:
                frame = cv2.imdecode(buf, cv2.IMREAD_COLOR)
                if frame is None:
                    raise ValueError(f"cv2.imdecode failed on a stored frame of {len(buf)} bytes")
                if ring is not None and frame.shape == first.shape:
                    np.multiply(frame, scale, out=ring[slot], dtype=np.float32)
                    slot = (slot + 1) % len(ring)
            decoded += len(buffers)
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                cpu = max(time.thread_time() - cpu_start, 1e-9)
                return {"frames_per_s": decoded / elapsed, "cpu_frames_per_s": decoded / cpu, "frames": decoded}
    finally:
        cv2.setNumThreads(previous)


def on_every_core(rate_fn, work, cores: int, *, min_seconds: float) -> dict[str, float]:
    """`rate_fn(work, min_seconds=...)` run in `cores` threads at once (cv2.imdecode, os.pread and NumPy's casts
    let go of the GIL): the limit of the whole machine in the state the loader meets, not one core's rate times
    the cores. Returned per core (the sum / cores), wall and CPU, like `rate_fn`'s own figures."""
    previous = cv2.getNumThreads()
    cv2.setNumThreads(1)
    results: list = [None] * cores
    errors: list = []

    def run(i: int) -> None:
        try:
            results[i] = rate_fn(work, min_seconds=min_seconds)
        except BaseException as e:
            errors.append(e)

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(cores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        cv2.setNumThreads(previous)
    if errors:
        raise errors[0]
    return {"frames_per_s": sum(r["frames_per_s"] for r in results) / cores,
            "cpu_frames_per_s": sum(r["cpu_frames_per_s"] for r in results) / cores,
            "frames": sum(r["frames"] for r in results)}


def _tfrecord_spans(path: str) -> list[tuple[int, int]]:
    """(offset, length) of every record's payload in one TFRecord file (framing: u64 length, u32 crc, data, u32 crc)."""
    spans = []
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return spans
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header at byte {offset}")
            length = int.from_bytes(header[:8], "little")
            spans.append((offset + 12, length))
            offset += 12 + length + 4
            f.seek(offset)


def stored_volume_spans(files: Sequence[str], *, feature: str = "volume") -> list[tuple[str, int, int]]:
    """(file, offset, length) of each record's stored volume bytes (`WholeNumberVolume` "data", int16 only)."""
    out: list[tuple[str, int, int]] = []
    key = f"{feature}/data"
    for path in files:
        with open(path, "rb") as f:
            for start, length in _tfrecord_spans(path):
                f.seek(start)
                record = f.read(length)
                example = tf.train.Example.FromString(record)
                feats = example.features.feature
                if key not in feats or int(feats[f"{feature}/int16"].int64_list.value[0]) != 1:
                    raise ValueError(f"{path}: records have no int16-stored {feature!r} (keys {sorted(feats)[:8]})")
                data = feats[key].bytes_list.value[0]
                at = record.find(data)
                out.append((path, start + at, len(data)))
    if not out:
        raise ValueError(f"{files[0] if files else '(no files)'}: no records")
    return out


def volume_rate(spans: Sequence[tuple[str, int, int]], *, min_seconds: float = 1.0) -> dict[str, float]:
    """Volumes per second on one core of: stored int16 bytes read from the (page-cached) file with `os.pread`,
    then `np.frombuffer(...).astype(np.float32)` (a new float32 volume each time, as a loader hands out)."""
    fds = {p: os.open(p, os.O_RDONLY) for p in {s[0] for s in spans}}
    try:
        def one(path: str, offset: int, length: int) -> None:
            np.frombuffer(os.pread(fds[path], length, offset), "<i2").astype(np.float32)

        for span in spans[:2]:  # warm up
            one(*span)
        done = 0
        start, cpu_start = time.perf_counter(), time.thread_time()
        while True:
            for span in spans:
                one(*span)
            done += len(spans)
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                cpu = max(time.thread_time() - cpu_start, 1e-9)
                return {"frames_per_s": done / elapsed, "cpu_frames_per_s": done / cpu, "frames": done}
    finally:
        for fd in fds.values():
            os.close(fd)
