"""Safe RAR extraction: HMDB51 ships as RAR archives, which TFDS's extractor cannot open.

Two backends read the archives, tried in this order (`backend=` or the VIDVOL_RAR_BACKEND
environment variable picks one: `rarfile`, `libarchive` or `auto`, the default):

* `rarfile`: the `rarfile` package, which decodes STORED entries itself and hands compressed ones
  to an external tool (`unrar`, `unar`, `7z` or `bsdtar`, whichever it finds). With `unar` or
  `unrar` it reads every RAR version, solid RAR 3.x included.
* `libarchive`: the `libarchive-c` package (pip) over the system's libarchive (`libarchive.so.13`,
  in Debian's and Ubuntu's base images), so a user without root can read RAR5 and non-solid
  RAR 3.x archives. libarchive cannot decompress solid RAR 3.x archives, does not check the CRC
  of STORED RAR 3.x entries and turns RAR5 file copies into empty files, so this backend also
  reads the headers with `rarfile` (pure Python, no tool) and checks every entry against them:
  the same names and kinds in the same order, each file's size and CRC32 or BLAKE2sp.

A backend that cannot read an archive (no tool, unsupported compression, damaged data) leaves
nothing behind and the next one is tried; when none can, the ArchiveError names the archive, what
each backend said and what to install. Whatever the backend, every entry name is validated before
anything is written (no absolute paths, drive letters, backslashes, `..` components, links or
special files: an UnsafeArchiveError, never retried with another backend), and file data is
streamed by this module into paths it chose itself, so no library or tool decides where bytes
land. Extraction goes to a temporary folder beside the target and is renamed into place with a
marker file, so a finished extraction is reused by the next call and an interrupted one leaves
nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import posixpath
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import rarfile

from vidvol.builders import files as file_layer

logger = logging.getLogger(__name__)

MARKER_NAME = ".vidvol_extracted"
BACKEND_ENV = "VIDVOL_RAR_BACKEND"
BACKENDS = ("rarfile", "libarchive")  # the order `auto` tries them in
_CHUNK_BYTES = 1 << 20
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_TOOLS = "unrar, unar, 7z or bsdtar"
_SELF_EXTRACT_HINT = ("Alternatively extract the archive with any RAR tool yourself: the extracted "
                      "layout works without any RAR tool.")


class ArchiveError(ValueError):
    """An archive cannot be read or extracted; the message names the archive."""


class UnsafeArchiveError(ArchiveError):
    """An archive entry could write outside the target folder; names archive and entry."""


class _BackendFailed(Exception):
    """One backend cannot read the archive (the next one may); the message omits the archive name.

    `need` says what would help: "tool" (rarfile has no external tool), "libarchive" (libarchive-c
    or its system library is missing), "unar" (a feature libarchive lacks), "password" (encrypted:
    nothing helps), None (damaged data).
    """

    def __init__(self, message: str, need: str | None = None):
        super().__init__(message)
        self.need = need


class _BsdtarSetup(rarfile.ToolSetup):
    """bsdtar command line that puts the archive right after `-f`.

    rarfile 4.5 builds `bsdtar -x --to-stdout -f -- ARCHIVE NAME`, which bsdtar reads as an
    archive named `--`, so every compressed entry fails its CRC check. Member names are bsdtar
    patterns, hence the escaping.
    """

    def open_cmdline(self, pwd, rarfn, filefn=None):  # noqa: D102 (rarfile's signature)
        cmdline = [rarfile.BSDTAR_TOOL, "-x", "--to-stdout", "-f", rarfn]
        self.add_password_arg(cmdline, pwd)  # raises for a password: bsdtar has no option
        if filefn:
            cmdline += ["--", re.sub(r"([\\*?\[])", r"\\\1", filefn)]
        return cmdline


def _tool_setup() -> rarfile.ToolSetup:
    """rarfile's tool choice, with its bsdtar command line repaired where it is broken."""
    setup = rarfile.tool_setup()
    if setup.setup is rarfile.BSDTAR_CONFIG and not isinstance(setup, _BsdtarSetup):
        cmdline = setup.open_cmdline(None, "ARCHIVE", "NAME")
        if cmdline[cmdline.index("-f") + 1] != "ARCHIVE":
            setup = _BsdtarSetup(rarfile.BSDTAR_CONFIG)
            rarfile.CURRENT_SETUP = setup  # rarfile's own cache of the chosen tool
    return setup


