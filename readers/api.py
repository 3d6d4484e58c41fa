"""`vidvol.load` and friends: model-ready `tf.data` pipelines over prepared vidvol (TFDS) datasets."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.readers import allocator
from vidvol.readers import shards
from vidvol.readers import sizing
from vidvol.readers import stages
from vidvol.readers.batch_parser import BatchParser
from vidvol.readers.clip_sampling import ClipWindow
from vidvol.readers.plan import ReadPlan

logger = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE


class DatasetNotPreparedError(FileNotFoundError):
    """The dataset (config) has not been built into the data directory."""


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Performance knobs of a read pipeline; none changes which examples come out, only speed and memory.

    Attributes:
      shuffle_buffer_bytes: memory for the example shuffle buffer (training), in bytes.
      cycle_length: shard files read in parallel; None: `sizing.default_cycle_length`.
      memory_budget_bytes: cap for tf.data's autotuned buffers and the lean-mode threshold; None: a
        quarter of physical memory, at most 16 GiB.
      deterministic: keep element order in parallel stages; None: True with a seed or at evaluation.
      parse_per_batch: when every feature read has a fixed stored shape and nothing runs per example,
        shuffle serialized records and parse each batch in one call (same values and, under a seed,
        the same order as TFDS's per-example parse). False always reads through `builder.as_dataset`.
    """

    shuffle_buffer_bytes: int = sizing.DEFAULT_SHUFFLE_BUFFER_BYTES
    cycle_length: int | None = None
    memory_budget_bytes: int | None = None
    deterministic: bool | None = None
    parse_per_batch: bool = True


def get_builder(name: str | tfds.core.DatasetBuilder, data_dir: str | os.PathLike | None = None) -> tfds.core.DatasetBuilder:
    """The prepared builder for `name` ("hmdb51" or "hmdb51/split1_20x64x64"), or `name` itself."""
    if isinstance(name, tfds.core.DatasetBuilder):
        builder = name
    else:
        builder = tfds.builder(name, data_dir=None if data_dir is None else os.fspath(data_dir))
    if not builder.is_prepared():
        raise DatasetNotPreparedError(
            f"{builder.data_dir}: dataset {builder.info.full_name} is not prepared there; build it first, e.g. "
            f"`tfds build {builder.name}/{builder.builder_config.name if builder.builder_config else ''} "
            "--imports vidvol --manual_dir DIR --data_dir DATA_DIR`"
        )
    return builder


def check_tf_data(builder: tfds.core.DatasetBuilder) -> None:
    """ValueError naming the random-access readers when the prepared dataset's files have no tf.data reader."""
    fmt = builder.info.file_format
    if fmt is not None and fmt not in tfds.core.FileFormat.with_tf_data():
        raise ValueError(
            f"{builder.info.full_name} in {builder.data_dir} is stored as {fmt.value}, which tf.data cannot stream; "
            "read it by index with vidvol.data_source / vidvol.grain_dataset / vidvol.torch_dataset (or "
            "tfds.data_source), or build it with the default file_format (tfrecord) for vidvol.load / tfds.load"
        )


def supervised_keys(info: tfds.core.DatasetInfo, inputs: str | Sequence[str] | None = None, target: str | None = None) -> tuple[tuple[str, ...], str]:
    """Input feature names and target name: the builder's supervised_keys, plus `mask` for a single input."""
    features = info.features
    keys = info.supervised_keys
    if inputs is None or target is None:
        if not keys or len(keys) != 2:
            raise ValueError(f"{info.full_name}: no (inputs, target) supervised_keys; pass inputs= and target=")
    if inputs is None:
        first = keys[0]
        inputs = tuple(first) if isinstance(first, (tuple, list)) else (first,)
        if len(inputs) == 1 and "mask" in features and inputs[0] != "mask":
            inputs = inputs + ("mask",)
    elif isinstance(inputs, str):
        inputs = (inputs,)
    target = keys[1] if target is None else target
    if not isinstance(target, str):
        raise ValueError(f"{info.full_name}: target must be one feature name, got {target!r}")
    names = tuple(inputs) + (target,)
    unknown = [n for n in names if n not in features]
    if unknown:
        raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(features)}")
    return tuple(inputs), target


def _output_names(
    info: tfds.core.DatasetInfo, features: Sequence[str] | None, inputs: str | Sequence[str] | None, target: str | None
) -> tuple[tuple[str, ...], tuple[str, ...] | None, str | None]:
    """(features read, input names or None for dict output, target name or None)."""
    if features is not None:
        names = tuple(features)
        unknown = [n for n in names if n not in info.features]
        if unknown:
            raise ValueError(f"{info.full_name}: unknown features {unknown}; expected some of {sorted(info.features)}")
        return names, None, None
    in_names, tgt = supervised_keys(info, inputs, target)
    return tuple(dict.fromkeys(in_names + (tgt,))), in_names, tgt


