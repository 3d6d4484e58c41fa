"""Every use of TFDS's private API in vidvol, checked once at import, with a public fallback where TFDS has one.

Each function here names what it reaches behind TFDS's underscores (or in modules TFDS does not
export) and its fallback; `available(name)` says which one is in use. `VIDVOL_TFDS_PUBLIC_ONLY=1`
(read at import) forces every fallback, so tests can prove the public path gives the same data.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

logger = logging.getLogger(__name__)

PUBLIC_ONLY_ENV = "VIDVOL_TFDS_PUBLIC_ONLY"


@dataclasses.dataclass(frozen=True)
class SerializerParts:
    """TFDS's steps from an encoded example to the values of its `tf.train.Example` (see `serializer_parts`)."""

    flatten_nest_dict: Callable[[Any], dict[str, Any]]
    add_ragged_fields: Callable[[Any, Any], Any]  # (value, tensor info) -> the value or its ragged parts
    item_to_np_array: Callable[..., np.ndarray]  # (item, shape=, dtype=) -> checked array, errors naming it
    as_bytes: Callable[[Any], bytes]
    is_integer: Callable[[Any], bool]
    is_floating: Callable[[Any], bool]
    is_string: Callable[[Any], bool]


def _serializer_parts() -> SerializerParts | None:
    """TFDS's example serializer internals (tensorflow-datasets 4.9), or None where one is missing."""
    try:
        from tensorflow_datasets.core import example_serializer
        from tensorflow_datasets.core import utils
        from tensorflow_datasets.core.utils import dtype_utils
    except ImportError:
        return None
    private = ("_add_ragged_fields", "_item_to_np_array", "_as_bytes")
    if not all(hasattr(example_serializer, n) for n in private) or not hasattr(utils, "flatten_nest_dict"):
        return None
    return SerializerParts(
        flatten_nest_dict=utils.flatten_nest_dict,
        add_ragged_fields=example_serializer._add_ragged_fields,
        item_to_np_array=example_serializer._item_to_np_array,
        as_bytes=example_serializer._as_bytes,
        is_integer=dtype_utils.is_integer,
        is_floating=dtype_utils.is_floating,
        is_string=dtype_utils.is_string,
    )


_SERIALIZER_PARTS = _serializer_parts()


def _check() -> dict[str, bool]:
    """Which private entry points exist with the shape we call them with.

    One has no function of its own: `GeneratorBasedBuilder._download_and_prepare(dl_manager,
    download_config)`, the hook the streaming writer overrides (a documented override point,
    checked for its signature; without it the import fails naming the TFDS versions to install).
    """
    found: dict[str, bool] = {}
    try:
        from tensorflow_datasets.core import reader

        params = inspect.signature(reader._read_files).parameters
        found["read_files"] = {"file_instructions", "read_config", "shuffle_files", "disable_shuffling", "file_format"} <= set(params)
    except (ImportError, AttributeError, TypeError, ValueError):
        found["read_files"] = False
    try:
        from tensorflow_datasets.core import example_parser

        found["example_parser"] = hasattr(example_parser, "ExampleParser")
    except ImportError:
        found["example_parser"] = False
    found["example_serializer"] = _SERIALIZER_PARTS is not None
    template = getattr(tfds.core.DatasetBuilder, "_get_filename_template", None)
    found["filename_template"] = template is not None and list(inspect.signature(template).parameters) == ["self", "split_name"]
    prepare = getattr(tfds.core.GeneratorBasedBuilder, "_download_and_prepare", None)
    found["download_and_prepare"] = prepare is not None and list(inspect.signature(prepare).parameters)[:3] == [
        "self", "dl_manager", "download_config",
    ]
    try:
        found["set_features"] = "self._features" in inspect.getsource(tfds.core.DatasetInfo.features.fget)
    except (AttributeError, OSError, TypeError):
        found["set_features"] = False
    try:
        found["sequence_feature"] = "self._feature" in inspect.getsource(tfds.features.Sequence.feature.fget)
    except (AttributeError, OSError, TypeError):
        found["sequence_feature"] = False
    try:
        found["ffmpeg_args"] = "self._extra_ffmpeg_args" in inspect.getsource(tfds.features.Video.__init__)
    except (AttributeError, OSError, TypeError):
        found["ffmpeg_args"] = False
    try:
        source = inspect.getsource(tfds.features.Video.__init__)
        found["video_init"] = all(f"self.{n} =" in source for n in ("_encoding_format", "_extra_ffmpeg_args"))
    except (AttributeError, OSError, TypeError):
        found["video_init"] = False
    return found


