"""Safe RAR extraction: HMDB51 ships as RAR archives, which TFDS's extractor cannot open.

`extract_rar` reads archives with `rarfile`, which decodes STORED entries itself and hands
compressed ones to an external tool (`unrar`, `unar`, `7z` or `bsdtar`, whichever it finds).
Every entry name is validated before anything is written (no absolute paths, drive letters,
backslashes, `..` components, links or special files), and file data is streamed by this module
into paths it chose itself, so the tool never decides where bytes land. Extraction goes to a
temporary folder beside the target and is renamed into place with a marker file, so a finished
extraction is reused by the next call and an interrupted one leaves nothing half-written behind.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import shutil
import stat
import tempfile

import rarfile

from vidvol.builders import files as file_layer

logger = logging.getLogger(__name__)

MARKER_NAME = ".vidvol_extracted"
_CHUNK_BYTES = 1 << 20
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_INSTALL_HINT = (
    "install a RAR backend for the `rarfile` package: `apt-get install unar` or "
    "`apt-get install libarchive-tools` (bsdtar); there is nothing to `pip install`. "
    "Alternatively extract the archive with any RAR tool yourself: the extracted layout works "
    "without any RAR tool."
)


class ArchiveError(ValueError):
    """An archive cannot be read or extracted; the message names the archive."""


class UnsafeArchiveError(ArchiveError):
    """An archive entry could write outside the target folder; names archive and entry."""


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


def _check_entry_kind(archive: str, info: rarfile.RarInfo) -> None:
    """Refuse links and special files (their targets could point outside); RAR5 file copies are fine."""
    redirect = getattr(info, "file_redir", None)
    if info.is_symlink() or (redirect and redirect[0] != rarfile.RAR5_XREDIR_FILE_COPY):
        raise UnsafeArchiveError(
            f"{archive}: refusing entry {info.filename!r}: symlink/hardlink/redirect entries are "
            "not extracted (the link target could point outside the target folder)")
    if info.host_os == rarfile.RAR_OS_UNIX:
        kind = stat.S_IFMT(info.mode or 0)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise UnsafeArchiveError(
                f"{archive}: refusing entry {info.filename!r}: special file (mode {oct(info.mode)})")
    if info.needs_password():
        raise ArchiveError(f"{archive}: entry {info.filename!r} is encrypted; "
                           "password-protected archives are not supported")


def _plan(archive: str, rf: rarfile.RarFile) -> tuple[list[str], list[tuple[str, rarfile.RarInfo]]]:
    """Validate every entry up front; returns (directories, [(relative path, info)] of files)."""
    dirs: list[str] = []
    files: list[tuple[str, rarfile.RarInfo]] = []
    seen: dict[str, str] = {}
    for info in rf.infolist():
        _check_entry_kind(archive, info)
        rel = safe_entry_path(archive, info.filename)
        kind = "dir" if info.is_dir() else "file"
        if rel == MARKER_NAME:
            raise ArchiveError(f"{archive}: entry {info.filename!r} clashes with the marker file")
        previous = seen.get(rel)
        if previous is not None and (previous != kind or kind == "file"):
            raise ArchiveError(f"{archive}: entry {info.filename!r} appears twice or as both "
                               "a file and a folder")
        seen[rel] = kind
        if kind == "dir":
            dirs.append(rel)
        else:
            files.append((rel, info))
    for rel in seen:
        parent = posixpath.dirname(rel)
        while parent:
            if seen.get(parent) == "file":
                raise ArchiveError(f"{archive}: entry {parent!r} is a file but also a folder of {rel!r}")
            parent = posixpath.dirname(parent)
    return dirs, files


def _require_backend(archive: str, files: list[tuple[str, rarfile.RarInfo]]) -> None:
    """Fail before writing anything if a compressed entry needs a tool that is missing."""
    backend = rar_backend_available()  # also repairs rarfile's bsdtar command line
    compressed = [info.filename for _, info in files if info.compress_type != rarfile.RAR_M0]
    if compressed and backend is None:
        raise ArchiveError(
            f"{archive}: holds {len(compressed)} RAR-compressed entries (first {compressed[0]!r}) "
            f"and no RAR backend is installed; {_INSTALL_HINT}")


def _open_rar(path: str, archive: str) -> rarfile.RarFile:
    """Open `path` strictly, turning rarfile's errors into ArchiveError naming `archive`."""
    try:
        return rarfile.RarFile(path, errors="strict")
    except rarfile.Error as e:
        raise ArchiveError(f"{archive}: not a readable RAR archive ({type(e).__name__}: {e})") from e


def _extract_into(path: str, dest_dir: str, *, archive: str) -> list[str]:
    """Validate all entries of RAR `path`, then stream them under `dest_dir`; returns file paths.

    `archive` is the name used in messages (`outer.rar!inner.rar` for nested archives).
    """
    with _open_rar(path, archive) as rf:
        dirs, files = _plan(archive, rf)
        _require_backend(archive, files)
        for rel in dirs:
            os.makedirs(os.path.join(dest_dir, rel), exist_ok=True)
        for rel, info in files:
            dst = os.path.join(dest_dir, rel)
            if os.path.lexists(dst):
                raise ArchiveError(f"{archive}: entry {info.filename!r} would overwrite {rel!r}")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                with rf.open(info) as src, open(dst, "xb") as out:
                    shutil.copyfileobj(src, out, _CHUNK_BYTES)
            except (rarfile.Error, EOFError) as e:
                raise ArchiveError(
                    f"{archive}: cannot extract entry {info.filename!r} "
                    f"({type(e).__name__}: {e})") from e
    logger.info("Extracted %d files from %s", len(files), archive)
    return [rel for rel, _ in files]


def _inner_rars(root: str) -> list[str]:
    """Relative paths of the `.rar` files under `root`, sorted."""
    return sorted(
        os.path.relpath(os.path.join(dirpath, filename), root)
        for dirpath, _, filenames in os.walk(root)
        for filename in filenames
        if filename.lower().endswith(".rar"))


def _extract_nested(archive: str, root: str, outer_files: list[str]) -> list[str]:
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
        extracted = _extract_into(inner_path, folder, archive=label)
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


def extract_rar(archive: str, target_dir: str, *, nested: bool = False) -> list[str]:
    """Safely extract every entry of RAR `archive` into `target_dir`; returns sorted relative paths.

    All entries are validated before anything is written; an unsafe one raises
    UnsafeArchiveError and leaves nothing behind. A second call for the same archive (same size
    and mtime) reuses the earlier extraction. With `nested=True`, each `.rar` found inside is
    extracted (same rules) into a folder named after it and then removed, one level deep, as
    HMDB51 ships one `<class>.rar` per action class inside `hmdb51_org.rar`. `archive` may be a
    URL: it is then fetched into a local temporary file for the extraction (not when one is reused).
    """
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
            files = sorted(_extract_into(local, tmp_dir, archive=archive))
        if nested:
            files = _extract_nested(archive, tmp_dir, files)
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