def _read_config(options: tf.data.Options, seed: int | None, cycle: int, input_context, repeat: bool) -> tfds.ReadConfig:
    """TFDS's ReadConfig for our reader: no autocache, seeded file order, one example per file per turn."""
    return tfds.ReadConfig(
        options=options,
        try_autocache=False,
        shuffle_seed=seed,
        interleave_cycle_length=cycle,
        interleave_block_length=1,
        input_context=input_context,
        skip_prefetch=True,
        num_parallel_calls_for_decode=AUTOTUNE,
        num_parallel_calls_for_interleave_files=AUTOTUNE,
        assert_cardinality=not repeat,
    )


def load(
    name: str | tfds.core.DatasetBuilder,
    split: str,
    batch_size: int,
    *,
    data_dir: str | os.PathLike | None = None,
    training: bool | None = None,
    seed: int | None = None,
    clip_length: int | None = None,
    clip_stride: int = 1,
    eval_clips: int = 1,
    resize: tuple[int, int] | None = None,
    mean: float | Sequence[float] = 0.0,
    std: float | Sequence[float] = 1.0,
    inputs: str | Sequence[str] | None = None,
    target: str | None = None,
    features: Sequence[str] | None = None,
    input_context: tf.distribute.InputContext | None = None,
    drop_remainder: bool | None = None,
    repeat: bool = False,
    mask_dtype: tf.DType = tf.float32,
    tuning: Tuning | None = None,
    **tuning_fields: Any,
) -> tf.data.Dataset:
    """Batched `((video_or_volume, mask), target)` dataset of a prepared vidvol dataset, streamed from its shards.

    Args:
      name: registered dataset name with optional config ("hmdb51/split1_20x64x64"), or a builder.
      split: TFDS split, slices allowed ("train", "test", "train[:80%]").
      batch_size: examples per batch (per input pipeline when `input_context` is given).
      data_dir: TFDS data directory holding the prepared dataset.
      training: shuffle files and examples, draw random clips, drop the last partial batch.
        Default: True for splits whose name starts with "train".
      seed: makes file order, example order and random clips reproducible (and the pipeline
        deterministic); each epoch still differs from the last.
      clip_length, clip_stride, eval_clips: read-time clips of `clip_length` frames, `clip_stride`
        apart; at evaluation `eval_clips` evenly spaced clips (stacked after the batch axis when > 1).
      resize: (height, width) to resize frames to, bilinear, after normalization.
      mean, std: per-channel (or scalar) normalization applied to frames scaled to [0, 1].
      inputs, target: override the builder's supervised keys (e.g. inputs=("video", "mask")).
      features: return dicts with just these features instead of the supervised tuple.
      input_context: `tf.distribute.InputContext`; each pipeline reads a disjoint set of shard files.
      drop_remainder: default `training`.
      repeat: repeat forever (each pass reshuffled).
      mask_dtype: dtype of the non-frame inputs (masks) in the supervised output.
      tuning: performance knobs (`Tuning`); its fields may also be given as keywords
        (`cycle_length=4`), which override `tuning`.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    unknown = sorted(set(tuning_fields) - {f.name for f in dataclasses.fields(Tuning)})
    if unknown:
        raise TypeError(f"load() got unexpected keyword arguments {unknown}")
    tuning = dataclasses.replace(tuning or Tuning(), **tuning_fields)
    builder = get_builder(name, data_dir)
    check_tf_data(builder)
    allocator.warn_if_not_pooled()
    info = builder.info
    training = split.split("[")[0].strip().startswith("train") if training is None else bool(training)
    drop_remainder = training if drop_remainder is None else drop_remainder
    deterministic = (seed is not None or not training) if tuning.deterministic is None else tuning.deterministic
    clip = ClipWindow(clip_length, clip_stride, eval_clips) if clip_length is not None else None
    names, in_names, tgt = _output_names(info, features, inputs, target)
    plan = ReadPlan.make(info, names, clip, training, batch_size if drop_remainder else None)

    # What this pipeline reads, and how big its buffers may be (a missing or empty split: an error naming it).
    instructions = shards.file_instructions(builder, split)
    split_info = info.splits[split]
    sizing.check_shards(info.full_name, split, len(instructions), input_context)
    my_files = sizing.worker_file_count(len(instructions), input_context)
    mine = instructions[int(input_context.input_pipeline_id) :: int(input_context.num_input_pipelines)] if input_context else instructions
    my_examples = sum(f.take for f in mine)
    cycle = tuning.cycle_length or sizing.default_cycle_length(my_files)
    budget = tuning.memory_budget_bytes or sizing.default_memory_budget()
    element_bytes = plan.decoded_bytes()
    float_batch_bytes = plan.float_bytes(resize) * batch_size
    lean = sizing.is_lean(float_batch_bytes, budget)
    if lean:
        plan = dataclasses.replace(plan, decode_in_batch=False)
    parser = (
        BatchParser.for_features(info.features, plan.names, plan.videos)
        if tuning.parse_per_batch and not plan.needs_example_map else None
    )
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.ram_budget = int(budget)
    if lean:
        stages.lean_options(options)

    # The stages.
    read_config = _read_config(options, seed, cycle, input_context, repeat)
    ds = stages.read(builder, split, plan, read_config, shuffle_files=training, parser=parser)
    random_clips = training and clip is not None
    if random_clips:
        ds = stages.attach_seeds(ds, seed)
    buffer = 0
    if training:
        stored = split_info.num_bytes / max(1, split_info.num_examples)
        held = stored if parser is not None else plan.buffer_example_bytes(stored)
        buffer = sizing.shuffle_buffer_size(held, my_examples, tuning.shuffle_buffer_bytes)
        ds = stages.shuffle(ds, buffer, seed)
    if repeat:
        ds = ds.repeat()
    decode_calls = sizing.lean_decode_parallelism(element_bytes, budget) if lean else AUTOTUNE
    ds = stages.select_clips(ds, plan, random_clips, decode_calls, deterministic)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    finish = stages.finisher(plan, in_names, tgt, mean, std, tuple(resize) if resize else None, mask_dtype)
    if lean:
        ds = stages.finish_lean(ds, finish)
    else:
        ds = stages.parse_decode_finish(ds, plan, parser, finish, deterministic)
    ds = ds.with_options(options)
    logger.info(
        "%s %s: %d examples in %d files (this pipeline), cycle_length %d, shuffle buffer %d examples, "
        "parse per %s, decode %s, batch %d (%.0f MiB as float32)%s%s",
        info.full_name, split, my_examples, my_files, cycle, buffer, "batch" if parser is not None else "example",
        "per batch" if plan.decode_in_batch else f"per example, parallelism {decode_calls}", batch_size,
        float_batch_bytes / 2**20, ", lean memory mode" if lean else "", ", training" if training else "",
    )
    return ds


def distribute(
    strategy: tf.distribute.Strategy, name: str | tfds.core.DatasetBuilder, split: str, global_batch_size: int, **kwargs: Any
) -> tf.distribute.DistributedDataset:
    """`load` per input pipeline of `strategy`, each reading its own shard files (per-replica batches)."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return load(name, split, context.get_per_replica_batch_size(global_batch_size), input_context=context, **kwargs)

    return strategy.distribute_datasets_from_function(dataset_fn)


