"""Random access for JAX and PyTorch users: examples by index from ArrayRecord shards, NumPy only.

`data_source` gives the stored examples as `tfds.load` decodes them (`DataSource`), with no
TensorFlow graph at read time; `SupervisedExamples` runs `vidvol.load`'s per-example steps on
them in NumPy, for `grain_dataset` (`random_access.grain`) and `torch_dataset`
(`random_access.torch`), resumable through `random_access.epoch_order`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import file_adapters

from vidvol.readers import keywords
from vidvol.readers import augment_video
from vidvol.readers import augment_volume
from vidvol.readers import bucket
from vidvol.readers import clip_sampling
from vidvol.readers.random_access import epoch_order
from vidvol.readers import frames
from vidvol.readers import order
from vidvol.readers import output
from vidvol.readers import records
from vidvol.readers import rng
from vidvol.readers import shard_order
from vidvol.readers import shards
from vidvol.readers.shard_order import ShardOrder
from vidvol.readers.dataset import get_builder, is_training, per_frame_features, supervised_keys
from vidvol.readers.example_plan import ExamplePlan
from vidvol.readers.spec import ReadSpec

# Threads decoding one `__getitems__` batch. Frames decode without the GIL (simplejpeg, OpenCV), but each example also
# runs Python between its frames, so a second thread per core keeps the core decoding while the first holds the GIL;
# more threads than that only contend for it: two per core, at most 8 (chosen by timing 1, 2, 4 and 8 threads on
# `__getitems__` of 64x64 JPEG clips; measured rates belong in benchmarks/RESULTS.md, not here).
DEFAULT_THREADS = min(8, 2 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class RandomAccessError(ValueError):
    """The dataset is not stored in a file format with random access (it was built as TFRecord)."""


def check_random_access(builder: tfds.core.DatasetBuilder) -> None:
    """RandomAccessError naming the rebuild command when the prepared dataset has no random access."""
    fmt = builder.info.file_format or file_adapters.DEFAULT_FILE_FORMAT
    if fmt not in file_adapters.FileFormat.with_random_access():
        config = f"/{builder.builder_config.name}" if builder.builder_config else ""
        raise RandomAccessError(
            f"{builder.info.full_name} in {builder.data_dir} is stored as {fmt.value}, which has no random access; "
            f"build it with ArrayRecord shards into another data_dir: `tfds build {builder.name}{config} --imports "
            f"vidvol --file_format array_record --manual_dir DIR --data_dir DATA_DIR` (or `python -m "
            f"vidvol.beam_jobs.build ... --file_format array_record`), or read it with vidvol.load / tfds.load"
        )


def _as_loaded(feature: tfds.features.FeatureConnector, value: Any) -> Any:
    """A NumPy-decoded value with tfds.load's type: NumPy arrays and scalars of the feature's dtype, bytes for text."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    return np.asarray(value, feature.np_dtype)[()]


def _check_record_counts(builder: tfds.core.DatasetBuilder, instructions: Sequence[Any]) -> None:
    """ValueError naming an ArrayRecord shard that holds more records than the build wrote (its count is in its footer)."""
    from array_record.python import array_record_module

    for f in instructions:
        path = os.fspath(f.filename)
        try:
            reader = array_record_module.ArrayRecordReader(path)
        except Exception:  # missing or damaged: the read names it
            continue
        try:
            count = reader.num_records()
        finally:
            reader.close()
        if count > int(f.examples_in_shard):
            raise shards.longer_than_written(builder, path, f"{count} records", int(f.examples_in_shard))