_NO_FALLBACK = ("set_features", "sequence_feature")
_PUBLIC_ONLY = os.environ.get(PUBLIC_ONLY_ENV, "").lower() in ("1", "true", "yes")
_FOUND = {name: ok and (name in _NO_FALLBACK or not _PUBLIC_ONLY) for name, ok in _check().items()}
if not all(_FOUND.values()):
    logger.info(
        "TFDS %s: using public fallbacks for %s", tfds.__version__, sorted(n for n, ok in _FOUND.items() if not ok)
    )
if not _check()["download_and_prepare"]:
    raise ImportError(
        f"tensorflow-datasets {tfds.__version__}: GeneratorBasedBuilder._download_and_prepare(dl_manager, "
        "download_config) is gone, and vidvol's streaming writer overrides it; install a tensorflow-datasets "
        "version within setup.cfg's range"
    )


def available(name: str) -> bool:
    """Whether the private entry point `name` is used (False: its public fallback is)."""
    return _FOUND[name]


def serializer_parts() -> SerializerParts | None:
    """TFDS's example serializer internals for the direct writer, or None: serialize through TFDS's `ExampleSerializer`.

    `example_serializer._add_ragged_fields`, `._item_to_np_array`, `._as_bytes` (with
    `utils.flatten_nest_dict` and `utils.dtype_utils`): how TFDS turns an encoded example into the
    values of its `tf.train.Example` (nested sequences, dtype and shape checks, text as bytes); the
    streaming writer writes the message around them itself (`vidvol.builders.writer.example_bytes`).
    Fallback (None): TFDS's own `ExampleSerializer` + `SerializeToString(deterministic=True)` (the
    same bytes, more copies).

    Returns:
      The `SerializerParts`, or None where they are not available (or `VIDVOL_TFDS_PUBLIC_ONLY` is set).
    """
    return _SERIALIZER_PARTS if available("example_serializer") else None


def read_files(builder: tfds.core.DatasetBuilder, split: str, read_config: tfds.ReadConfig, shuffle_files: bool) -> tf.data.Dataset:
    """Serialized records of a split, read as `builder.as_dataset` reads them before its parse map.

    TFDS's `reader._read_files`: same file shuffling (`shuffle_seed`), `input_context` sharding by
    file, interleave, cardinality and options, so the stream matches `as_dataset`'s element for
    element. `readers.shards.read_records` is tested against it. Only callable when
    `available("read_files")`; without it (or under `VIDVOL_TFDS_PUBLIC_ONLY`) the read side also
    leaves the per-batch parse (`BatchParser.for_features`) and parses per example, same batches.

    Args:
      builder: the prepared dataset's builder.
      split: a TFDS split.
      read_config: TFDS's read options.
      shuffle_files: shuffle the files as `as_dataset(shuffle_files=...)` does.

    Returns:
      A `tf.data.Dataset` of serialized records.
    """
    if not available("read_files"):
        raise RuntimeError("TFDS's reader._read_files is not available; read through builder.as_dataset")
    from tensorflow_datasets.core import reader

    info = builder.info
    file_format = read_config.file_format or info.file_format or tfds.core.FileFormat.TFRECORD
    return reader._read_files(
        file_instructions=info.splits[split].file_instructions,
        read_config=read_config,
        shuffle_files=shuffle_files,
        disable_shuffling=info.disable_shuffling,
        file_format=tfds.core.FileFormat.from_value(file_format),
    )


