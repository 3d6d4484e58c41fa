"""What the report reads from a prepared dataset: its card, its splits and a sample of its records.

The sample (`Limits`): label counts and the HRR distribution come from every record of the shards read,
which are all of them up to `read_bytes`, else shards spread evenly over each split; only the small
features are parsed. The examples shown (and the MRI volumes whose intensities are pooled) are decoded
in a second pass over those shards, which picks them out by position before decoding anything.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

from vidvol.builders.writer import build_record
from vidvol.builders.writer import skip_report
from vidvol.builders.writer.shards_file import read_shards_file
from vidvol.cli.report_parts import media

ID_KEYS = ("video_id", "experiment", "path", "subject")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a report samples, so that a page stays small and quick to build for any size of dataset.

    Args:
      read_bytes: shard bytes read for label counts and distributions, all splits together; beyond it each
        split's shards are read evenly spread (at least one per split).
      per_class: examples previewed per class (per experiment for fire_hrr: its first windows).
      max_previews: examples previewed in all.
      histogram_volumes: MRI volumes per split whose in-mask intensities make its histogram.
      verify_bytes: shard bytes up to which the page runs the full `verify` (every checksum and record);
        beyond it, it compares each shard's size and count with `shards.json` only.
      image_bytes: bytes of inlined images at most; previews beyond it are left out (the page says how many).
    """

    read_bytes: int = 1 << 30
    per_class: int = 2
    max_previews: int = 60
    histogram_volumes: int = 16
    verify_bytes: int = 1 << 30
    image_bytes: int = 12 << 20


@dataclasses.dataclass
class SplitSample:
    """One split: its size as built and what the report read of it."""

    name: str
    examples: int
    shards: int
    num_bytes: int
    read_shards: int = 0
    read_examples: int = 0
    labels: np.ndarray | None = None  # label index of each record read, in storage order
    hrr: list[np.ndarray] = dataclasses.field(default_factory=list)  # each record's HRR over its real frames
    masks: list[np.ndarray] = dataclasses.field(default_factory=list)  # each record's frame mask (video datasets)
    ids: list[str] = dataclasses.field(default_factory=list)
    chosen: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)  # record position -> example
    intensities: np.ndarray | None = None  # in-mask voxel values of the volumes decoded (MRI)
    histogram_volumes: int = 0  # how many volumes those are
    error: str | None = None  # why the shards could not be read (the page shows it; the shard check names the file)


def kind_of(features: tfds.features.FeaturesDict) -> str:
    """`volume` (MRI), `fire` (frames with an HRR target) or `video`."""
    if "volume" in features:
        return "volume"
    if "hrr" in features:
        return "fire"
    if "video" in features:
        return "video"
    raise ValueError(f"no video or volume feature to report on (features: {sorted(features.keys())})")


def class_names(features: tfds.features.FeaturesDict) -> list[str] | None:
    """The label names of a ClassLabel `label` feature, else None."""
    label = features["label"] if "label" in features else None
    return list(label.names) if isinstance(label, tfds.features.ClassLabel) else None


def id_key(features: tfds.features.FeaturesDict) -> str | None:
    """The feature that names an example (`video_id`, `experiment`, `path` or `subject`), if any."""
    return next((k for k in ID_KEYS if k in features), None)


def build_facts(data_path: str) -> dict[str, Any]:
    """The build's date, duration, runner and vidvol version: `build.json`, else what the build log says."""
    record = build_record.read(data_path)
    if record:
        return record
    return build_record.from_log(data_path)


def _shard_bytes(data_path: str, filenames: Sequence[str], shards_doc: dict | None) -> list[int]:
    recorded = {e.get("file"): e.get("num_bytes") for e in (shards_doc or {}).get("shards", []) if isinstance(e, dict)}
    out = []
    for name in filenames:
        size = recorded.get(name)
        if size is None:
            path = os.path.join(data_path, name)
            size = tf.io.gfile.stat(path).length if tf.io.gfile.exists(path) else 0
        out.append(int(size))
    return out


def choose_shards(sizes: Sequence[int], budget: float) -> list[int]:
    """Shard positions to read: all when they fit `budget` bytes, else as many as fit, evenly spread (at least one)."""
    n = len(sizes)
    if n == 0:
        return []
    if sum(sizes) <= budget:
        return list(range(n))
    k = max(1, int(n * budget / max(sum(sizes), 1)))
    return sorted(set(np.linspace(0, n - 1, k).round().astype(int).tolist()))