class DataSource:
    """Decoded examples of one split by index: `len(ds)`, `ds[i]`, `ds.__getitems__(indices)`.

    The examples are `tfds.load`'s (a dict of NumPy arrays: frames (T, H, W, C) uint8, masks, labels,
    MRI volume float32 + mask), from TFDS's own ArrayRecord data source (`builder.as_data_source`)
    and the feature connectors' NumPy decoders: no TensorFlow graph at read time. A batch of indices
    is decoded in a thread pool (OpenCV releases the GIL while it decodes a frame). JPEG frames
    decode with libjpeg-turbo through simplejpeg with `tf.io.decode_jpeg`'s defaults (fast integer
    IDCT, fancy upsampling; `core.jpeg`), so they are the pixels `tfds.load` and `vidvol.load` give,
    bit for bit; `VideoFrames` decodes the same way in TFDS's NumPy path, so `tfds.data_source`
    gives them too (TFDS's own Video feature, OpenCV, takes the accurate IDCT: a few levels off).
    Everything else (PNG frames, masks, labels, volumes) is identical too.

    `features`: the features decoded (default all). `decode_frames=False` leaves video features as
    arrays of encoded frames (what `SupervisedExamples` wants: it decodes only a clip's frames).
    Picklable: a copy (a Grain or DataLoader worker process) reopens the shards itself. A *forked*
    copy cannot (PyTorch's default DataLoader workers on Linux: opening an ArrayRecord reader in a
    child forked after TensorFlow and ArrayRecord started their threads crashes the child with a
    segmentation fault), so its first access raises `RandomAccessError` saying to use
    `multiprocessing_context="spawn"` (or "forkserver"), where the copy arrives pickled.

    `augment`: a `VideoAugment` crops the decoded frames as `vidvol.load` crops them; a
    `VolumeAugment` patches and transforms the volume (and mask) as `vidvol.load` does. In
    `training`, drawn from (`seed`, epoch, index): `set_epoch(e)` sets the epoch (an index from a
    `epoch_order.EpochSampler` carries its own epoch and seed), `seed` None draws fresh ones;
    otherwise evaluation's crops (the centre patch).
    """

    def __init__(
        self, name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None,
        features: Sequence[str] | None = None, decode_frames: bool = True, num_threads: int | None = None,
        augment: augment_video.VideoAugment | augment_volume.VolumeAugment | None = None, training: bool = False,
        seed: int | None = None,
    ):
        builder = get_builder(name, data_dir)
        check_random_access(builder)
        # ArrayRecord readers open local files: a bucket dataset's split goes into the shard cache whole.
        bucket.localize(builder, [os.fspath(f.filename) for f in shards.file_instructions(builder, split)])
        # What a copy in another process reopens the split from (the builder itself does not travel).
        config = f"/{builder.builder_config.name}" if builder.builder_config else ""
        self._state = dict(name=f"{builder.name}{config}:{builder.version}", split=split,
                           data_dir=bucket.data_dir_of(builder)
                           or os.fspath(builder.data_path.parents[2 if config else 1]),  # DATA_DIR/NAME[/CONFIG]/VERSION
                           features=None if features is None else tuple(features),
                           decode_frames=decode_frames, num_threads=num_threads, augment=augment, training=training,
                           seed=seed)
        info = builder.info
        names = tuple(info.features.keys()) if features is None else tuple(features)
        unknown = [n for n in names if n not in info.features]
        if unknown:
            raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(info.features)}")
        self.info = info
        self.split = split
        self.names = names
        self.videos = tuple(n for n in names if frames.is_encoded_video(info.features[n]))
        self.decode_frames = decode_frames
        self.training, self.seed, self.epoch = bool(training), seed, [0]
        frame_features = tuple(n for n in names if n in self.videos or frames.is_raw_video(info.features[n]))
        video_augment = augment if isinstance(augment, augment_video.VideoAugment) else None
        if video_augment is not None and not (frame_features and decode_frames):
            raise ValueError(f"{info.full_name}: VideoAugment crops decoded video frames, and none of {list(names)} is "
                             "a video feature (or frames are left encoded); leave ReadSpec.augment None")
        self._augments = {v: video_augment.geometry(info.features[v].shape[1:], self.training, v)
                          for v in frame_features} if video_augment is not None else {}
        self._per_frame = per_frame_features(info.features, frame_features[0], names) if self._augments else ()
        self._volume_augment = (augment_volume.plan_for(info, names, augment, self.training)
                                if isinstance(augment, augment_volume.VolumeAugment) else None)
        self._features = tfds.features.FeaturesDict({n: info.features[n] for n in names})
        self._decoders = {v: frames.KeepEncoded() for v in self.videos} or None
        self._records = builder.as_data_source(split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
        # What the split is made of (a resumed order refuses other data): `records.fingerprint`.
        instructions = shards.file_instructions(builder, split)
        _check_record_counts(builder, instructions)  # records past the count would be out of reach, unsaid
        self.fingerprint = records.fingerprint(builder, split, instructions)
        self.shard_sizes = tuple(int(f.take) for f in instructions)  # examples per shard file: ShardOrder's blocks
        self._threads = num_threads or DEFAULT_THREADS
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def _in_this_process(self) -> None:
        """A clear error, not a segmentation fault, in a forked child (see the class docstring)."""
        if self._pid != os.getpid():
            raise RandomAccessError(
                f"{self.info.full_name} {self.split!r}: this data source was copied into process {os.getpid()} by "
                "fork, where ArrayRecord readers crash; create the PyTorch DataLoader with "
                "multiprocessing_context='spawn' (or 'forkserver') so that each worker gets a pickled copy that "
                "reopens the shards"
            )

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        self._in_this_process()
        return self._decode_at(self._records[self._index(index)], index)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Several examples: records read together, decoded in a thread pool."""
        self._in_this_process()
        records = self._records.__getitems__([self._index(i) for i in indices])
        if len(records) <= 1:
            return [self._decode_at(r, i) for r, i in zip(records, indices)]
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix="vidvol-decode")
        return list(self._pool.map(self._decode_at, records, indices))

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the training draws of plain indices (`augment`; call before each epoch)."""
        self.epoch[0] = int(epoch)

    def _decode_at(self, record: bytes, index: Any) -> dict[str, Any]:
        """`decode`, then `augment` on example `index`: frame crops, or volume patches and transforms (training:
        drawn from seed, epoch and index)."""
        example = self.decode(record)
        if self._augments:
            key = _augment_key(index, self.seed, self.epoch[0]) if self.training else None
            leads = {v: np.shape(example[v])[:-3] for v in self._augments}
            return augment_video.augment_example(example, self._augments, leads, self._per_frame, key)
        plan = self._volume_augment
        if plan is None:
            return example
        gen = draw_rng(index, self.seed, self.epoch[0], rng.VOLUME_AUGMENT) if self.training else None
        volume, mask = plan.example_np(example[plan.volume], example[plan.mask] if plan.mask else None, gen)
        example[plan.volume] = volume
        if plan.mask:
            example[plan.mask] = mask
        return example

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def _index(self, index: Any) -> int:
        i = int(index)
        n = len(self._records)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {self.info.full_name} {self.split!r} ({n} examples)")
        return i % n

    def decode(self, record: bytes) -> dict[str, Any]:
        """One serialized example -> its features, as `tfds.load` decodes them (frames stacked (T, H, W, C))."""
        example = self._features.deserialize_example_np(record, decoders=self._decoders)
        out = {}
        for name in self.names:
            value = example[name]
            if name in self.videos:
                encoded = np.asarray(value, object).reshape(-1)
                out[name] = frames.decode_frames_np(encoded, self.info.features[name]) if self.decode_frames else encoded
            else:
                out[name] = _as_loaded(self.info.features[name], value)
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self._state, "epoch": self.epoch[0]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        epoch = state.pop("epoch", 0)
        self.__init__(**state)
        self.epoch[0] = epoch

    def __repr__(self) -> str:
        return f"vidvol.DataSource({self.info.full_name!r}, split={self.split!r}, {len(self)} examples)"
@keywords.checked("features")
def data_source(
    name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None,
    spec: ReadSpec | None = None, num_threads: int | None = None, training: bool | None = None,
    seed: int | None = None,
) -> DataSource:
    """Random access to a split of a dataset built with `--file_format array_record`: `ds[i]` -> decoded example.

    The examples are those of `tfds.data_source(name, split=split, data_dir=data_dir)` in the same
    order, with tfds.load's types (video frames one (T, H, W, C) array, NumPy scalars) and JPEG pixels
    (`tf.io.decode_jpeg`'s, as `tfds.data_source` gives them for `VideoFrames` too). Only the parts
    of `spec` that keep the examples the stored ones apply. Recipe: docs/reading.md, "Random access:
    JAX and PyTorch".

    Args:
      name: registered dataset name with optional config, or a builder.
      split: TFDS split, slices allowed.
      data_dir: TFDS data directory holding the prepared dataset.
      spec: `Output(features=[...])` (the features decoded; default all) and `augment` (`VideoAugment`:
        the uint8 frames cropped as `vidvol.load` crops them, per-frame values repeated for
        multi_crop's views; `VolumeAugment`: the volume and mask patched and transformed as
        `vidvol.load` does) apply; None: `ReadSpec()`.
      num_threads: threads decoding one `__getitems__` batch; None: two per core, at most 8.
      training: random draws of `augment` from (seed, epoch, index) (`ds.set_epoch(e)`), as
        `vidvol.load`'s; False: evaluation's (centre crops, the centre patch). None: the split's name
        starts with "train".
      seed: the seed of those draws; None: fresh ones.

    Returns:
      A `DataSource`: `len(ds)`, `ds[i]`, `ds.__getitems__(indices)` (decoded in a thread pool),
      picklable for worker processes.

    Raises:
      DatasetNotPreparedError: the dataset is not built in `data_dir`.
      RandomAccessError: the dataset is stored as TFRecord (the message gives the rebuild command).
      ValueError: any other part of `spec` (use `grain_dataset` / `torch_dataset`), or an unknown feature.
    """
    spec = spec or ReadSpec()
    spec.check_supported("vidvol.data_source", ("output.features", "augment"),
                         "it returns the stored examples as tfds.load decodes them; grain_dataset and torch_dataset "
                         "take clips, normalization and the supervised output")
    return DataSource(name, split, data_dir=data_dir, features=spec.output.features, num_threads=num_threads,
                      augment=spec.augment, training=is_training(split, training), seed=seed)


@dataclasses.dataclass(frozen=True)
class SupervisedExamples:
    """`vidvol.load`'s per-example steps in NumPy: `((x, mask), y)` of one example, by index.

    From the same `ReadSpec` as `vidvol.load`: the supervised `(inputs, target)` features, read-time
    clips with the same `Clips` rules (`clip_sampling`, shared with `vidvol.load`; only the clip's
    frames are decoded), frames to float32 in [0, 1] then `(x - mean) / std`, masks to
    `Output.mask_dtype`, and `ReadSpec.augment`'s crops of the uint8 frames before that
    (`augment_video`: the same crops as `vidvol.load` for the same key, epoch and index). What they
    cannot do (resize, integer or half outputs, dicts, leaving the mask out) is an error naming it
    (`ReadSpec.check_supported`), not ignored. `grain_dataset` batches these examples;
    `torch_dataset` is one.

    `ds[i]` (evaluation clips, or a random clip from fresh entropy) and `ds.example(i, rng, key)` (the
    random clip drawn by `rng`, the random crops by `key`) give one example; `ds.transform(example,
    rng, key)` is the step alone, on an example of `source` (frames still encoded), which Grain maps.
    """

    source: DataSource
    plan: ExamplePlan
    inputs: tuple[str, ...]
    target: str
    mean: Any = 0.0
    std: Any = 1.0
    mask_dtype: Any = np.float32
    seed: int | None = None
    augment: augment_volume.VolumePlan | None = None  # volume augmentation, drawn from rng.VOLUME_AUGMENT
    order: ShardOrder | None = None  # ReadSpec.order: the training order of `sampler` and `grain_dataset`
    epoch: list[int] = dataclasses.field(default_factory=lambda: [0])  # set_epoch (PyTorch)

    @classmethod
    @keywords.checked(*keywords.SUPERVISED)
    def make(
        cls, name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None,
        training: bool | None = None, seed: int | None = None, spec: ReadSpec | None = None,
        num_threads: int | None = None,
    ) -> SupervisedExamples:
        """Checks the arguments as `vidvol.load` does (same names, same defaults, same spec) and opens the split.

        `spec`: clips, `Normalize(mean, std)`, `Output(mask_dtype, inputs, target)` and `augment` apply; resize, a
        dtype other than float32, dicts and a left-out mask are a ValueError (NumPy readers of model-ready
        float32 examples: resize with the model's own transform).
        """
        spec = spec or ReadSpec()
        where = "vidvol.grain_dataset / vidvol.torch_dataset"
        spec.check_supported(where, ("clips", "normalize.mean", "normalize.std", "output.mask_dtype", "output.inputs",
                                     "output.target", "augment", "order"), "they give float32 NumPy examples of the supervised tuple")
        builder = get_builder(name, data_dir)
        check_random_access(builder)
        info = builder.info
        training = is_training(split, training)
        in_names, tgt = supervised_keys(info, spec.output.inputs, spec.output.target)
        if spec.output.mask_dtype is None and output.MASK in in_names:
            raise ValueError(f"{where} cannot leave the mask out (Output(mask_dtype=None)); pass another "
                             "Output.mask_dtype, or Output.inputs without the mask")
        names = tuple(dict.fromkeys(in_names + (tgt,)))
        video_augment = spec.augment if isinstance(spec.augment, augment_video.VideoAugment) else None
        plan = ExamplePlan.make(info, names, spec.clips.window(), training, None, video_augment)
        augment = (augment_volume.plan_for(info, names, spec.augment, training)
                   if isinstance(spec.augment, augment_volume.VolumeAugment) else None)
        source = DataSource(builder, split, data_dir=data_dir, features=names, decode_frames=False, num_threads=num_threads)
        mask_dtype = np.dtype(tf.as_dtype(spec.output.mask_dtype or "float32").as_numpy_dtype)
        examples = cls(source, plan, in_names, tgt, spec.normalize.mean, spec.normalize.std, mask_dtype, seed, augment,
                       spec.order)
        examples.layout(1, 0, training)  # a ShardOrder that does not fit the split: refused here, not at the first epoch
        return examples

    def layout(self, replicas: int, rank: int, training: bool) -> order.Layout:
        """The order's layout (`order.Layout`) of replica `rank` of `replicas` over this split (`ReadSpec.order`'s blocks)."""
        blocks = shard_order.blocks_of(self.order, self.source.shard_sizes,
                                       f"{self.source.info.full_name} split {self.source.split!r}")
        return order.Layout(len(self), int(replicas), int(rank), bool(training), blocks)

    @property
    def training(self) -> bool:
        return self.plan.training

    def __len__(self) -> int:
        return len(self.source)

    def set_epoch(self, epoch: int) -> None:
        """Random clips of a seeded dataset differ per epoch (call before each epoch's DataLoader iterator)."""
        self.epoch[0] = int(epoch)

    def rng_for(self, index: int, stream: int = rng.CLIP) -> np.random.Generator:
        """The RNG of example `index` for `stream` (`draw_rng`: this dataset's seed and `set_epoch`'s epoch)."""
        return draw_rng(index, self.seed, self.epoch[0], stream)

    def augment_for(self, index: Any) -> Any:
        """What draws the augmentation of a training example `index`: `VideoAugment`'s crop key
        (`augment_video.example_key`), or `VolumeAugment`'s generator (`rng.VOLUME_AUGMENT`); None in evaluation or
        without `augment`.

        Keyed like `rng_for`: a `epoch_order.SeededIndex` carries its epoch and seed, a plain index takes
        `set_epoch`'s epoch and this dataset's seed (None: fresh entropy).
        """
        if not self.training:
            return None
        if self.plan.augments:
            return _augment_key(index, self.seed, self.epoch[0])
        return self.rng_for(index, rng.VOLUME_AUGMENT) if self.augment is not None else None

    def __getitem__(self, index: int):
        return self._padded(index, self.example(int(index), self.rng_for(index) if self.training else None,
                                                self.augment_for(index)))

    def __getitems__(self, indices: Sequence[int]) -> list:
        examples = self.source.__getitems__([int(i) for i in indices])
        return [self._padded(i, self.transform(ex, self.rng_for(i) if self.training else None, self.augment_for(i)))
                for ex, i in zip(examples, indices)]

    def _padded(self, index: Any, example):
        """An evaluation pad of `sampler(num_replicas=...)` (a draw with `valid` False): inputs all zero (weight 0)."""
        if getattr(index, "valid", True):
            return example
        xs, y = example
        zero = tuple(np.zeros_like(x) for x in (xs if isinstance(xs, tuple) else (xs,)))
        return (zero if isinstance(xs, tuple) else zero[0]), y

    def sampler(self, *, shuffle: bool | None = None, seed: int | None = None, num_replicas: int = 1, rank: int = 0):
        """A resumable sampler for `torch.utils.data.DataLoader(ds, sampler=...)` (`epoch_order.EpochSampler`)."""
        return epoch_order.EpochSampler(self, shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)

    def example(self, index: int, rng: np.random.Generator | None = None, augment: Any = None):
        """`((x, mask), y)` of example `index`; `rng` draws the training clip, `augment` its augmentation (`augment_for`)."""
        return self.transform(self.source[index], rng, augment)

    def transform(self, example: Mapping[str, Any], rng: np.random.Generator | None = None, augment: Any = None):
        """One example of `source` (frames encoded) -> `((x, mask), y)` (or `(x, y)` for a single input)."""
        return self.finish(self.select(example, rng, augment))

    def select(self, example: Mapping[str, Any], rng: np.random.Generator | None = None,
               augment: Any = None) -> dict[str, Any]:
        """The step before `finish`: the supervised features, clip frames decoded (uint8) and cropped (`VideoAugment`:
        training crops from the key `augment`), per-frame values gathered, the volume augmented (`VolumeAugment`: drawn
        by the generator `augment`; its patches float32, the mask following them)."""
        out = self._select(example, rng)
        if self.plan.augments:
            if self.training and augment is None:
                raise ValueError("a training example with ReadSpec.augment needs a key for its random crops (augment_for)")
            leads = {v: self.plan.frame_dims(v) for v in self.plan.augments}
            out = augment_video.augment_example(out, self.plan.augments, leads, self.plan.per_frame, augment)
        plan = self.augment
        if plan is not None:
            volume, mask = plan.example_np(np.asarray(out[plan.volume]), None if plan.mask is None else
                                           np.asarray(out[plan.mask]), augment)
            out[plan.volume] = volume
            if plan.mask is not None:
                out[plan.mask] = mask
        return {n: out[n] for n in dict.fromkeys(self.inputs + (self.target,))}

    def finish(self, selected: Mapping[str, Any]):
        """`select`'s output (one example, or a stacked batch) -> `((x, mask), y)`: frames float32, masks mask_dtype."""
        xs = tuple(self._finish(n, selected[n]) for n in self.inputs)
        return (xs if len(xs) > 1 else xs[0]), np.asarray(selected[self.target])

    def _select(self, example: Mapping[str, Any], rng: np.random.Generator | None) -> dict[str, Any]:
        """The clip (or all frames) of every video decoded, per-frame features gathered alike."""
        plan, out = self.plan, dict(example)
        if not plan.videos:
            return out
        indices = valid = None
        if plan.clip is not None:
            count = len(example[plan.videos[0]])
            if plan.training:
                if rng is None:
                    raise ValueError("a training example with Clips.length needs an rng for its random clip")
                indices, valid = clip_sampling.random_clip_np(count, plan.clip, rng)
            else:
                indices, valid = clip_sampling.even_clips_np(count, plan.clip)
                if plan.clip.eval_clips == 1:
                    indices, valid = indices[0], valid[0]
        for v in plan.encoded:
            feature = plan.features[v]
            decoded = frames.decode_frames_np(example[v], feature, indices, valid)
            out[v] = decoded.reshape(plan.frame_dims(v) + tuple(feature.shape[1:]))
        if indices is not None:
            for name in plan.raw + plan.per_frame:  # raw frames are values already: gathered like per-frame values
                out[name] = _gather_valid(np.asarray(example[name]), indices, valid)
        return out

    def _finish(self, name: str, value: Any) -> np.ndarray:
        """Frames -> float32 in [0, 1], then (x - mean) / std; volumes float32; other inputs -> mask_dtype (strings kept)."""
        if name in self.plan.videos:
            scale = float(np.iinfo(self.plan.features[name].np_dtype).max)
            y = np.multiply(value, np.float32(1.0 / scale), dtype=np.float32)  # one pass, no uint8 -> float copy first
            mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
            if not (np.all(mean == 0) and np.all(std == 1)):
                y = (y - mean) / std
            return y
        value = np.asarray(value)
        if value.dtype.kind in "SUO":
            return value
        if output.is_volume(self.plan.features[name]):
            return value.astype(np.float32, copy=False)  # a volume stays float32 whatever the mask's dtype
        return value.astype(self.mask_dtype)


def draw_rng(index: Any, seed: int | None, epoch: int, stream: int) -> np.random.Generator:
    """`rng.example_rng(seed, epoch, index, stream)`, or fresh entropy when `seed` is None.

    An index from a sampler (a `epoch_order.SeededIndex`) carries its own epoch and seed; a plain index takes
    the `seed` and `epoch` given (None: fresh entropy, not reproducible).
    """
    seed, epoch = getattr(index, "seed", seed), getattr(index, "epoch", epoch)
    if seed is None:
        return np.random.default_rng()
    return rng.example_rng(int(seed), int(epoch), int(index), stream)


def _augment_key(index: Any, seed: int | None, epoch: int) -> np.ndarray:
    """The crop key of example `index`: a `epoch_order.SeededIndex`'s own epoch and seed, else `seed` and `epoch`."""
    return augment_video.example_key(getattr(index, "seed", seed), getattr(index, "epoch", epoch), int(index))


def _gather_valid(values: np.ndarray, indices: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """`values[indices]` with slots where `valid` is False zero (an empty `values` reads zeros)."""
    padded = np.concatenate([values, np.zeros((1,) + values.shape[1:], values.dtype)])
    picked = padded[np.minimum(indices, len(values))]
    return np.where(valid.reshape(valid.shape + (1,) * (picked.ndim - valid.ndim)), picked, 0).astype(values.dtype)


def stack_batch(examples: Sequence[Any]) -> Any:
    """Examples of the same structure (tuples, dicts, arrays) -> one structure of stacked arrays."""
    first = examples[0]
    if isinstance(first, tuple):
        return tuple(stack_batch([e[k] for e in examples]) for k in range(len(first)))
    if isinstance(first, dict):
        return {k: stack_batch([e[k] for e in examples]) for k in first}
    return np.stack([np.asarray(e) for e in examples])


__all__ = [
    "DataSource", "RandomAccessError", "SupervisedExamples", "check_random_access", "data_source", "stack_batch",
    ]
