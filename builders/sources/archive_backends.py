"""The two RAR backends: `rarfile` (STORED entries itself, compressed ones through an external tool) and `libarchive`.

Each reads an archive into an `archive_entries.Output` after every entry passed the checks of
`archive_entries`, or raises `BackendFailed` saying what would help; `EXTRACTORS` maps a backend
name to its extraction function. Which backends are tried, and in what order, is `archive`'s choice.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import struct
from collections.abc import Callable, Iterator
from typing import Any

import rarfile

from vidvol.builders.sources.archive_entries import ArchiveError, BackendFailed, Output, UnsafeArchiveError
from vidvol.builders.sources.archive_entries import check_entry_kind, plan_entries, refuse_link, safe_entry_path

_CHUNK_BYTES = 1 << 20
_TOOLS = "unrar, unar, 7z or bsdtar"


class _BsdtarSetup(rarfile.ToolSetup):
    """bsdtar command line that puts the archive right after `-f`.

    rarfile 4.5 builds `bsdtar -x --to-stdout -f -- ARCHIVE NAME`, which bsdtar reads as an
    archive named `--`, so every compressed entry fails its CRC check. Member names are bsdtar
    patterns, hence the escaping.
    """

    def open_cmdline(self, pwd, rarfn, filefn=None):
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
    """The `libarchive` module (libarchive-c); raises BackendFailed saying what is missing."""
    try:
        import libarchive
        import libarchive.ffi
        import libarchive.read
    except ImportError as e:
        raise BackendFailed("the libarchive-c package is not installed", need="libarchive") from e
    except Exception as e:
        raise BackendFailed("libarchive-c cannot load the libarchive system library "
                             f"({type(e).__name__}: {e})", need="libarchive") from e
    return libarchive


def libarchive_version() -> str | None:
    """Version of the libarchive that the `libarchive` backend would use, or None if it cannot load."""
    try:
        lib = _load_libarchive()
    except BackendFailed:
        return None
    number = lib.ffi.version_number()  # e.g. 3006002
    return f"{number // 1000000}.{number // 1000 % 1000}.{number % 1000}"


def available_backends() -> dict[str, str | None]:
    """{backend: what it runs on, or None when unusable}; `rarfile` always reads STORED entries."""
    tool = rar_backend_available()
    version = libarchive_version()
    return {"rarfile": f"rarfile over {tool}" if tool else None,
            "libarchive": f"libarchive {version}" if version else None}


# ---------------------------------------------------------------- backend: rarfile (+ external tool)

def _open_rar(path: str) -> rarfile.RarFile:
    """Open `path` strictly; rarfile's errors become BackendFailed."""
    try:
        return rarfile.RarFile(path, errors="strict")
    except rarfile.RarCannotExec as e:  # e.g. a compressed archive comment
        raise BackendFailed(f"no external RAR tool ({_TOOLS}) is installed to read its headers "
                             f"({e})", need="tool") from e
    except rarfile.Error as e:
        raise BackendFailed(f"not a readable RAR archive ({type(e).__name__}: {e})") from e
    except (ValueError, OverflowError, IndexError, KeyError, TypeError, struct.error) as e:
        # rarfile's header parser lets these out on damaged headers (e.g. a RAR5 time field past a second's
        # nanoseconds: "microsecond must be in 0..999999"; found by the fuzz lane, tests/test_fuzz.py)
        raise BackendFailed(f"not a readable RAR archive: damaged headers ({type(e).__name__}: {e})") from e


def _checked_infos(archive: str, rf: rarfile.RarFile) -> list[rarfile.RarInfo]:
    """rarfile's entries, once each has passed check_entry_kind; refuses encrypted archives."""
    infos = rf.infolist()
    for info in infos:
        check_entry_kind(archive, info)
    if rf.needs_password():  # encrypted headers: rarfile lists no entry at all
        raise ArchiveError(f"{archive}: is password-protected (encrypted headers); "
                           "password-protected archives are not supported")
    return infos


