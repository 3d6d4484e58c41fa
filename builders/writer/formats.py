"""What a build may write, checked before anything is: the file format, the TFDS build options, the data_dir.

The shards are written in the builder's TFDS file format (`file_format=`, `tfds build --file_format`)
through TFDS's own file adapter for it, fed one record at a time (`write_records`): `tfrecord`
(the default, read by `tfds.load` and `vidvol.load`) or `array_record` (random access:
`tfds.data_source`, Grain, PyTorch). Any other format, a TFDS build option the streaming writer
does not honour, or a data_dir tf.io.gfile cannot write is refused before anything is written.
"""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Callable, Iterable

from tensorflow_datasets.core import file_adapters

from vidvol.core import redact, store, tfds_api
from vidvol.core.urls import scheme

# The file formats the streaming writer honours, each written by TFDS's own file adapter, which takes an
# iterator of records and writes them as they come (tfrecord: tf.io.TFRecordWriter; array_record:
# ArrayRecordWriter with TFDS's `group_size:1`, one record per chunk, for random access).
STREAMING_FORMATS = (file_adapters.FileFormat.TFRECORD, file_adapters.FileFormat.ARRAY_RECORD)
# Why the other TFDS formats are refused (a flag we do not honour must never write a mislabelled dataset).
_REFUSED_WHY = {
    "parquet": "TFDS's Parquet adapter holds 100 serialized examples at a time in memory (hundreds of MiB "
               "for video or MRI examples), against the streaming writer's one-example bound",
    "riegeli": "TFDS reads Riegeli only through the `riegeli` TensorFlow ops, which are not installed here, "
               "and it offers no random access",
}
# File systems ArrayRecord's C++ writer and reader open (plain files only).
_ARRAY_RECORD_SCHEMES = ("", "file")


def check_file_format(file_format: str | file_adapters.FileFormat | None, data_dir: str | os.PathLike | None = None) -> file_adapters.FileFormat:
    """The TFDS FileFormat a build writes (None: tfrecord); ValueError, before anything is written, for one we cannot honour."""
    fmt = file_adapters.FileFormat.from_value(file_format) if file_format else file_adapters.DEFAULT_FILE_FORMAT
    if fmt not in STREAMING_FORMATS:
        why = _REFUSED_WHY.get(fmt.value, "vidvol's streaming shard writer does not write it")
        raise ValueError(
            f"file_format {fmt.value!r} is not supported by vidvol builds ({why}); use "
            + " or ".join(repr(f.value) for f in STREAMING_FORMATS)
            + " (array_record for random access: tfds.data_source, Grain, PyTorch)"
        )
    if fmt is file_adapters.FileFormat.ARRAY_RECORD and data_dir is not None:
        s = scheme(data_dir)
        # A bucket data_dir is fine: vidvol writes each shard to local scratch and uploads it (outputs, bucket).
        if s not in _ARRAY_RECORD_SCHEMES and not store.is_bucket(os.fspath(data_dir)):
            raise ValueError(
                f"data_dir {os.fspath(data_dir)}: ArrayRecord files are written and read as local files only (no "
                f"{s}:// in array_record); build into a local data_dir and copy the result to {s}:// afterwards, or "
                "build file_format='tfrecord' there"
            )
    return fmt


# TFDS build options (DownloadConfig fields) the streaming writer does not honour, with why and what to
# use instead: a build that sets one fails before anything is written, rather than ignoring it.
# Honoured: manual_dir, download_mode (reuse / --overwrite), max_examples_per_split, beam_runner,
# beam_options, num_shards, max_shard_size, file_format (see check_file_format). Without effect on what
# is written, so accepted: nondeterministic_order (vidvol's order is deterministic either way),
# compute_stats (TFDS 4.9 computes no statistics), the download-only fields (extract_dir,
# register_checksums, force_checksums_validation, try_download_gcs, verify_ssl,
# override_max_simultaneous_downloads: vidvol's datasets download nothing).
UNHONOURED_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "min_shard_size": (
        lambda v: v != tfds_api.DEFAULT_MIN_SHARD_SIZE,
        "shards are planned before anything is decoded from num_shards or max_shard_size; set one of those",
    ),
    "ignore_duplicates": (
        bool,
        "example keys are source ids, unique by construction; a duplicate is an error in the inputs and "
        "fails the build naming it",
    ),
}


def check_build_options(download_config: Any) -> None:
    """ValueError listing every set TFDS build option in UNHONOURED_OPTIONS, before anything is written."""
    if download_config is None:
        return
    refused = [
        f"{name}={getattr(download_config, name)!r} ({why})"
        for name, (is_set, why) in UNHONOURED_OPTIONS.items()
        if hasattr(download_config, name) and is_set(getattr(download_config, name))
    ]
    if refused:
        raise ValueError(
            "vidvol builds do not honour these TFDS build options, so nothing was built: " + "; ".join(refused)
            + ". Remove them (e.g. from --download_config) and build again."
        )


def write_records(file_format: str | file_adapters.FileFormat, path: str, records: Iterable[tuple[str, bytes]]) -> None:
    """Writes `(key, serialized example)` pairs to `path` as they come, in `file_format` (TFDS's adapter)."""
    fmt = check_file_format(file_format)
    file_adapters.ADAPTER_FOR_FORMAT[fmt].write_examples(path, records)


# Schemes tf.io.gfile writes in this TensorFlow (gs:// is built in); any other URL is a bucket vidvol writes itself.
DATA_DIR_SCHEMES = ("gs", "file")


def check_data_dir(path: str | os.PathLike | None, *, bucket_ok: bool = False) -> None:
    """Raises ValueError for a data_dir this build cannot write.

    Args:
      path: the data_dir (None: TFDS's default).
      bucket_ok: whether a bucket URL (s3://, any fsspec protocol) is written by vidvol here, as in
        `python -m vidvol build`; `tfds build` and `download_and_prepare` root TFDS at the data_dir, whose
        tf.io.gfile has no s3:// file system.
    """
    if path is None:
        return
    text = os.fspath(path)
    s = scheme(text)
    if not s or s in DATA_DIR_SCHEMES:
        return
    if bucket_ok:
        import fsspec

        try:
            fsspec.get_filesystem_class(s)
        except (ImportError, ValueError) as e:
            raise ValueError(f"data_dir {redact.url(text)}: fsspec has no {s}:// file system here ({e})") from None
        return
    raise ValueError(
        f"data_dir {redact.url(text)}: TFDS writes a dataset through tf.io.gfile, which has no {s}:// file system "
        f"in this TensorFlow (hdfs:// and s3:// left core TensorFlow in 2.6). Build into the bucket with "
        f"`python -m vidvol build NAME --data_dir {redact.url(text)}` (vidvol writes the shards and metadata there "
        f"itself), or into a local data_dir and `python -m vidvol push` it."
    )
