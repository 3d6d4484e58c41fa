"""TFRecord framing: CRC32C, the record walk and its per-process cache, shared by every reader and `verify`.

A TFRecord file is a run of frames: u64 length, u32 masked CRC32C of the length, the data, u32 masked CRC32C
of the data. `walk` reads the frames' headers (few small reads: the headers of small records share a window),
`records` reads and checks whole frames, `cached_index` keeps a file's walk while it keeps its size, mtime and
inode.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import glob
import os
import threading
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c
import numpy as np

HEADER, FOOTER = 12, 4  # u64 length + u32 masked crc; data; u32 masked crc of the data
OVERHEAD = HEADER + FOOTER  # bytes of a frame besides its data
WINDOW = 1 << 16  # bytes read at a time while walking a file
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
    """Whether `path` is a local file name (no `scheme://`)."""
    return "://" not in path


class FrameError(ValueError):
    """A frame that does not walk: `offset` is where it starts, the message says what is wrong there.

    `truncated`: the file ends inside the frame (else a length or data CRC32C fails: a corrupted record).
    """

    def __init__(self, offset: int, reason: str, *, truncated: bool = False):
        super().__init__(reason)
        self.offset = offset
        self.truncated = truncated


class Window:
    """Reads of a file through one cached window (records' small parts are read a few KiB at a time)."""

    def __init__(self, f: BinaryIO, size: int = WINDOW):
        self.f, self.size, self.start, self.buf = f, size, 0, b""

    def get(self, pos: int, n: int) -> bytes:
        """`n` bytes at `pos` (fewer at the end of the file)."""
        if not (self.start <= pos and pos + n <= self.start + len(self.buf)):
            self.f.seek(pos)
            self.start, self.buf = pos, self.f.read(max(n, self.size))
        return self.buf[pos - self.start: pos - self.start + n]


def walk(window: Window, size: int) -> Iterator[tuple[int, int]]:
    """(offset, data length) of each frame of a file of `size` bytes, length CRCs checked; FrameError at a bad one."""
    pos = 0
    while pos < size:
        header = window.get(pos, HEADER)
        if len(header) < HEADER:
            raise FrameError(pos, f"a record header cut short at byte {pos}", truncated=True)
        length = int.from_bytes(header[:8], "little")
        if masked(google_crc32c.value(header[:8])) != int.from_bytes(header[8:], "little"):
            raise FrameError(pos, f"a corrupted record length at byte {pos}")
        if pos + OVERHEAD + length > size:
            raise FrameError(pos, f"the record at byte {pos} runs past the end of the file (truncated)", truncated=True)
        yield pos, length
        pos += OVERHEAD + length


def check_frame(frame, offset: int) -> memoryview:
    """The data of one whole frame (bytes at `offset`), both CRCs checked; FrameError naming what failed."""
    view = memoryview(frame)
    if len(view) < OVERHEAD:
        raise FrameError(offset, f"the record at byte {offset} is cut short", truncated=True)
    length = int.from_bytes(view[:8], "little")
    if masked(google_crc32c.value(bytes(view[:8]))) != int.from_bytes(view[8:12], "little"):
        raise FrameError(offset, f"a corrupted record length at byte {offset}")
    if len(view) != OVERHEAD + length:
        raise FrameError(offset, f"the record at byte {offset} holds {len(view) - OVERHEAD} bytes, its header says {length}",
                         truncated=len(view) < OVERHEAD + length)
    data = view[HEADER: HEADER + length]
    if masked(crc32c_extend(0, data)) != int.from_bytes(view[HEADER + length:], "little"):
        raise FrameError(offset, f"the record at byte {offset} fails its data CRC32C (damaged bytes)")
    return data


def records(f: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    """(offset, data) of every record of an open file, both CRCs checked; FrameError at the first bad one."""
    window = Window(f)
    for offset, length in walk(window, size):
        f.seek(offset)
        frame = f.read(OVERHEAD + length)
        yield offset, bytes(check_frame(frame, offset))


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


def open_file(path: str) -> tuple[BinaryIO, int]:
    """An open binary file and its size: local files directly (unbuffered), `scheme://` ones through tf.io.gfile."""
    if is_local(path):
        f = open(path, "rb", buffering=0)
        return f, os.fstat(f.fileno()).st_size
    import tensorflow as tf  # only for remote files

    return tf.io.gfile.GFile(path, "rb"), tf.io.gfile.stat(path).length


def index_file(path: str) -> FileIndex:
    """Walks the TFRecord framing of one file: each record's offset and length (length headers CRC-checked)."""
    f, size = open_file(path)
    starts, lengths, broken = [], [], None
    try:
        for offset, length in walk(Window(f), size):
            starts.append(offset)
            lengths.append(length)
    except FrameError as e:
        broken = str(e)
    finally:
        f.close()
    return FileIndex(path, np.asarray(starts, np.int64), np.asarray(lengths, np.int64), broken)


def file_key(path: str) -> tuple:
    """What identifies a file's content for the caches: path, size, mtime (and inode, locally)."""
    if is_local(path):
        st = os.stat(path)
        return (path, st.st_size, st.st_mtime_ns, st.st_ino)
    import tensorflow as tf  # only for remote files

    st = tf.io.gfile.stat(path)
    return (path, st.length, st.mtime_nsec)


class FileCache:
    """A bounded, thread-safe per-process cache of what was read off a file, kept while `file_key` stays the same."""

    def __init__(self, size: int = _CACHE_SIZE):
        self.size = size
        self._items: collections.OrderedDict[tuple, object] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, make, *extra):
        """The cached `make(path, *extra)` for the file as it is now."""
        key = file_key(path) + extra
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make(path, *extra)
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forgets every file."""
        with self._lock:
            self._items.clear()


_indexes = FileCache()


def cached_index(path: str) -> FileIndex:
    """`index_file`, remembered while the file keeps its size, mtime and inode (each `load` reuses it)."""
    return _indexes.get(path, index_file)
