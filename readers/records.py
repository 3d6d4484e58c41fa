"""Every record of a split by index: where it lies in its TFRecord shard, read by offset, checked once.

`vidvol.load` reads examples in an order computed from their index (`readers.order`), so it needs
each example's file, offset and length. `open_split` walks the TFRecord framing of every shard file
of the split once per process (`index_file`: one small read per few records, each record's length
header checked by its CRC; the records themselves are not read), keeps the walk while the file keeps
its size, mtime and inode, and numbers the split's examples as `tfds.load(shuffle_files=False)`
lists them file after file: its *storage order* (slices `train[a:b]` as TFDS takes them).

`RecordReads` is the Python body of the read: a batch of example indices -> their serialized
records (`os.pread`, thread-safe on one descriptor per file; other file systems through
`tf.io.gfile`). The first read of a record in a process reads its whole frame and checks its length
and data CRC32C, as TensorFlow's reader does on every read; later reads take just the data. A
damaged record, a file that breaks off before the records the build recorded, or a missing file
stops the read with an error naming the file and the `verify` command (a missing file: at `load`).

`fingerprint` names what a split is made of (dataset, version, split, each file's records and,
where the build recorded them, their SHA-256): an iterator checkpoint carries it, and a rebuilt
dataset refuses the old checkpoint (`readers.order`).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import glob
import hashlib
import json
import os
import threading
from typing import Any, Sequence

import google_crc32c
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import artifacts
from vidvol.readers import host_calls
from vidvol.readers import shards

HEADER, FOOTER = 12, 4  # TFRecord framing: u64 length + u32 masked crc; data; u32 masked crc of the data
_WINDOW = 1 << 16  # bytes read at a time while walking a file (the headers of small records share a read)
_CACHE_SIZE = 4096  # file walks kept per process


def _crc_library():
    """google-crc32c's bundled libcrc32c through ctypes (GIL released, any buffer, no copy), or None."""
    folder = os.path.join(os.path.dirname(os.path.dirname(google_crc32c.__file__)), "google_crc32c.libs")
    for path in sorted(glob.glob(os.path.join(folder, "libcrc32c*.so*"))):
        try:
            fn = ctypes.CDLL(path).crc32c_extend
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t), ctypes.c_uint32
        return fn
    return None


_crc_extend_c = _crc_library()


def crc32c_extend(crc: int, buffer) -> int:
    """CRC32C of `buffer` (bytes, bytearray, memoryview or array) continuing `crc`, without copying it."""
    data = np.frombuffer(buffer, np.uint8)
    if not data.size:
        return crc
    if _crc_extend_c is not None:
        return int(_crc_extend_c(crc, data.ctypes.data, data.size))
    return google_crc32c.extend(crc, data.tobytes())  # the extension takes only bytes: a copy


def masked(crc: int) -> int:
    """TFRecord's masked CRC32C."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def is_local(path: str) -> bool:
    return "://" not in path


@dataclasses.dataclass
class FileIndex:
    """Where one TFRecord file's records lie; `broken` says why the walk stopped early (None: it walked whole)."""

    path: str
    starts: np.ndarray  # int64: offset of each record's length header
    lengths: np.ndarray  # int64: each record's data length
    broken: str | None = None
    verified: np.ndarray = None  # bool: the record's frame and CRC32C were checked in this process

    def __post_init__(self):
        if self.verified is None:
            self.verified = np.zeros(len(self.starts), bool)


def index_file(path: str) -> FileIndex:
    """Walks the TFRecord framing of one file: each record's offset and length (length headers CRC-checked)."""
    local = is_local(path)
    f = open(path, "rb", buffering=0) if local else tf.io.gfile.GFile(path, "rb")
    try:
        size = os.fstat(f.fileno()).st_size if local else tf.io.gfile.stat(path).length
        starts, lengths, broken = [], [], None
        pos, win_at, win = 0, 0, b""
        while pos < size:
            if pos + HEADER > win_at + len(win):
                f.seek(pos)
                win_at, win = pos, f.read(_WINDOW)
            header = win[pos - win_at: pos - win_at + HEADER]
            if len(header) < HEADER:
                broken = f"a record header cut short at byte {pos}"
                break
            length = int.from_bytes(header[:8], "little")
            if masked(google_crc32c.value(header[:8])) != int.from_bytes(header[8:], "little"):
                broken = f"a corrupted record length at byte {pos}"
                break
            if pos + HEADER + length + FOOTER > size:
                broken = f"the record at byte {pos} runs past the end of the file (truncated)"
                break
            starts.append(pos)
            lengths.append(length)
            pos += HEADER + length + FOOTER
    finally:
        f.close()
    return FileIndex(path, np.asarray(starts, np.int64), np.asarray(lengths, np.int64), broken)


