"""The record read of `vidvol.load`: a batch of example indices -> their serialized records, each checked once.

`os.pread` on one descriptor per file (thread-safe), other file systems through `tf.io.gfile`. The first read of
a record in a process reads its whole frame and checks its length and data CRC32C, as TensorFlow's reader does
on every read; later reads take just the data. A damaged record names the file and the `verify` command.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import tensorflow as tf

from vidvol.core.tfrecord import FOOTER, HEADER, crc32c_extend, is_local, masked
from vidvol.readers import host_calls
from vidvol.readers.records import SplitRecords

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
