"""The split's shard files as tf.data reads them, with errors that name the split or the damaged file.

Every reader finds a split's files through `file_instructions` and the file checks here;
`read_records` / `read_examples` read a whole split in TFDS's own order, each file checked
(`vidvol.load_labels`; `vidvol.load` reads by index through `readers.records`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import artifacts
from vidvol.core import tfds_api
from vidvol.readers import bucket

AUTOTUNE = tf.data.AUTOTUNE
_BUFFER_SIZE = 8 << 20  # per file, as TFDS's TFRecord adapter reads


class SplitNotFoundError(ValueError):
    """The split asked for does not exist in the prepared dataset, or was built empty."""


def _split_names(split: str) -> list[str]:
    """Base split names of a TFDS split expression: `train[:80%]+test` -> ["train", "test"]."""
    return [part.split("[", 1)[0].strip() for part in str(split).split("+")]


def _empty_splits(data_path: str) -> dict[str, str]:
    """Splits the build left without an example, and why (from the skip report; {} without one)."""
    path = os.path.join(data_path, artifacts.SKIP_REPORT_NAME)
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            return dict(json.loads(f.read()).get("empty_splits", {}))
    except (tf.errors.OpError, OSError, ValueError, AttributeError):
        return {}


def file_instructions(builder: tfds.core.DatasetBuilder, split: str) -> list[Any]:
    """TFDS's file instructions of `split` in a prepared builder; a missing or empty split is a SplitNotFoundError.

    A split that does not exist, or that a build left without an example, is named with the splits
    there are (and, from the skip report, why it came out empty), not TFDS's `Instruction []
    corresponds to no data!` or tf.data's `The filenames argument must contain tf.string elements`.

    Args:
      builder: the prepared dataset's builder.
      split: a TFDS split, slices allowed (`"train[:80%]"`, `"train+test"`).

    Returns:
      TFDS's file instructions: the files the split (or slice) reads, with skip and take.

    Raises:
      SplitNotFoundError: a split that is not there, or one that selects no example.
    """
    info = builder.info
    there = {name: s.num_examples for name, s in info.splits.items() if s.num_examples}
    listing = ", ".join(f"{n} ({k} example{'s' if k != 1 else ''})" for n, k in sorted(there.items())) or "none"
    where = f"{info.full_name} in {os.fspath(builder.data_dir)}"
    for name in _split_names(split):
        if name not in there:
            empty = _empty_splits(os.fspath(builder.data_path))
            why = (f"; it came out empty when the dataset was built ({empty[name]}), so it was not registered"
                   if name in empty else (" (built empty: it has no example)" if name in info.splits else ""))
            raise SplitNotFoundError(f"{where}: no split {name!r}{why}. The splits there are: {listing}")
    instructions = list(info.splits[split].file_instructions)
    if not instructions:
        raise SplitNotFoundError(f"{where}: split {split!r} selects no example. The splits there are: {listing}")
    return instructions


def checked_reader_applies(builder: tfds.core.DatasetBuilder, read_config: tfds.ReadConfig) -> bool:
    """Whether `read_records` reads this dataset (TFRecord shards, no TFDS option it does not reproduce)."""
    file_format = read_config.file_format or builder.info.file_format or tfds.core.FileFormat.TFRECORD
    return (
        tfds.core.FileFormat.from_value(file_format) == tfds.core.FileFormat.TFRECORD
        and not builder.info.disable_shuffling
        and read_config.experimental_interleave_sort_fn is None
        and not read_config.add_tfds_id
        and not read_config.repeat_filenames
        and isinstance(read_config.interleave_cycle_length, int)
    )


# A stand-in starts with "?": field 7 with wire type 7, which no protobuf parser accepts, and stays text, so
# TensorFlow's "Could not parse example input, value: '...'" shows it whole.
_STAND_IN = "?vidvol: shard file "


def damage_hint(builder: tfds.core.DatasetBuilder) -> str:
    """"Every damaged file, with the command that rebuilds it: python -m vidvol verify ..." for this dataset."""
    has_config = builder.builder_config is not None
    spec = artifacts.dataset_spec(builder.name, builder.builder_config.name if has_config else None)
    data_dir = artifacts.data_dir_of(builder.data_path, has_config)
    return f"Every damaged file, with the command that rebuilds it: {artifacts.verify_command(spec, data_dir)}"


def stand_in_tail(builder: tfds.core.DatasetBuilder) -> str:
    """What a stand-in record says after the file's path: the cause and the verify command of this dataset."""
    return (" could not be read to its end (a corrupted or truncated record, or a missing file: the reader's error "
            f"is logged above). {damage_hint(builder)}")


def _checked_file(path: tf.Tensor, examples: tf.Tensor, tail: str) -> tf.data.Dataset:
    """One shard's records, padded with stand-ins naming the file up to `examples` when the file breaks off."""
    # `ignore_errors` retries a file that cannot be opened forever (the reader only moves on after a read
    # error), so opening is tried first, outside it: reading one byte raises NotFoundError or
    # PermissionDeniedError naming the file, and yields nothing.
    opened = tf.data.FixedLengthRecordDataset(path, record_bytes=1, buffer_size=1).take(1).skip(1)
    records = tf.data.TFRecordDataset(path, buffer_size=_BUFFER_SIZE).ignore_errors(log_warning=True)
    stand_ins = tf.data.Dataset.from_tensors(tf.strings.join([_STAND_IN, path, tail])).repeat()
    return opened.concatenate(records).concatenate(stand_ins).take(examples)


def check_files_exist(builder: tfds.core.DatasetBuilder, instructions: Sequence[Any]) -> None:
    """FileNotFoundError naming the shard files of `instructions` that are gone (one listing of the folder)."""
    folder = os.fspath(builder.data_path)
    present = bucket.present(folder)  # a dataset read from a bucket: its prefix's listing
    try:
        present = present if present is not None else {name.rstrip("/") for name in tf.io.gfile.listdir(folder)}
    except tf.errors.OpError:
        return  # no listing (some object stores): the read names a missing file itself
    missing = sorted({os.fspath(f.filename) for f in instructions} - {os.path.join(folder, n) for n in present})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{builder.info.full_name}: shard files missing: {shown}. {damage_hint(builder)}")


def recorded_sizes(builder: tfds.core.DatasetBuilder) -> dict[str, int]:
    """Shard file name -> the bytes the build wrote, from its `shards.json` ({} without a usable one)."""
    path = os.path.join(os.fspath(builder.data_path), artifacts.SHARDS_NAME)
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            entries = json.loads(f.read()).get("shards", [])
        return {e["file"]: e["num_bytes"] for e in entries
                if isinstance(e, dict) and isinstance(e.get("file"), str) and type(e.get("num_bytes")) is int}  # not bool
    except (tf.errors.OpError, OSError, ValueError, AttributeError, TypeError):
        return {}


def longer_than_written(builder: tfds.core.DatasetBuilder, path: str, records: int, recorded: int) -> ValueError:
    """The error for a shard file holding more records than the build wrote into it."""
    return ValueError(
        f"{builder.info.full_name}: shard file {path} holds more than the build wrote into it ({records}); it is not "
        f"the file this build wrote, and reading only the {recorded} examples dataset_info.json lists would silently "
        f"leave the rest out. {damage_hint(builder)}")


def check_not_longer(builder: tfds.core.DatasetBuilder, instructions: Sequence[Any]) -> None:
    """ValueError naming a shard file longer than the build wrote it (`shards.json`): records a read would drop."""
    sizes = recorded_sizes(builder)
    for f in instructions:
        path = os.fspath(f.filename)
        written = sizes.get(os.path.basename(path))
        if written is None:
            continue
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.OpError:
            continue  # missing: named by check_files_exist or the read
        if size > written:
            raise longer_than_written(builder, path, f"{size} bytes, {written} recorded in {artifacts.SHARDS_NAME}",
                                      f.examples_in_shard)


def read_records(
    builder: tfds.core.DatasetBuilder, split: str, read_config: tfds.ReadConfig, shuffle_files: bool,
    instructions: Sequence[Any] | None = None,
) -> tf.data.Dataset:
    """Serialized records of a split, element for element as TFDS's reader gives them, each file checked whole.

    The order is exactly TFDS's own reader's (same file shuffle under the same seed, same interleave,
    input-context sharding and cardinality: `interleave_files`). What differs: TFDS's TFRecord reader
    stops at a damaged record with `DataLossError: corrupted record at 275398`, naming no file, and
    TensorFlow has no in-graph way to add the file to that error. So each file is read with its
    errors held back (`ignore_errors(log_warning=True)`: the reader's own message still goes to the
    log) and padded to the record count the build recorded with stand-in records: text that is no
    valid `tf.train.Example` and names the file and the `verify` command. A healthy file never
    reaches them (the padding is cut at its count); a damaged, truncated or missing file does, and
    the parse that follows fails with `InvalidArgumentError: Could not parse example input, value:
    '?vidvol: shard file … could not be read to its end …'`. This costs nothing per record (no
    per-record function: a function that takes a record string copies it, which doubled the reading
    CPU on 100 KB records). One limit: where a last partial batch is dropped, a file that lost only
    a few records may have all its stand-ins in that dropped batch; `python -m vidvol verify` always
    reports it. A file *longer* than the build wrote it (its size over the `num_bytes` of
    `shards.json`) is refused before reading (`check_not_longer`), as its records past the recorded
    count would otherwise be dropped without a word.

    Args:
      builder: the prepared dataset's builder.
      split: a TFDS split, slices allowed.
      read_config: TFDS's read options (shuffle seed, interleave, input context, options).
      shuffle_files: shuffle the files as `builder.as_dataset(shuffle_files=...)` does.
      instructions: the split's file instructions, when the caller has them (else `file_instructions`).

    Returns:
      A `tf.data.Dataset` of serialized `tf.train.Example` strings.

    Raises:
      FileNotFoundError: a shard file of the split is gone.
      ValueError: a shard file is longer than the build wrote it.
    """
    instructions = list(instructions) if instructions is not None else file_instructions(builder, split)
    tail = stand_in_tail(builder)
    check_files_exist(builder, instructions)
    check_not_longer(builder, instructions)
    do_skip = any(f.skip > 0 for f in instructions)
    do_take = any(not f.takes_all for f in instructions)

    def one_file(instruction: dict[str, tf.Tensor]) -> tf.data.Dataset:
        records = _checked_file(instruction["filepath"], instruction["examples"], tail)
        if do_skip:
            records = records.skip(instruction["skip"])
        if do_take:
            records = records.take(instruction["take"])
        return records

    return interleave_files(instructions, read_config, shuffle_files, one_file)


def interleave_files(
    instructions: Sequence[Any], read_config: tfds.ReadConfig, shuffle_files: bool,
    one_file: Callable[[dict[str, tf.Tensor]], tf.data.Dataset], extra: Mapping[str, Sequence[Any]] | None = None,
) -> tf.data.Dataset:
    """TFDS's file-level order over `instructions`: input-context sharding, seeded file shuffle, interleave.

    `one_file(instruction)` gives one file's elements; an instruction holds `filepath`, `examples`,
    `skip`, `take` and the `extra` columns (one value per instruction).
    """
    inputs = {
        "filepath": [os.fspath(f.filename) for f in instructions],
        "examples": tf.constant([f.examples_in_shard for f in instructions], tf.int64),
        "skip": tf.constant([f.skip for f in instructions], tf.int64),
        "take": tf.constant([f.take for f in instructions], tf.int64),
        **{k: tf.constant(v) for k, v in (extra or {}).items()},
    }
    ds = tf.data.Dataset.from_tensor_slices(inputs)
    context = read_config.input_context
    if context:
        ds = ds.shard(num_shards=context.num_input_pipelines, index=context.input_pipeline_id)
    if shuffle_files:
        ds = ds.shuffle(len(instructions), seed=read_config.shuffle_seed,
                        reshuffle_each_iteration=read_config.shuffle_reshuffle_each_iteration)
    deterministic = not (shuffle_files and read_config.shuffle_seed is None and read_config.options.deterministic is None)
    ds = ds.interleave(
        one_file, cycle_length=read_config.interleave_cycle_length, block_length=read_config.interleave_block_length,
        num_parallel_calls=read_config.num_parallel_calls_for_interleave_files, deterministic=deterministic,
    )
    if read_config.assert_cardinality and not context:
        ds = ds.apply(tf.data.experimental.assert_cardinality(sum(f.take for f in instructions)))
    return ds.with_options(read_config.options)


def read_examples(
    builder: tfds.core.DatasetBuilder, split: str, read_config: tfds.ReadConfig, shuffle_files: bool, decoders: Any = None,
    instructions: Sequence[Any] | None = None,
) -> tf.data.Dataset:
    """`builder.as_dataset(split, decoders=...)`'s examples (TFDS's parse and decode), read by `read_records`."""
    features = builder.info.features
    if isinstance(decoders, tfds.decode.PartialDecoding):
        features = tfds_api.extract_features(decoders, features)
        decoders = decoders.decoders
    records = read_records(builder, split, read_config, shuffle_files, instructions)
    parse = lambda record: features.deserialize_example(record, decoders=decoders)
    return records.map(parse, num_parallel_calls=read_config.num_parallel_calls_for_decode)

