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
import stat
from collections.abc import Iterator
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


class Output:
    """Writes one backend's attempt under `dest_dir`, remembering what it created so that a failed
    attempt can be undone before the next backend tries."""

    def __init__(self, dest_dir: str, archive: str):
        self.dest_dir = dest_dir
        self.archive = archive
        self._created: list[str] = []

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
    def create(self, rel: str, name: str) -> Iterator[IO[bytes]]:
        """A new file `rel` open for writing; entry `name` is for messages."""
        dst = os.path.join(self.dest_dir, rel)
        if os.path.lexists(dst):
            raise ArchiveError(f"{self.archive}: entry {name!r} would overwrite {rel!r}")
        self.mkdir(posixpath.dirname(rel))
        with open(dst, "xb") as out:
            self._created.append(dst)
            yield out

    def rollback(self) -> None:
        """Remove everything this attempt created, newest first."""
        for path in reversed(self._created):
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.remove(path)
            except OSError:
                pass
        self._created.clear()