def rar_backend_available() -> str | None:
    """Name of the external tool `rarfile` uses for compressed entries, or None if there is none."""
    try:
        setup = _tool_setup()
    except rarfile.RarCannotExec:
        return None
    tool_variable = setup.setup["open_cmd"][0]  # e.g. "UNRAR_TOOL"
    return str(getattr(rarfile, tool_variable, tool_variable))


@functools.lru_cache(maxsize=1)
def _load_libarchive() -> Any:
    """The `libarchive` module (libarchive-c); raises _BackendFailed saying what is missing."""
    try:
        import libarchive  # pylint: disable=import-outside-toplevel
        import libarchive.ffi  # pylint: disable=import-outside-toplevel
        import libarchive.read  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise _BackendFailed("the libarchive-c package is not installed", need="libarchive") from e
    except Exception as e:  # noqa: BLE001 -- ctypes: OSError, AttributeError, TypeError, ...
        raise _BackendFailed("libarchive-c cannot load the libarchive system library "
                             f"({type(e).__name__}: {e})", need="libarchive") from e
    return libarchive


def libarchive_version() -> str | None:
    """Version of the libarchive that the `libarchive` backend would use, or None if it cannot load."""
    try:
        lib = _load_libarchive()
    except _BackendFailed:
        return None
    number = lib.ffi.version_number()  # e.g. 3006002
    return f"{number // 1000000}.{number // 1000 % 1000}.{number % 1000}"


def available_backends() -> dict[str, str | None]:
    """{backend: what it runs on, or None when unusable}; `rarfile` always reads STORED entries."""
    tool = rar_backend_available()
    version = libarchive_version()
    return {"rarfile": f"rarfile over {tool}" if tool else None,
            "libarchive": f"libarchive {version}" if version else None}


def _backend_order(backend: str | None) -> tuple[str, ...]:
    """Backends to try, from `backend` or else VIDVOL_RAR_BACKEND; `auto` means all in BACKENDS order."""
    source = "backend argument"
    if backend is None:
        backend, source = os.environ.get(BACKEND_ENV, "") or "auto", BACKEND_ENV
    choice = backend.strip().lower()
    if choice == "auto":
        return BACKENDS
    if choice in BACKENDS:
        return (choice,)
    raise ValueError(f"unknown RAR backend {backend!r} ({source}); choose one of: auto, "
                     + ", ".join(BACKENDS))


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


def _refuse_link(archive: str, name: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"{archive}: refusing entry {name!r}: symlink/hardlink/redirect entries are "
        "not extracted (the link target could point outside the target folder)")


def _check_entry_kind(archive: str, info: rarfile.RarInfo) -> None:
    """Refuse links and special files (their targets could point outside); RAR5 file copies are fine."""
    redirect = getattr(info, "file_redir", None)
    if info.is_symlink() or (redirect and redirect[0] != rarfile.RAR5_XREDIR_FILE_COPY):
        raise _refuse_link(archive, info.filename)
    if info.host_os == rarfile.RAR_OS_UNIX:
        kind = stat.S_IFMT(info.mode or 0)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchiveError(
                f"{archive}: refusing entry {info.filename!r}: special file (mode {oct(info.mode)})")
    if info.needs_password():
        raise ArchiveError(f"{archive}: entry {info.filename!r} is encrypted; "
                           "password-protected archives are not supported")


def _plan(archive: str, entries: list[tuple[str, bool]]) -> list[str]:
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


class _Output:
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


# ---------------------------------------------------------------- backend: rarfile (+ external tool)

def _open_rar(path: str) -> rarfile.RarFile:
    """Open `path` strictly; rarfile's errors become _BackendFailed."""
    try:
        return rarfile.RarFile(path, errors="strict")
    except rarfile.RarCannotExec as e:  # e.g. a compressed archive comment
        raise _BackendFailed(f"no external RAR tool ({_TOOLS}) is installed to read its headers "
                             f"({e})", need="tool") from e
    except rarfile.Error as e:
        raise _BackendFailed(f"not a readable RAR archive ({type(e).__name__}: {e})") from e


def _checked_infos(archive: str, rf: rarfile.RarFile) -> list[rarfile.RarInfo]:
    """rarfile's entries, once each has passed _check_entry_kind; refuses encrypted archives."""
    infos = rf.infolist()
    for info in infos:
        _check_entry_kind(archive, info)
    if rf.needs_password():  # encrypted headers: rarfile lists no entry at all
        raise ArchiveError(f"{archive}: is password-protected (encrypted headers); "
                           "password-protected archives are not supported")
    return infos