def parse_specs(serialized_infos: dict[str, Any]) -> dict[str, Any] | None:
    """TFDS's flat `tf.io` parse specs of `{feature: get_serialized_info()}`, or None without the parser.

    `example_parser.ExampleParser(...).flat_feature_specs`. Fallback (None): the read side parses per
    example through `as_dataset`'s own decoders.

    Args:
      serialized_infos: each feature's `get_serialized_info()`.

    Returns:
      The flat `tf.io` feature specs, or None.
    """
    if not available("example_parser"):
        return None
    from tensorflow_datasets.core import example_parser

    return example_parser.ExampleParser(serialized_infos).flat_feature_specs


def filename_template(builder: tfds.core.DatasetBuilder, split: str) -> tfds.core.ShardedFileTemplate:
    """The shard file naming of `split` in the builder's data directory.

    `DatasetBuilder._get_filename_template`. Fallback: the public `tfds.core.ShardedFileTemplate`
    built from the same fields.

    Args:
      builder: the dataset's builder.
      split: the split name.

    Returns:
      The split's `tfds.core.ShardedFileTemplate`.
    """
    if available("filename_template"):
        return builder._get_filename_template(split_name=split)
    return tfds.core.ShardedFileTemplate(
        split=split, dataset_name=builder.name, data_dir=builder.data_path,
        filetype_suffix=builder.info.file_format.file_suffix,
    )


def given_manual_dir(dl_manager: Any) -> str | None:
    """The manual_dir a build was given, unchecked (a bucket URL stays a URL), or None.

    `DownloadManager._manual_dir`: the manual_dir as given, before `dl_manager.manual_dir` checks it
    through tf.io.gfile (which has no s3:// here). Fallback (None): the public `dl_manager.manual_dir`,
    which serves local paths (and schemes tf.io.gfile has, such as gs://) but not s3://.

    Args:
      dl_manager: the build's `tfds.download.DownloadManager`.

    Returns:
      The manual_dir as a string, or None.
    """
    given = getattr(dl_manager, "_manual_dir", None) if not _PUBLIC_ONLY else None
    return None if given is None else os.fspath(given)


DEFAULT_MAX_SHARD_SIZE = tfds.download.DownloadConfig().max_shard_size  # TFDS's default, to tell "not set"
DEFAULT_MIN_SHARD_SIZE = tfds.download.DownloadConfig().min_shard_size


def replace_features(info: tfds.core.DatasetInfo, features: tfds.features.FeaturesDict) -> None:
    """Sets the features of a builder's info once its input is read, before any example is written.

    `DatasetInfo._features`: a dataset whose features depend on its input (`video_folder`: the class
    names found in manual_dir, `start`/`end` only for a CSV with time ranges) sets them here. TFDS has
    no public setter (tfds ImageFolder reads its folder in `__init__`, which a manual_dir build
    cannot); there is no fallback, so `VIDVOL_TFDS_PUBLIC_ONLY` leaves it in use and a TFDS without
    it fails that build with a clear error.

    Args:
      info: the builder's `DatasetInfo`.
      features: the features found in the input.

    Raises:
      RuntimeError: this TFDS keeps its features elsewhere.
    """
    if not available("set_features"):
        raise RuntimeError(
            f"tensorflow-datasets {tfds.__version__}: DatasetInfo keeps its features elsewhere than `_features`, and "
            "video_folder sets the features it finds in manual_dir there; install a tensorflow-datasets version "
            "within setup.cfg's range"
        )
    info._features = features
    if info.features is not features:
        raise RuntimeError(f"tensorflow-datasets {tfds.__version__}: DatasetInfo.features did not take the new features")


