"""What every RAR entry must pass before anything is written, and the writer of one extraction attempt.

Every entry name is validated up front (`safe_entry_path`, `plan_entries`: no absolute paths,
drive letters, backslashes, `..` components, clashes), links and special files are refused
(`check_entry_kind`), and file data is streamed into paths this module chose itself
(`Output`), which remembers what it created so that a failed attempt can be undone. Both
backends (`archive_backends`) and the extraction (`archive`) stand on it.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from typing import IO

import rarfile

MARKER_NAME = ".vidvol_extracted"
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


class ArchiveError(ValueError):
    """An archive cannot be read or extracted; the message names the archive."""


class UnsafeArchiveError(ArchiveError):
    """An archive entry could write outside the target folder; names archive and entry."""


class BackendFailed(Exception):
    """One backend cannot read the archive (the next one may); the message omits the archive name.

    `need` says what would help: "tool" (rarfile has no external tool), "libarchive" (libarchive-c
    or its system library is missing), "unar" (a feature libarchive lacks), "password" (encrypted:
    nothing helps), None (damaged data).
    """

    def __init__(self, message: str, need: str | None = None):
        super().__init__(message)
        self.need = need


def safe_entry_path(archive: str, name: str) -> str:
    """Validated, normalized POSIX relative path for entry `name`; raises UnsafeArchiveError."""

    def refuse(reason: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"{archive}: refusing entry {name!r}: {reason}")

    if not name or not name.strip("/"):
        raise refuse("empty name")
    if "\x00" in name:
        raise refuse("NUL byte in name")
    if "\\" in name:
        raise refuse("backslash in name (Windows-style path)")
    if name.startswith("/"):
        raise refuse("absolute path")
    if _DRIVE_RE.match(name):
        raise refuse("Windows drive letter")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise refuse("'..' path component")
    if not parts:
        raise refuse("empty path")
    return posixpath.join(*parts)


def refuse_link(archive: str, name: str) -> UnsafeArchiveError:
    """The error refusing link entry `name` of `archive` (its target could point outside the target folder)."""
    return UnsafeArchiveError(
        f"{archive}: refusing entry {name!r}: symlink/hardlink/redirect entries are "
        "not extracted (the link target could point outside the target folder)")


def check_entry_kind(archive: str, info: rarfile.RarInfo) -> None:
    """Refuse links and special files (their targets could point outside); RAR5 file copies are fine."""
    redirect = getattr(info, "file_redir", None)
    if info.is_symlink() or (redirect and redirect[0] != rarfile.RAR5_XREDIR_FILE_COPY):
        raise refuse_link(archive, info.filename)
    if info.host_os == rarfile.RAR_OS_UNIX:
        kind = stat.S_IFMT(info.mode or 0)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchiveError(
                f"{archive}: refusing entry {info.filename!r}: special file (mode {oct(info.mode)})")
    if info.needs_password():
        raise ArchiveError(f"{archive}: entry {info.filename!r} is encrypted; "
                           "password-protected archives are not supported")


def plan_entries(archive: str, entries: list[tuple[str, bool]]) -> list[str]:
    """Validate every (name, is_dir) up front; returns the relative path of each, in order."""
    rels: list[str] = []
    seen: dict[str, str] = {}
    for name, is_dir in entries:
        rel = safe_entry_path(archive, name)
        kind = "dir" if is_dir else "file"
        if rel == MARKER_NAME:
            raise ArchiveError(f"{archive}: entry {name!r} clashes with the marker file")
        previous = seen.get(rel)
        if previous is not None and (previous != kind or kind == "file"):
            raise ArchiveError(f"{archive}: entry {name!r} appears twice or as both "
                               "a file and a folder")
        seen[rel] = kind
        rels.append(rel)
    for rel in seen:
        parent = posixpath.dirname(rel)
        while parent:
            if seen.get(parent) == "file":
                raise ArchiveError(f"{archive}: entry {parent!r} is a file but also a folder of {rel!r}")
            parent = posixpath.dirname(parent)
    return rels


def _size(n: int) -> str:
    """`1.5 GiB (1610612736 bytes)`, for messages."""
    value, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({n} bytes)"


class Budget:
    """What one extraction (nested archives included) may write: at most `cap` bytes (None: no cap), and never
    more than the target's file system has free; checked from the declared sizes before anything is written,
    and counted while the data streams (a header may lie)."""

    def __init__(self, cap: int | None, cap_hint: str):
        self.cap = cap
        self.cap_hint = cap_hint  # how to raise the cap, for messages
        self.written = 0

    def reserve(self, archive: str, sizes: Sequence[int | None], dest_dir: str) -> None:
        """ArchiveError, before any byte is written, when the entries' declared sizes exceed the cap or free space."""
        total = sum(n for n in sizes if n)
        if self.cap is not None and self.written + total > self.cap:
            before = f" after the {_size(self.written)} already extracted" if self.written else ""
            raise ArchiveError(f"{archive}: its entries declare {_size(total)}, over the extraction cap of "
                               f"{_size(self.cap)}{before}; nothing of it was written. If the archive is what you "
                               f"expect, {self.cap_hint}")
        where = dest_dir
        while not os.path.isdir(where) and os.path.dirname(where) != where:
            where = os.path.dirname(where)
        free = shutil.disk_usage(where).free
        if total > free:
            raise ArchiveError(f"{archive}: its entries declare {_size(total)}, but the file system of {where} has "
                               f"only {_size(free)} free; nothing of it was written. Free space there, or extract "
                               f"into another folder (the download_dir)")

    def add(self, archive: str, name: str, n: int) -> None:
        """Counts `n` more bytes about to be written for entry `name`; ArchiveError past the cap."""
        if self.cap is not None and self.written + n > self.cap:
            raise ArchiveError(f"{archive}: extraction stopped in entry {name!r} at the cap of {_size(self.cap)}: "
                               f"the data is larger than its headers declare (a damaged or hostile archive); "
                               f"what was written is removed. If the archive is what you expect, {self.cap_hint}")
        self.written += n