def _extract_with_rarfile(path: str, archive: str, out: _Output) -> list[str]:
    """Extract through rarfile: STORED entries in Python, compressed ones through unrar/unar/7z/bsdtar."""
    with _open_rar(path) as rf:
        infos = _checked_infos(archive, rf)
        rels = _plan(archive, [(info.filename, info.is_dir()) for info in infos])
        tool = rar_backend_available()  # also repairs rarfile's bsdtar command line
        compressed = [info.filename for info in infos
                      if not info.is_dir() and info.compress_type != rarfile.RAR_M0]
        if compressed and tool is None:
            raise _BackendFailed(
                f"{len(compressed)} entries are RAR-compressed (first {compressed[0]!r}) and no "
                f"external RAR tool ({_TOOLS}) is installed for it", need="tool")
        out.mkdir("")
        for rel, info in zip(rels, infos):
            if info.is_dir():
                out.mkdir(rel)
        files = []
        for rel, info in zip(rels, infos):
            if info.is_dir():
                continue
            try:
                with rf.open(info) as src, out.create(rel, info.filename) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK_BYTES)
            except (rarfile.Error, EOFError) as e:
                raise _BackendFailed(
                    f"cannot extract entry {info.filename!r} ({type(e).__name__}: {e})") from e
            files.append(rel)
    return files


# ---------------------------------------------------------------- backend: libarchive (libarchive-c)

@contextlib.contextmanager
def _libarchive_reader(lib: Any, path: str) -> Iterator[Any]:
    """libarchive reader for RAR 1.5-4.x and RAR5 only (no other format, no compression filter)."""
    with lib.read.new_archive_read("rar", "none") as archive_p:
        lib.ffi.get_read_format_function("rar5")(archive_p)
        lib.ffi.read_open_filename_w(archive_p, path, _CHUNK_BYTES)
        yield lib.read.ArchiveRead(archive_p)


def _libarchive_message(e: Exception) -> str:
    """libarchive-c's error text without the C pointer it appends."""
    return str(getattr(e, "msg", None) or e).strip()


def _libarchive_need(e: Exception) -> str | None:
    """"unar" when libarchive lacks a RAR feature (solid RAR 3.x), "password" for encryption."""
    message = _libarchive_message(e).lower()
    if "encrypt" in message:
        return "password"
    return "unar" if "solid" in message else None


def _libarchive_name(archive: str, entry: Any) -> str:
    try:
        name = entry.pathname
    except UnicodeError as e:
        raise UnsafeArchiveError(f"{archive}: refusing an entry whose name is not UTF-8 ({e})") from e
    return name if isinstance(name, str) else ""


def _check_libarchive_kind(archive: str, entry: Any, name: str) -> None:
    """Refuse links and special files as libarchive sees them."""
    if entry.issym or entry.islnk or entry.linkpath:
        raise _refuse_link(archive, name)
    if not (entry.isreg or entry.isdir):
        raise UnsafeArchiveError(
            f"{archive}: refusing entry {name!r}: special file (mode {oct(entry.mode)})")


def _digest(info: rarfile.RarInfo) -> tuple[str, Callable[[], Any], Any] | None:
    """(kind, new hash context, expected digest) from rarfile's view of a file entry, if any."""
    if info.CRC is not None:
        return "CRC32", rarfile.CRC32Context, info.CRC
    if getattr(info, "blake2sp_hash", None):
        return "BLAKE2sp", rarfile.Blake2SP, info.blake2sp_hash
    return None


def _libarchive_listing(lib: Any, path: str, archive: str) -> list[tuple[str, bool, int | None]]:
    """[(name, is folder, size or None)] as libarchive reads the headers; links are refused."""
    listing: list[tuple[str, bool, int | None]] = []
    try:
        with _libarchive_reader(lib, path) as reader:
            for entry in reader:  # data is skipped, not written
                name = _libarchive_name(archive, entry)
                _check_libarchive_kind(archive, entry, name)
                listing.append((name, entry.isdir, entry.size))
    except lib.ArchiveError as e:
        where = f" (after entry {listing[-1][0]!r})" if listing else ""
        raise _BackendFailed(f"{_libarchive_message(e)}{where}", need=_libarchive_need(e)) from e
    return listing