def load_labels(
    name: str | tfds.core.DatasetBuilder,
    split: str,
    *,
    data_dir: str | os.PathLike | None = None,
    target: str | None = None,
) -> np.ndarray:
    """Every target of a split as one array, parsing nothing else (no frame is decoded or copied).

    The order is that of `load(..., training=False)`, so predictions line up with it.
    """
    builder = get_builder(name, data_dir)
    check_tf_data(builder)
    info = builder.info
    if target is None:
        _, target = supervised_keys(info)
    if target not in info.features:
        raise ValueError(f"{info.full_name}: unknown feature {target!r}; expected one of {sorted(info.features)}")
    num_files = len(shards.file_instructions(builder, split))
    read_config = tfds.ReadConfig(
        try_autocache=False, interleave_cycle_length=sizing.default_cycle_length(num_files), interleave_block_length=1,
        skip_prefetch=True,
    )
    decoders = tfds.decode.PartialDecoding({target: True})
    if shards.checked_reader_applies(builder, read_config):
        ds = shards.read_examples(builder, split, read_config, shuffle_files=False, decoders=decoders)
    else:
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config, decoders=decoders)
    ds = ds.map(lambda ex: ex[target]).batch(4096).prefetch(AUTOTUNE)
    parts = [np.asarray(b) for b in tfds.as_numpy(ds)]
    if not parts:
        shape = tuple(d or 0 for d in info.features[target].shape)
        return np.zeros((0,) + shape, info.features[target].np_dtype)
    return np.concatenate(parts)


def example_bytes(name: str | tfds.core.DatasetBuilder, split: str, *, data_dir: str | os.PathLike | None = None) -> float:
    """Stored bytes per example of a split (`num_bytes / num_examples`), the unit of the shuffle buffer rule."""
    builder = get_builder(name, data_dir)
    shards.file_instructions(builder, split)  # a missing or empty split: an error naming it
    info = builder.info.splits[split]
    return info.num_bytes / max(1, info.num_examples)
