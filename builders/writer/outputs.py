"""Where a build's files go: local and gs:// paths through tf.io.gfile, a bucket (s3://, ...) through core.store.

TensorFlow here has no s3:// file system, so a data_dir in a bucket is written by vidvol itself: a shard
is written to the worker's local scratch and uploaded whole when complete; small files (sidecars,
progress, the plan) are single PUTs, which appear whole or not at all; a rename is a server-side copy.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.core import store

SCRATCH_PREFIX = "vidvol-shard-"  # a shard on its way to a bucket, in the worker's TMPDIR


def is_bucket(path: str) -> bool:
    """Whether `path` is written through core.store (a URL tf.io.gfile cannot open)."""
    return store.is_bucket(path)


def exists(path: str) -> bool:
    """Whether the file (or object) exists."""
    return store.exists(path) if is_bucket(path) else tf.io.gfile.exists(path)


def remove(path: str) -> None:
    """Removes a file; a missing one is not an error."""
    if is_bucket(path):
        store.remove(path)
    else:
        with contextlib.suppress(tf.errors.NotFoundError):
            tf.io.gfile.remove(path)


def rename(src: str, dst: str) -> None:
    """Moves a file, replacing `dst` (a server-side copy and delete in a bucket)."""
    if is_bucket(src):
        store.copy(src, dst)
        store.remove(src)
    else:
        tf.io.gfile.rename(src, dst, overwrite=True)


def read_bytes(path: str) -> bytes:
    """The whole file."""
    if is_bucket(path):
        return store.read_bytes(path)
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def read_range(path: str, offset: int, length: int) -> bytes:
    """`length` bytes from `offset` (one ranged GET in a bucket)."""
    if is_bucket(path):
        return store.read_range(path, offset, offset + length)
    with tf.io.gfile.GFile(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def write_whole(path: str, data: bytes) -> None:
    """Writes a small file so that a reader sees all of it or none: one PUT, or a temporary file then a rename."""
    if is_bucket(path):
        store.write_bytes(path, data)
        return
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with tf.io.gfile.GFile(tmp, "wb") as f:
        f.write(data)
    tf.io.gfile.rename(tmp, path, overwrite=True)


@contextlib.contextmanager
def scratch_file(final: str) -> Iterator[str]:
    """A local path to write `final`'s bytes to before they are uploaded; removed on the way out, whatever happens."""
    fd, local = tempfile.mkstemp(prefix=SCRATCH_PREFIX, suffix="-" + os.path.basename(final).replace("/", "_"))
    os.close(fd)
    try:
        yield local
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(local)