def _rarfile_headers(path: str, archive: str, listing: list[tuple[str, bool, int | None]],
                     rels: list[str]) -> list[rarfile.RarInfo]:
    """rarfile's reading of the same headers, which must list the same entries as libarchive."""
    try:
        with _open_rar(path) as rf:
            infos = _checked_infos(archive, rf)
    except _BackendFailed as e:
        raise _BackendFailed(f"reading the headers with rarfile: {e}", need=e.need) from e
    views = {"libarchive": [(rel, is_dir) for rel, (_, is_dir, _) in zip(rels, listing)],
             "rarfile": [(safe_entry_path(archive, info.filename), info.is_dir()) for info in infos]}
    if views["libarchive"] != views["rarfile"]:  # e.g. multi-volume archives, RAR file versions
        first = next((i for i, (a, b) in enumerate(zip(*views.values())) if a != b),
                     min(len(listing), len(infos)))
        seen = {reader: (repr(view[first][0]) + (" (a folder)" if view[first][1] else "")
                         if first < len(view) else "nothing") for reader, view in views.items()}
        raise _BackendFailed(
            f"libarchive lists {len(listing)} entries and rarfile {len(infos)}; entry {first} is "
            f"{seen['libarchive']} for libarchive but {seen['rarfile']} for rarfile")
    for info, (name, is_dir, size) in zip(infos, listing):
        if is_dir:
            continue
        redirect = getattr(info, "file_redir", None)
        if redirect or size is None:  # _check_entry_kind let only file copies through
            source = repr(redirect[2]) if redirect else "an earlier entry"
            raise _BackendFailed(f"entry {name!r} is a RAR5 file copy (of {source}), "
                                 "which libarchive does not reproduce", need="unar")
        if size != info.file_size:
            raise _BackendFailed(f"entry {name!r}: libarchive and rarfile disagree on its size "
                                 f"({size} vs {info.file_size} bytes)")
    return infos


def _extract_with_libarchive(path: str, archive: str, out: _Output) -> list[str]:
    """Extract through libarchive, checking names, kinds, sizes and checksums against rarfile's
    reading of the headers (libarchive skips some checks: see the module docstring)."""
    lib = _load_libarchive()
    listing = _libarchive_listing(lib, path, archive)
    rels = _plan(archive, [(name, is_dir) for name, is_dir, _ in listing])
    infos = _rarfile_headers(path, archive, listing, rels)

    out.mkdir("")
    for rel, (_, is_dir, _) in zip(rels, listing):
        if is_dir:
            out.mkdir(rel)
    files = []
    where = "at the first entry"
    try:
        with _libarchive_reader(lib, path) as reader:
            for index, entry in enumerate(reader):
                if index >= len(listing) or _libarchive_name(archive, entry) != listing[index][0]:
                    raise _BackendFailed("the archive changed while it was read")
                name, is_dir, size = listing[index]
                where = f"in entry {name!r}"
                if not is_dir:
                    _copy_checked(entry, out, rels[index], name, size, _digest(infos[index]))
                    files.append(rels[index])
                where = f"after entry {name!r}"
    except lib.ArchiveError as e:
        raise _BackendFailed(f"{_libarchive_message(e)} ({where})", need=_libarchive_need(e)) from e
    if len(files) != sum(not is_dir for _, is_dir, _ in listing):
        raise _BackendFailed("the archive changed while it was read")
    return files


def _copy_checked(entry: Any, out: _Output, rel: str, name: str, size: int | None,
                  digest: tuple[str, Callable[[], Any], Any] | None) -> None:
    """Stream the data of libarchive `entry` into new file `rel`, then check its size and digest."""
    context = digest[1]() if digest else None
    written = 0
    with out.create(rel, name) as dst:
        for block in entry.get_blocks(_CHUNK_BYTES):
            dst.write(block)
            written += len(block)
            if context is not None:
                context.update(block)
    if written != size:
        raise _BackendFailed(f"entry {name!r}: got {written} bytes, expected {size}")
    if digest and context.digest() != digest[2]:
        raise _BackendFailed(f"entry {name!r} failed its {digest[0]} check (damaged data)")


_EXTRACTORS: dict[str, Callable[[str, str, _Output], list[str]]] = {
    "rarfile": _extract_with_rarfile,
    "libarchive": _extract_with_libarchive,
}