_cache: "collections.OrderedDict[tuple, FileIndex]" = collections.OrderedDict()
_cache_lock = threading.Lock()


def cached_index(path: str) -> FileIndex:
    """`index_file`, remembered while the file keeps its size, mtime and inode (each `load` reuses it)."""
    if is_local(path):
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, st.st_ino)
    else:
        st = tf.io.gfile.stat(path)
        key = (path, st.length, st.mtime_nsec)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    index = index_file(path)
    with _cache_lock:
        _cache[key] = index
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return index


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
        index = cached_index(os.fspath(f.filename))
        if len(index.starts) > int(f.examples_in_shard):  # never cut silently to the recorded count
            raise shards.longer_than_written(builder, index.path, f"{len(index.starts)} records", int(f.examples_in_shard))
        files.append(index)
        rows = np.arange(int(f.skip), int(f.skip) + int(f.take), dtype=np.int64)
        file_of.append(np.full(len(rows), len(files) - 1, np.int32))
        row_of.append(rows)
    return SplitRecords(builder.info.full_name, split, files, np.concatenate(file_of), np.concatenate(row_of),
                        fingerprint(builder, split, instructions), shards.damage_hint(builder))


class RecordReads(host_calls.HostCall):
    """Python body of the read (`read_records`): example indices -> their serialized records, each checked once."""

    def __init__(self, source: SplitRecords):
        self.source = source
        self._fds: dict[int, int] = {}
        self._remote = threading.local()
        self._lock = threading.Lock()
        super().__init__()

    def run(self, indices: np.ndarray) -> np.ndarray:
        out = np.empty(len(indices), object)
        for k, i in enumerate(np.asarray(indices).reshape(-1)):
            out[k] = self.record(int(i))
        return out

    def _pread(self, file: int, n: int, offset: int) -> bytes:
        path = self.source.files[file].path
        if is_local(path):
            fd = self._fds.get(file)
            if fd is None:
                with self._lock:
                    fd = self._fds.get(file)
                    if fd is None:
                        fd = self._fds[file] = os.open(path, os.O_RDONLY)
            return os.pread(fd, n, offset)
        handles = getattr(self._remote, "handles", None)
        if handles is None:
            handles = self._remote.handles = {}
        if file not in handles:
            handles[file] = tf.io.gfile.GFile(path, "rb")
        handles[file].seek(offset)
        return handles[file].read(n)

    def _damaged(self, file: int, what: str) -> ValueError:
        path = self.source.files[file].path
        return ValueError(f"vidvol: shard file {path} could not be read to its end ({what}). {self.source.verify}")

    def record(self, i: int) -> bytes:
        """The serialized record of example `i` of the split (storage order)."""
        file, row = int(self.source.file_of[i]), int(self.source.row_of[i])
        index = self.source.files[file]
        if row >= len(index.starts):
            why = index.broken or f"it holds {len(index.starts)} records, the build recorded more"
            raise self._damaged(file, why)
        start, length = int(index.starts[row]), int(index.lengths[row])
        if index.verified[row]:
            data = self._pread(file, length, start + HEADER)
            if len(data) != length:
                raise self._damaged(file, f"the record at byte {start} is cut short: the file changed since it was "
                                          "indexed")
            return data
        frame = self._pread(file, HEADER + length + FOOTER, start)
        view = memoryview(frame)
        if len(frame) != HEADER + length + FOOTER or int.from_bytes(frame[:8], "little") != length:
            raise self._damaged(file, f"the record at byte {start} is cut short or changed since it was indexed")
        if masked(crc32c_extend(0, view[HEADER:HEADER + length])) != int.from_bytes(frame[-FOOTER:], "little"):
            raise self._damaged(file, f"the record at byte {start} is corrupted: its CRC32C does not match")
        index.verified[row] = True
        return bytes(view[HEADER:HEADER + length])

    def __del__(self):
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def read_records(reads: RecordReads, indices: tf.Tensor) -> tf.Tensor:
    """The serialized records of a vector of example indices, in one Python call (a pure function of the indices)."""
    out = tf.numpy_function(reads, [indices], tf.string, stateful=False, name="vidvol_read_records")
    out.set_shape(indices.shape)
    return out