def _serialized(paths: Sequence[str], file_format: Any) -> tf.data.Dataset:
    """The serialized records of `paths`, in file order then record order."""
    if file_format is tfds.core.FileFormat.ARRAY_RECORD:
        def records():
            from array_record.python import array_record_module

            for path in paths:
                reader = array_record_module.ArrayRecordReader(path)
                try:
                    for start in range(0, reader.num_records(), 256):
                        yield from reader.read(list(range(start, min(reader.num_records(), start + 256))))
                finally:
                    reader.close()

        return tf.data.Dataset.from_generator(records, output_signature=tf.TensorSpec((), tf.string))
    return tf.data.TFRecordDataset(list(paths), buffer_size=8 << 20)


def _small_keys(features: tfds.features.FeaturesDict, kind: str) -> list[str]:
    keys = [k for k in ("label",) if class_names(features) is not None]
    if kind == "fire":
        keys += ["hrr"]
    if kind in ("fire", "video") and "mask" in features:
        keys += ["mask"]
    if id_key(features):
        keys.append(id_key(features))
    return keys


def as_text(value: Any) -> str:
    """A feature value as text (bytes decoded as UTF-8)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_small(sample: SplitSample, paths: Sequence[str], features, kind: str, file_format) -> None:
    """Pass 1: the small features of every record of `paths` (labels, ids; HRR and mask for fire_hrr)."""
    keys = _small_keys(features, kind)
    if not keys:
        sample.read_examples = sum(1 for _ in _serialized(paths, file_format))
        return
    sub = tfds.decode.PartialDecoding({k: True for k in keys}).extract_features(features)

    @tf.autograph.experimental.do_not_convert
    def parse(serialized):
        return sub.deserialize_example(serialized)

    labels, idk = [], id_key(features)
    for batch in tfds.as_numpy(_serialized(paths, file_format).map(parse, num_parallel_calls=2).batch(512)):
        n = len(next(iter(batch.values())))
        sample.read_examples += n
        if "label" in batch:
            labels.append(np.asarray(batch["label"]))
        if idk:
            sample.ids.extend(as_text(v) for v in batch[idk])
        if "mask" in batch:
            sample.masks.extend(np.asarray(m) for m in batch["mask"])
        if kind == "fire":
            for hrr, mask in zip(batch["hrr"], batch["mask"]):
                sample.hrr.append(np.asarray(hrr)[np.asarray(mask) > 0])
    if labels:
        sample.labels = np.concatenate(labels)


def pick_previews(sample: SplitSample, kind: str, limits: Limits) -> list[int]:
    """Record positions to preview: per class the first `per_class` (per experiment for fire_hrr), at most `max_previews`."""
    if kind == "fire":
        groups = sample.ids or [str(i) for i in range(sample.read_examples)]
    elif sample.labels is not None:
        groups = [int(v) for v in sample.labels]
    else:
        groups = [0] * sample.read_examples
    per_group = limits.per_class if (kind == "fire" or sample.labels is not None) else limits.per_class * 4
    taken: dict[Any, int] = {}
    ranked = []
    for i, g in enumerate(groups):
        rank = taken.get(g, 0)
        if rank < per_group:
            taken[g] = rank + 1
            ranked.append((rank, i))
    ranked.sort()  # every class's first example, then the second ones: a capped page still shows every class it can
    return sorted(i for _, i in ranked[: limits.max_previews])


def decode_chosen(sample: SplitSample, paths: Sequence[str], features, positions: Sequence[int], file_format,
                  frames: dict[int, list[int]] | None = None) -> None:
    """Pass 2: decodes the records at `positions` (and only those) into `sample.chosen`.

    `frames` maps a record position to the frames it shows: only those of its `video` are kept, still
    encoded (`ex["frame_positions"]` says which), so a preview holds a few JPEGs, never a whole clip.
    """
    if not positions:
        return
    order = sorted(set(positions))
    keep = tf.constant(order, tf.int64)
    frames = frames or {}
    width = max((len(v) for v in frames.values()), default=0)
    # one row of frame positions per kept record, padded with its last position
    table = tf.constant([(frames.get(i) or [0]) + [(frames.get(i) or [0])[-1]] * (width - len(frames.get(i) or [0]))
                         for i in order] if width else [[0]] * len(order), tf.int64)
    video = "video" in features

    @tf.autograph.experimental.do_not_convert
    def wanted(i, _):
        return tf.reduce_any(tf.equal(i, keep))

    decoders = {"video": tfds.decode.SkipDecoding()} if video else None

    @tf.autograph.experimental.do_not_convert
    def decode(i, serialized):
        ex = features.deserialize_example(serialized, decoders=decoders)
        if video and width:
            row = tf.argmax(tf.cast(tf.equal(keep, i), tf.int32))
            ex["video"] = tf.gather(ex["video"], table[row])
        return i, ex

    last = int(max(positions))
    ds = _serialized(paths, file_format).take(last + 1).enumerate().filter(wanted).map(decode)
    for i, ex in tfds.as_numpy(ds):
        if video and width:
            shown = frames.get(int(i)) or [0]
            ex["video"], ex["frame_positions"] = ex["video"][: len(shown)], shown
        sample.chosen[int(i)] = ex


def read_dataset(builder: tfds.core.DatasetBuilder, limits: Limits,
                 fetch: Callable[[list[str]], None] | None = None) -> tuple[list[SplitSample], str]:
    """Every split of a prepared dataset with the sample the report shows of it, and the split previewed.

    `fetch`: called with the shard paths a split's sample reads, before it reads them (a dataset in a bucket:
    they are put into the reader's shard cache).

    Returns:
      (one `SplitSample` per split, in dataset_info.json's order; the name of the split whose examples are previewed).
    """
    info, data_path = builder.info, os.fspath(builder.data_path)
    kind = kind_of(info.features)
    shards_doc = _safe_shards(data_path)
    splits = list(info.splits.items())
    sizes = {name: _shard_bytes(data_path, s.filenames, shards_doc) for name, s in splits}
    total = sum(sum(v) for v in sizes.values())
    preview_split = "train" if "train" in info.splits else (splits[0][0] if splits else "")
    out = []
    for name, split in splits:
        sample = SplitSample(name, split.num_examples, split.num_shards, sum(sizes[name]))
        budget = limits.read_bytes * (sum(sizes[name]) / total) if total else 0
        chosen = choose_shards(sizes[name], budget)
        paths = [os.path.join(data_path, split.filenames[i]) for i in chosen]
        sample.read_shards = len(chosen)
        try:
            if fetch is not None and paths:
                fetch(paths)
            _read_split(sample, paths, info.features, kind, info.file_format, limits, name == preview_split)
        except (tf.errors.OpError, ValueError) as e:  # a damaged shard: the page says so and goes on
            sample.error = f"{type(e).__name__}: {str(getattr(e, 'message', e)).splitlines()[0][:300]}"
        out.append(sample)
    return out, preview_split


def _read_split(sample: SplitSample, paths: Sequence[str], features, kind: str, file_format, limits: Limits,
                preview: bool) -> None:
    """Both passes over one split's chosen shards: the small features, then the examples shown or histogrammed."""
    read_small(sample, paths, features, kind, file_format)
    positions = pick_previews(sample, kind, limits) if preview else []
    spread = []
    if kind == "volume" and limits.histogram_volumes and sample.read_examples:
        k = min(limits.histogram_volumes, sample.read_examples)
        spread = np.linspace(0, sample.read_examples - 1, k).round().astype(int).tolist()
    shown = {i: media.shown_positions(kind, sample.masks[i]) for i in positions} if sample.masks else None
    decode_chosen(sample, paths, features, sorted(set(positions) | set(spread)), file_format, shown)
    if spread:
        values = [np.asarray(sample.chosen[i]["volume"])[np.asarray(sample.chosen[i]["mask"]) > 0] for i in spread]
        sample.intensities = np.concatenate(values) if values else np.zeros(0, np.float32)
        sample.histogram_volumes = len(values)
        for i in set(spread) - set(positions):
            sample.chosen.pop(i, None)


def _safe_shards(data_path: str) -> dict | None:
    try:
        return read_shards_file(data_path)
    except (ValueError, UnicodeDecodeError, tf.errors.OpError):
        return None


def read_skips(data_path: str) -> dict[str, Any] | None:
    """The build's skip report, or None where there is none (or it does not parse)."""
    try:
        return skip_report.read_skip_report(data_path)
    except (ValueError, OSError, tf.errors.OpError, FileNotFoundError):
        return None