def _backend_label(name: str) -> str:
    if name == "rarfile":
        tool = rar_backend_available()
        return f"rarfile (over {tool})" if tool else "rarfile (no external tool)"
    version = libarchive_version()
    return f"libarchive {version}" if version else "libarchive"


def _install_hint(failures: list[tuple[str, _BackendFailed]]) -> str:
    """What to install (or do) so that some backend can read the archive every backend failed on."""
    needs = {failure.need for _, failure in failures}
    said = " ".join(str(failure) for _, failure in failures).lower()
    hints = []
    if "unar" in needs:
        lacks = ("decompress solid RAR 3.x archives" if "solid" in said else
                 "reproduce RAR5 file copies" if "file copy" in said else "read this archive")
        hints.append(f"libarchive (and so bsdtar) cannot {lacks}: install unar "
                     "(`apt-get install unar`) or unrar, which the rarfile backend then uses.")
    elif "tool" in needs:
        hints.append("Install a tool for the rarfile backend: `apt-get install unar` (every RAR "
                     "version) or `apt-get install libarchive-tools` (bsdtar; not solid RAR 3.x).")
    if "libarchive" in needs:
        hints.append("Without root: `pip install libarchive-c`, over the libarchive13 system library "
                     "(`apt-get install libarchive13`, already in most base images), reads RAR5 and "
                     "non-solid RAR 3.x archives.")
    tried = [name for name, _ in failures]
    if len(tried) < len(BACKENDS):
        hints.append(f"Only the {', '.join(tried)} backend was tried (backend argument or "
                     f"{BACKEND_ENV}); `auto` tries {', '.join(BACKENDS)} in turn.")
    if "password" in needs:
        hints.append("Password-protected archives are not supported.")
    elif not needs - {None}:
        hints.append("The archive may be damaged or incomplete.")
    hints.append(_SELF_EXTRACT_HINT)
    return " ".join(hints)


def _extract_into(path: str, dest_dir: str, *, archive: str, backends: tuple[str, ...]) -> list[str]:
    """Validate all entries of RAR `path`, then stream them under `dest_dir`; returns file paths.

    Each of `backends` is tried in turn until one reads the archive; a failed attempt is undone
    first. `archive` is the name used in messages (`outer.rar!inner.rar` for nested archives).
    """
    failures: list[tuple[str, _BackendFailed]] = []
    for backend in backends:
        out = _Output(dest_dir, archive)
        try:
            files = _EXTRACTORS[backend](path, archive, out)
        except _BackendFailed as e:
            out.rollback()
            failures.append((backend, e))
            logger.info("%s: the %s backend cannot read it: %s", archive, backend, e)
            continue
        except BaseException:
            out.rollback()
            raise
        logger.info("Extracted %d files from %s with the %s backend", len(files), archive, backend)
        return files
    said = "\n".join(f"  {_backend_label(name)}: {message}" for name, message in failures)
    raise ArchiveError(f"{archive}: no RAR backend could extract it:\n{said}\n{_install_hint(failures)}")


def _inner_rars(root: str) -> list[str]:
    """Relative paths of the `.rar` files under `root`, sorted."""
    return sorted(
        os.path.relpath(os.path.join(dirpath, filename), root)
        for dirpath, _, filenames in os.walk(root)
        for filename in filenames
        if filename.lower().endswith(".rar"))


def _extract_nested(archive: str, root: str, outer_files: list[str], backends: tuple[str, ...]) -> list[str]:
    """Extract each inner `.rar` under `root` into a sibling folder named after it, then delete it."""
    files = set(outer_files)
    for inner_rel in _inner_rars(root):
        inner_posix = inner_rel.replace(os.sep, "/")
        label = f"{archive}!{inner_posix}"
        folder_rel = inner_posix[: -len(".rar")]
        folder = os.path.join(root, folder_rel)
        if not os.path.basename(folder_rel) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            raise ArchiveError(f"{label}: cannot extract into folder {folder_rel!r} "
                               "(empty name or an existing file)")
        inner_path = os.path.join(root, inner_rel)
        extracted = _extract_into(inner_path, folder, archive=label, backends=backends)
        os.remove(inner_path)
        files.discard(inner_posix)
        files.update(posixpath.join(folder_rel, rel) for rel in extracted)
    return sorted(files)


