"""Test helper: write real RAR 4.x archives with STORED entries (no RAR tool needed).

There is no free RAR writer, so tests build archives byte by byte following the RAR 1.5-4.x
format (marker block, main archive header, one file header + data per entry, end-of-archive
block). Entry names are written verbatim, so malicious archives (``../evil.txt``, ``/abs.txt``,
symlinks) can be built to test safe extraction. ``rarfile`` reads STORED entries without any
external tool, which is what the archive tests rely on.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from collections.abc import Iterable, Sequence

MARKER = b"Rar!\x1a\x07\x00"

HEAD_MAIN = 0x73
HEAD_FILE = 0x74
HEAD_ENDARC = 0x7B

LONG_BLOCK = 0x8000  # ADD_SIZE (packed data) follows the header
SKIP_IF_UNKNOWN = 0x4000
FILE_UNICODE = 0x0200  # name is UTF-8 (no NUL inside)
FILE_DIRECTORY = 0x00E0
LARGE_FILE = 0x0100  # 64-bit sizes: HIGH_PACK_SIZE, HIGH_UNP_SIZE

HOST_MSDOS = 0
HOST_WIN32 = 2
HOST_UNIX = 3

METHOD_STORE = 0x30

S_IFREG = 0o100000
S_IFDIR = 0o040000
S_IFLNK = 0o120000
S_IFCHR = 0o020000
S_IFIFO = 0o010000


@dataclasses.dataclass(frozen=True)
class RarEntry:
    """One archive member; `data` is written verbatim after its header."""

    name: str
    data: bytes = b""
    is_dir: bool = False
    symlink_target: str | None = None  # unix symlink: data becomes the target path
    host_os: int = HOST_UNIX
    method: int = METHOD_STORE  # anything else only *claims* compression (data stays raw)
    date_time: tuple[int, int, int, int, int, int] = (2020, 1, 2, 3, 4, 6)
    mode: int | None = None  # attributes written verbatim (e.g. S_IFCHR | 0o644), else derived
    declared_size: int | None = None  # UNP_SIZE written instead of len(data): a header that lies (64-bit if large)


def _crc16(header_body: bytes) -> int:
    """RAR 4 header CRC: low 16 bits of the CRC32 of the header after the CRC field."""
    return zlib.crc32(header_body) & 0xFFFF


def _block(head_type: int, flags: int, rest: bytes) -> bytes:
    """One block: HEAD_CRC, HEAD_TYPE, HEAD_FLAGS, HEAD_SIZE, then `rest`."""
    head_size = 7 + len(rest)
    body = struct.pack("<BHH", head_type, flags, head_size) + rest
    return struct.pack("<H", _crc16(body)) + body


def _dos_time(date_time: Sequence[int]) -> int:
    """Pack (Y, M, D, h, m, s) into a DOS timestamp."""
    year, month, day, hour, minute, second = date_time
    return ((year - 1980) << 25) | (month << 21) | (day << 16) | (hour << 11) | (minute << 5) | (
            second // 2)


def _attr(entry: RarEntry) -> int:
    """File attributes in the host OS's convention."""
    if entry.mode is not None:
        return entry.mode
    if entry.host_os == HOST_UNIX:
        if entry.symlink_target is not None:
            return S_IFLNK | 0o777
        return (S_IFDIR | 0o755) if entry.is_dir else (S_IFREG | 0o644)
    return 0x10 if entry.is_dir else 0x20  # FILE_ATTRIBUTE_DIRECTORY / _ARCHIVE


def _file_block(entry: RarEntry) -> bytes:
    """File header followed by the entry's (stored) data."""
    if entry.symlink_target is not None:
        data = entry.symlink_target.encode("utf-8")
    else:
        data = b"" if entry.is_dir else entry.data
    name = entry.name.encode("utf-8")
    flags = LONG_BLOCK
    if entry.is_dir:
        flags |= FILE_DIRECTORY
    if not entry.name.isascii():
        flags |= FILE_UNICODE
    unp_ver = 20 if entry.is_dir else 29
    unp_size = len(data) if entry.declared_size is None else entry.declared_size
    high = b""
    if unp_size >= 1 << 32:  # LHD_LARGE: HIGH_PACK_SIZE and HIGH_UNP_SIZE follow the attributes
        flags |= LARGE_FILE
        high = struct.pack("<II", len(data) >> 32, unp_size >> 32)
    fields = struct.pack(
            "<IIBIIBBHI",
            len(data) & 0xFFFFFFFF,  # PACK_SIZE
            unp_size & 0xFFFFFFFF,  # UNP_SIZE
            entry.host_os,
            zlib.crc32(data) & 0xFFFFFFFF,  # FILE_CRC
            _dos_time(entry.date_time),
            unp_ver,
            entry.method,
            len(name),
            _attr(entry),
    )
    return _block(HEAD_FILE, flags, fields + high + name) + data


def rar4_bytes(entries: Iterable[RarEntry | tuple[str, bytes]]) -> bytes:
    """Bytes of a RAR 4.x archive holding `entries` (RarEntry or (name, data) pairs)."""
    parts = [MARKER, _block(HEAD_MAIN, 0, b"\x00" * 6)]
    for entry in entries:
        if not isinstance(entry, RarEntry):
            name, data = entry
            entry = RarEntry(name=name, data=data)
        parts.append(_file_block(entry))
    parts.append(_block(HEAD_ENDARC, SKIP_IF_UNKNOWN, b""))
    return b"".join(parts)


def write_rar4(path: str | os.PathLike[str], entries: Iterable[RarEntry | tuple[str, bytes]]) -> str:
    """Write a RAR 4.x archive with STORED `entries` to `path`; returns the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(rar4_bytes(entries))
    return path