class _CountedFile:
    """A file being extracted: each write is counted against the entry's declared size and the budget first."""

    def __init__(self, f: IO[bytes], output: Output, name: str, declared: int | None):
        self._f, self._output, self._name, self._declared = f, output, name, declared
        self.written = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if self._declared is not None and self.written + n > self._declared:
            raise ArchiveError(f"{self._output.archive}: entry {self._name!r} holds more than the {_size(self._declared)} "
                               f"its header declares; stopped before writing past that (a damaged or hostile archive)")
        if self._output.budget is not None:
            self._output.budget.add(self._output.archive, self._name, n)
        self._output.bytes_written += n
        self.written += n
        return self._f.write(data)


class Output:
    """Writes one backend's attempt under `dest_dir`, remembering what it created so that a failed
    attempt can be undone before the next backend tries; every byte is counted against `budget`."""

    def __init__(self, dest_dir: str, archive: str, budget: Budget | None = None):
        self.dest_dir = dest_dir
        self.archive = archive
        self.budget = budget
        self.bytes_written = 0
        self._created: list[str] = []

    def reserve(self, sizes: Sequence[int | None]) -> None:
        """Checks the declared sizes of the entries about to be written against the budget (see Budget.reserve)."""
        if self.budget is not None:
            self.budget.reserve(self.archive, sizes, self.dest_dir)

    def mkdir(self, rel: str) -> None:
        """Create folder `rel` (and its parents) under dest_dir; '' is dest_dir itself."""
        path = os.path.join(self.dest_dir, rel) if rel else self.dest_dir
        missing = []
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        if not os.path.isdir(path) or os.path.islink(path):
            raise ArchiveError(f"{self.archive}: cannot create folder {rel!r}: "
                               f"{path!r} exists and is not a folder")
        for folder in reversed(missing):
            os.mkdir(folder)
            self._created.append(folder)

    @contextlib.contextmanager
    def create(self, rel: str, name: str, declared: int | None = None) -> Iterator[_CountedFile]:
        """A new file `rel` open for writing, never more than `declared` bytes; entry `name` is for messages."""
        dst = os.path.join(self.dest_dir, rel)
        if os.path.lexists(dst):
            raise ArchiveError(f"{self.archive}: entry {name!r} would overwrite {rel!r}")
        self.mkdir(posixpath.dirname(rel))
        with open(dst, "xb") as out:
            self._created.append(dst)
            yield _CountedFile(out, self, name, declared)

    def rollback(self) -> None:
        """Remove everything this attempt created, newest first (and give its bytes back to the budget)."""
        if self.budget is not None:
            self.budget.written -= self.bytes_written
        self.bytes_written = 0
        for path in reversed(self._created):
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.remove(path)
            except OSError:
                pass
        self._created.clear()