def _fingerprint(archive: str, nested: bool) -> dict[str, object]:
    """What identifies one extraction: the archive's name, size and mtime, and the mode."""
    if file_layer.is_url(archive):
        st = file_layer.stat(archive)
        return {"archive": file_layer.basename(archive), "size": st.size, "mtime_ns": st.mtime_ns, "nested": nested}
    st = os.stat(archive)
    return {"archive": os.path.basename(archive), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "nested": nested}


def _read_marker(target_dir: str, fingerprint: dict[str, object]) -> list[str] | None:
    """File list of a finished extraction into `target_dir` of the same archive, else None."""
    try:
        with open(os.path.join(target_dir, MARKER_NAME), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("fingerprint") != fingerprint:
        return None
    files = marker.get("files")
    if not isinstance(files, list):
        return None
    if not all(os.path.isfile(os.path.join(target_dir, rel)) for rel in files):
        return None
    return files


def _is_our_extraction(target_dir: str) -> bool:
    """Whether `target_dir` is missing, empty, or an earlier extract_rar result (marker present)."""
    if not os.path.lexists(target_dir):
        return True
    if not os.path.isdir(target_dir) or os.path.islink(target_dir):
        return False
    return not os.listdir(target_dir) or os.path.isfile(os.path.join(target_dir, MARKER_NAME))


def extract_rar(archive: str, target_dir: str, *, nested: bool = False,
                backend: str | None = None) -> list[str]:
    """Safely extract every entry of RAR `archive` into `target_dir`; returns sorted relative paths.

    All entries are validated before anything is written; an unsafe one raises
    UnsafeArchiveError and leaves nothing behind. A second call for the same archive (same size
    and mtime) reuses the earlier extraction. With `nested=True`, each `.rar` found inside is
    extracted (same rules) into a folder named after it and then removed, one level deep, as
    HMDB51 ships one `<class>.rar` per action class inside `hmdb51_org.rar`. `archive` may be a
    URL: it is then fetched into a local temporary file for the extraction (not when one is reused).
    `backend` (else the VIDVOL_RAR_BACKEND environment variable, else `auto`) is `rarfile`,
    `libarchive` or `auto` (rarfile, then libarchive); an ArchiveError from a backend that cannot
    read the archive says what each backend said and what to install.
    """
    backends = _backend_order(backend)
    archive = os.fspath(archive)
    target_dir = os.path.abspath(os.fspath(target_dir))
    if not file_layer.isfile(archive):
        raise FileNotFoundError(f"{archive}: RAR archive not found")
    fingerprint = _fingerprint(archive, nested)
    reused = _read_marker(target_dir, fingerprint)
    if reused is not None:
        logger.info("Reusing extraction of %s in %s", archive, target_dir)
        return reused
    if not _is_our_extraction(target_dir):
        raise ArchiveError(
            f"{target_dir}: exists and holds files that extract_rar did not write; "
            f"refusing to replace it with the contents of {archive} (choose an empty folder)")

    parent = os.path.dirname(target_dir)
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.tmp-", dir=parent)
    try:
        with file_layer.local_copy(archive) as local:
            files = sorted(_extract_into(local, tmp_dir, archive=archive, backends=backends))
        if nested:
            files = _extract_nested(archive, tmp_dir, files, backends)
        with open(os.path.join(tmp_dir, MARKER_NAME), "w", encoding="utf-8") as f:
            json.dump({"fingerprint": fingerprint, "files": files}, f)
        try:
            _move_into_place(tmp_dir, target_dir)
        except OSError:
            # Another process may have finished the same extraction first: use its result.
            concurrent = _read_marker(target_dir, fingerprint)
            if concurrent is None:
                raise
            shutil.rmtree(tmp_dir, ignore_errors=True)
            return concurrent
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    logger.info("Extracted %s into %s (%d files)", archive, target_dir, len(files))
    return files


def _move_into_place(tmp_dir: str, target_dir: str) -> None:
    """Rename the finished `tmp_dir` to `target_dir`, replacing an empty or stale extraction."""
    if os.path.isdir(target_dir) and os.listdir(target_dir):
        # A stale extraction (archive changed): move it aside first, then delete it.
        stale = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.stale-",
                                 dir=os.path.dirname(target_dir))
        os.rmdir(stale)
        os.rename(target_dir, stale)
        os.rename(tmp_dir, target_dir)
        shutil.rmtree(stale, ignore_errors=True)
    else:
        os.replace(tmp_dir, target_dir)
