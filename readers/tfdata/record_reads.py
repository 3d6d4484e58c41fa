"""The record read of `vidvol.load`: a batch of example indices -> their serialized records, each checked once.

`os.pread` on one descriptor per file (thread-safe); shards in a bucket (`readers.bucket`) by concurrent ranged
GETs, one per record of the batch, from the shard cache, or (shard-streaming order) sliced from whole shards held
in memory (`shard_window`); other file systems through `tf.io.gfile`. The first
read of a record in a process reads its whole frame and checks its length and data CRC32C, as TensorFlow's
reader does on every read; later reads take just the data. A damaged record names the file and `verify`.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import tensorflow as tf

from vidvol.core import store
from vidvol.core.tfrecord import FOOTER, HEADER, crc32c_extend, is_local, masked
from vidvol.readers import bucket, host_calls
from vidvol.readers.records import SplitRecords
from vidvol.readers.tfdata.shard_window import ShardWindow

class RecordReads(host_calls.HostCall):
    """Python body of the read (`read_records`): example indices -> their serialized records, each checked once."""

    def __init__(self, source: SplitRecords, cache_limit: int | None = None, window: ShardWindow | None = None):
        self._fds: dict[int, int] = {}
        self.source = source
        self.cache_limit = cache_limit  # bytes of the bucket shard cache (None: ranged GETs)
        self.window = window  # whole shards in memory (ShardOrder from a bucket); None: per record
        self._buckets = {k: bucket.shard_of_url(f.path) for k, f in enumerate(source.files)}
        self._buckets = {k: v for k, v in self._buckets.items() if v is not None}
        if cache_limit is not None:
            for remote, name in self._buckets.values():
                bucket.check_fits(remote, name, cache_limit)  # at load(), not at the first batch
        self._remote = threading.local()
        self._lock = threading.Lock()
        super().__init__()

    def run(self, indices: np.ndarray, epoch=None, key=None) -> np.ndarray:
        flat = np.asarray(indices).reshape(-1)
        out = np.empty(len(flat), object)
        if self._buckets and self.window is not None and epoch is not None and len(flat):
            return self._from_window(flat, out, int(np.asarray(epoch).reshape(-1)[0]), int(np.asarray(key).reshape(-1)[0]))
        if self._buckets:
            return self._from_buckets(flat, out)
        for k, i in enumerate(flat):
            out[k] = self.record(int(i))
        return out

    def _from_buckets(self, flat: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The batch's records, those of bucket shards fetched together per shard (concurrent GETs, or the cache)."""
        wanted: dict[int, list[int]] = {}
        for k, i in enumerate(flat):
            file = int(self.source.file_of[int(i)])
            if file in self._buckets:
                wanted.setdefault(file, []).append(k)
            else:
                out[k] = self.record(int(i))
        fetched: list[tuple[int, int, tuple[int, int, bool]]] = []  # (file, k, span) of the ranged GETs
        for file, ks in wanted.items():
            spans = [self._span(file, int(self.source.row_of[int(flat[k])])) for k in ks]
            if self.cache_limit is None:
                fetched += [(file, k, span) for k, span in zip(ks, spans)]
                continue
            remote, name = self._buckets[file]
            path = bucket.ensure_cached(remote, name, self.cache_limit)
            fd = os.open(path, os.O_RDONLY)  # opened per batch: an evicted shard's space is freed at once
            try:
                chunks = [os.pread(fd, n, start) for start, n, _ in spans]
            finally:
                os.close(fd)
            for k, span, data in zip(ks, spans, chunks):
                out[k] = self._finish(file, int(self.source.row_of[int(flat[k])]), span, data)
        # Every shard's records of the batch at once: a shuffled batch spreads over many shards.
        chunks = store.read_many([(self.source.files[file].path, start, start + n) for file, _, (start, n, _) in fetched])
        for (file, k, span), data in zip(fetched, chunks):
            out[k] = self._finish(file, int(self.source.row_of[int(flat[k])]), span, data)
        return out

    def _from_window(self, flat: np.ndarray, out: np.ndarray, epoch: int, key: int) -> np.ndarray:
        """The batch's records sliced from whole shards held in the window (fetched whole, ahead of the reader)."""
        files = self.source.file_of[flat]
        with self.window.holding([int(f) for f in np.unique(files) if int(f) in self._buckets], epoch, key) as held:
            for k, (i, file) in enumerate(zip(flat.tolist(), files.tolist())):
                if file not in held:
                    out[k] = self.record(int(i))
                    continue
                row = int(self.source.row_of[i])
                start, n, whole = self._span(file, row)
                out[k] = self._finish(file, row, (start, n, whole), bytes(memoryview(held[file])[start:start + n]))
        return out

    def _finish(self, file: int, row: int, span: tuple[int, int, bool], data: bytes) -> bytes:
        start, n, whole = span
        return self._checked(file, row, data) if whole else self._data(file, start, n, data)

    def _span(self, file: int, row: int) -> tuple[int, int, bool]:
        """(offset, bytes, whole frame?) of one record's read: just its data once its frame was checked."""
        index = self.source.files[file]
        if row >= len(index.starts):
            why = index.broken or f"it holds {len(index.starts)} records, the build recorded more"
            raise self._damaged(file, why)
        start, length = int(index.starts[row]), int(index.lengths[row])
        if index.verified[row]:
            return start + HEADER, length, False
        return start, HEADER + length + FOOTER, True

    def _data(self, file: int, start: int, length: int, data: bytes) -> bytes:
        if len(data) != length:
            raise self._damaged(file, f"the record at byte {start - HEADER} is cut short: the file changed since it "
                                      "was indexed")
        return data

    def _checked(self, file: int, row: int, frame: bytes) -> bytes:
        """The data of a record's whole frame, its length and CRC32C checked (then marked verified)."""
        index = self.source.files[file]
        start, length = int(index.starts[row]), int(index.lengths[row])
        view = memoryview(frame)
        if len(frame) != HEADER + length + FOOTER or int.from_bytes(frame[:8], "little") != length:
            raise self._damaged(file, f"the record at byte {start} is cut short or changed since it was indexed")
        if masked(crc32c_extend(0, view[HEADER:HEADER + length])) != int.from_bytes(frame[-FOOTER:], "little"):
            raise self._damaged(file, f"the record at byte {start} is corrupted: its CRC32C does not match")
        index.verified[row] = True
        return bytes(view[HEADER:HEADER + length])

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
        start, n, whole = self._span(file, row)
        data = self._pread(file, n, start)
        return self._checked(file, row, data) if whole else self._data(file, start, n, data)

    def __del__(self):
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def read_records(reads: RecordReads, indices: tf.Tensor, epoch: tf.Tensor | None = None,
                 key: tf.Tensor | None = None) -> tf.Tensor:
    """The serialized records of a vector of example indices, in one Python call (a pure function of the indices).

    `epoch` and `key` (the draws'), given to a read through a `ShardWindow`, say where the reader is in the
    epoch's shard sequence (what it fetches ahead); the records are the indices' alone.
    """
    args = [indices] if epoch is None or reads.window is None else [indices, epoch, key]
    out = tf.numpy_function(reads, args, tf.string, stateful=False, name="vidvol_read_records")
    out.set_shape(indices.shape)
    return out