def replace_sequence_feature(sequence: tfds.features.Sequence, feature: tfds.features.FeatureConnector) -> None:
    """Sets the per-element feature of a TFDS `Sequence` (a `Video`'s frame feature), which TFDS offers no setter for.

    `Sequence._feature`: `vidvol.core.features.VideoFrames` is TFDS's `Video` with its per-frame
    feature replaced by one that decodes a whole sequence in one call. No fallback.

    Args:
      sequence: the `Sequence` (a `Video`).
      feature: its new per-element feature.

    Raises:
      RuntimeError: this TFDS keeps the inner feature elsewhere.
    """
    if not available("sequence_feature"):
        raise RuntimeError(
            f"tensorflow-datasets {tfds.__version__}: Sequence keeps its inner feature elsewhere than `_feature`, and "
            "vidvol's VideoFrames replaces it there; install a tensorflow-datasets version within setup.cfg's range"
        )
    sequence._feature = feature
    if sequence.feature is not feature:
        raise RuntimeError(f"tensorflow-datasets {tfds.__version__}: Sequence.feature did not take the new feature")


def ffmpeg_args(video: tfds.features.Video) -> list[str]:
    """The extra ffmpeg arguments a TFDS `Video` feature was made with (none where TFDS does not keep them).

    `Video._extra_ffmpeg_args`: `VideoFrames.from_video` carries a `Video`'s ffmpeg arguments over.
    Fallback ([]): the constructor's default, which only matters when encoding from video files.

    Args:
      video: a TFDS `Video` feature.

    Returns:
      Its extra ffmpeg arguments.
    """
    if not available("ffmpeg_args"):
        return []
    return list(getattr(video, "_extra_ffmpeg_args", ()))


def init_video(video: tfds.features.Video, frame: tfds.features.Image, *, length: int | None, encoding_format: str,
               ffmpeg_extra_args: Sequence[str], doc: Any) -> None:
    """Makes `video` what TFDS's `Video.__init__` makes, around the given frame feature, without importing TF.

    `Video.__init__` turns its `dtype` into a `tf.DType` (importing TensorFlow, seconds) only to hand it to
    the `Image` it makes; `vidvol.core.features.VideoFrames` makes its own frame feature (NumPy dtype) and
    sets `Video._encoding_format` and `Video._extra_ffmpeg_args` as `Video.__init__` does, so that
    `tfds.builder(...)` and its `info` need no TensorFlow. Fallback: `Video.__init__` (which imports
    TensorFlow), then the frame feature put in its place.

    Args:
      video: the `Video` being made (`self` in a subclass's `__init__`).
      frame: its per-frame feature (a `tfds.features.Image`).
      length: the number of frames (None: variable).
      encoding_format: the frames' image format, as `Video` takes it.
      ffmpeg_extra_args: as `Video` takes them.
      doc: as `Video` takes it.
    """
    if not available("video_init"):
        shape = None if frame.shape is None else (length, *frame.shape)
        tfds.features.Video.__init__(video, shape, encoding_format=encoding_format, ffmpeg_extra_args=ffmpeg_extra_args,
                                     use_colormap=frame.use_colormap, dtype=frame.np_dtype, doc=doc)
        replace_sequence_feature(video, frame)
        return
    tfds.features.Sequence.__init__(video, frame, length=length, doc=doc)
    video._encoding_format = encoding_format
    video._extra_ffmpeg_args = list(ffmpeg_extra_args or [])


class _DropDtypeDeprecation(logging.Filter):
    """Drops TFDS's own "`X.dtype` is deprecated" warning, which its partial decoding logs about itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return ".dtype` is deprecated" not in record.getMessage()


def extract_features(decoders: tfds.decode.PartialDecoding, features: tfds.features.FeaturesDict
                     ) -> tfds.features.FeaturesDict:
    """`decoders.extract_features(features)` without the deprecation warnings TFDS's own code logs there.

    TFDS 4.9's partial decoding compares features through the deprecated `FeatureConnector.dtype`
    and so warns about its own call, up to a few times per process; nothing a user can change.
    """
    absl_logger, drop = logging.getLogger("absl"), _DropDtypeDeprecation()
    absl_logger.addFilter(drop)
    try:
        return decoders.extract_features(features)
    finally:
        absl_logger.removeFilter(drop)