def _extract_with_rarfile(path: str, archive: str, out: Output) -> list[str]:
    """Extract through rarfile: STORED entries in Python, compressed ones through unrar/unar/7z/bsdtar."""
    with _open_rar(path) as rf:
        infos = _checked_infos(archive, rf)
        rels = plan_entries(archive, [(info.filename, info.is_dir()) for info in infos])
        tool = rar_backend_available()  # also repairs rarfile's bsdtar command line
        compressed = [info.filename for info in infos
                      if not info.is_dir() and info.compress_type != rarfile.RAR_M0]
        if compressed and tool is None:
            raise BackendFailed(
                f"{len(compressed)} entries are RAR-compressed (first {compressed[0]!r}) and no "
                f"external RAR tool ({_TOOLS}) is installed for it", need="tool")
        out.reserve([info.file_size for info in infos if not info.is_dir()])
        out.mkdir("")
        for rel, info in zip(rels, infos):
            if info.is_dir():
                out.mkdir(rel)
        files = []
        for rel, info in zip(rels, infos):
            if info.is_dir():
                continue
            try:
                with rf.open(info) as src, out.create(rel, info.filename, info.file_size) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK_BYTES)
            except (rarfile.Error, EOFError) as e:
                raise BackendFailed(
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
        raise refuse_link(archive, name)
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
        raise BackendFailed(f"{_libarchive_message(e)}{where}", need=_libarchive_need(e)) from e
    return listing


def _rarfile_headers(path: str, archive: str, listing: list[tuple[str, bool, int | None]],
                     rels: list[str]) -> list[rarfile.RarInfo]:
    """rarfile's reading of the same headers, which must list the same entries as libarchive."""
    try:
        with _open_rar(path) as rf:
            infos = _checked_infos(archive, rf)
    except BackendFailed as e:
        raise BackendFailed(f"reading the headers with rarfile: {e}", need=e.need) from e
    views = {"libarchive": [(rel, is_dir) for rel, (_, is_dir, _) in zip(rels, listing)],
             "rarfile": [(safe_entry_path(archive, info.filename), info.is_dir()) for info in infos]}
    if views["libarchive"] != views["rarfile"]:  # e.g. multi-volume archives, RAR file versions
        first = next((i for i, (a, b) in enumerate(zip(*views.values())) if a != b),
                     min(len(listing), len(infos)))
        seen = {reader: (repr(view[first][0]) + (" (a folder)" if view[first][1] else "")
                         if first < len(view) else "nothing") for reader, view in views.items()}
        raise BackendFailed(
            f"libarchive lists {len(listing)} entries and rarfile {len(infos)}; entry {first} is "
            f"{seen['libarchive']} for libarchive but {seen['rarfile']} for rarfile")
    for info, (name, is_dir, size) in zip(infos, listing):
        if is_dir:
            continue
        redirect = getattr(info, "file_redir", None)
        if redirect or size is None:  # check_entry_kind let only file copies through
            source = repr(redirect[2]) if redirect else "an earlier entry"
            raise BackendFailed(f"entry {name!r} is a RAR5 file copy (of {source}), "
                                 "which libarchive does not reproduce", need="unar")
        if size != info.file_size:
            raise BackendFailed(f"entry {name!r}: libarchive and rarfile disagree on its size "
                                 f"({size} vs {info.file_size} bytes)")
    return infos


def _extract_with_libarchive(path: str, archive: str, out: Output) -> list[str]:
    """Extract through libarchive, checking names, kinds, sizes and checksums against rarfile's
    reading of the headers (libarchive skips some checks: see the module docstring)."""
    lib = _load_libarchive()
    listing = _libarchive_listing(lib, path, archive)
    rels = plan_entries(archive, [(name, is_dir) for name, is_dir, _ in listing])
    infos = _rarfile_headers(path, archive, listing, rels)

    out.reserve([size for _, is_dir, size in listing if not is_dir])
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
                    raise BackendFailed("the archive changed while it was read")
                name, is_dir, size = listing[index]
                where = f"in entry {name!r}"
                if not is_dir:
                    _copy_checked(entry, out, rels[index], name, size, _digest(infos[index]))
                    files.append(rels[index])
                where = f"after entry {name!r}"
    except lib.ArchiveError as e:
        raise BackendFailed(f"{_libarchive_message(e)} ({where})", need=_libarchive_need(e)) from e
    if len(files) != sum(not is_dir for _, is_dir, _ in listing):
        raise BackendFailed("the archive changed while it was read")
    return files


def _copy_checked(entry: Any, out: Output, rel: str, name: str, size: int | None,
                  digest: tuple[str, Callable[[], Any], Any] | None) -> None:
    """Stream the data of libarchive `entry` into new file `rel`, then check its size and digest."""
    context = digest[1]() if digest else None
    written = 0
    with out.create(rel, name, size) as dst:
        for block in entry.get_blocks(_CHUNK_BYTES):
            dst.write(block)
            written += len(block)
            if context is not None:
                context.update(block)
    if written != size:
        raise BackendFailed(f"entry {name!r}: got {written} bytes, expected {size}")
    if digest and context.digest() != digest[2]:
        raise BackendFailed(f"entry {name!r} failed its {digest[0]} check (damaged data)")


EXTRACTORS: dict[str, Callable[[str, str, Output], list[str]]] = {
    "rarfile": _extract_with_rarfile,
    "libarchive": _extract_with_libarchive,
}
