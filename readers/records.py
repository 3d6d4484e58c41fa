"""Every example of a split by index: its file, record and the split's fingerprint (`open_split`).

The records' places come from `core.tfrecord` (one walk of each shard file per process); examples are numbered
as `tfds.load(shuffle_files=False)` lists them, file after file (the split's storage order). `fingerprint`
names what the split is made of; an iterator checkpoint carries it and a rebuilt dataset refuses it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import artifacts
from vidvol.core.tfrecord import FileIndex, cached_index
from vidvol.readers import bucket, shards

def _recorded_digests(builder: tfds.core.DatasetBuilder) -> dict[str, str]:
    """File name -> SHA-256 from the build's `shards.json` ({} for builds without one)."""
    path = os.path.join(os.fspath(builder.data_path), artifacts.SHARDS_NAME)
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            doc = json.loads(f.read())
    except (tf.errors.OpError, OSError, ValueError):
        return {}
    return {e["file"]: e.get(doc.get("checksum", "sha256")) for e in doc.get("shards", []) if "file" in e}


def fingerprint(builder: tfds.core.DatasetBuilder, split: str, instructions: Sequence[Any]) -> str:
    """What the split is made of, as one line: dataset, version, split, examples, files and a content hash.

    The hash covers each file's name, record count and the records taken, and its SHA-256 where the
    build recorded one in `shards.json` (else its size): a rebuild changes it, a copy or move does not.
    """
    digests = _recorded_digests(builder)
    parts = []
    for f in instructions:
        name = os.path.basename(os.fspath(f.filename))
        content = digests.get(name)
        if content is None:
            try:
                content = f"bytes={tf.io.gfile.stat(os.fspath(f.filename)).length}"
            except tf.errors.OpError:
                content = "missing"
        parts.append([name, int(f.examples_in_shard), int(f.skip), int(f.take), content])
    digest = hashlib.sha256(json.dumps([builder.info.full_name, split, parts]).encode()).hexdigest()[:16]
    examples = sum(int(f.take) for f in instructions)
    checked = "the SHA-256 of each shard recorded at build time" if digests else "the size of each shard"
    return (f"{builder.info.full_name} split {split}: {examples} examples in {len(instructions)} shard files, "
            f"build {digest} (from {checked})")


@dataclasses.dataclass
class SplitRecords:
    """The examples of one split in storage order: file, offset and length of each, and how to report damage."""

    name: str  # dataset full name
    split: str
    files: list[FileIndex]
    file_of: np.ndarray  # int32 per example: its file
    row_of: np.ndarray  # int64 per example: its record in that file
    fingerprint: str
    verify: str  # "Every damaged file, with the command that rebuilds it: python -m vidvol verify ..."

    def __len__(self) -> int:
        return len(self.file_of)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def open_split(builder: tfds.core.DatasetBuilder, split: str) -> SplitRecords:
    """The record index of `split` (files walked once per process); a missing file is a FileNotFoundError naming it,
    a file holding more records than the build wrote a ValueError naming it."""
    instructions = shards.file_instructions(builder, split)
    shards.check_files_exist(builder, instructions)
    files, file_of, row_of = [], [], []
    for f in instructions:
        in_bucket = bucket.remote_of(f.filename)  # a shard left in its bucket: indexed by ranged GETs
        index = bucket.index(*in_bucket) if in_bucket else cached_index(os.fspath(f.filename))
        if len(index.starts) > int(f.examples_in_shard):  # never cut silently to the recorded count
            raise shards.longer_than_written(builder, index.path, f"{len(index.starts)} records", int(f.examples_in_shard))
        files.append(index)
        rows = np.arange(int(f.skip), int(f.skip) + int(f.take), dtype=np.int64)
        file_of.append(np.full(len(rows), len(files) - 1, np.int32))
        row_of.append(rows)
    return SplitRecords(builder.info.full_name, split, files, np.concatenate(file_of), np.concatenate(row_of),
                        fingerprint(builder, split, instructions), shards.damage_hint(builder))
