"""Safe RAR extraction: HMDB51 ships as RAR archives, which TFDS's extractor cannot open.

`extract_rar` validates every entry before writing, caps sizes, streams the data into paths it chose, and reuses a
finished extraction of the same archive; its docstring gives the backends and the rules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import tempfile

from vidvol.builders.sources import files as file_layer
from vidvol.builders.sources.archive_backends import EXTRACTORS, available_backends
from vidvol.builders.sources.archive_backends import libarchive_version, rar_backend_available
from vidvol.builders.sources.archive_entries import MARKER_NAME, ArchiveError, BackendFailed, Budget, Output
from vidvol.builders.sources.archive_entries import UnsafeArchiveError

__all__ = [
    "ArchiveError",
    "BACKENDS",
    "BACKEND_ENV",
    "DEFAULT_MAX_BYTES",
    "MARKER_NAME",
    "MAX_BYTES_ENV",
    "UnsafeArchiveError",
    "available_backends",
    "extract_rar",
    "libarchive_version",
    "rar_backend_available",
]

logger = logging.getLogger(__name__)

BACKEND_ENV = "VIDVOL_RAR_BACKEND"
BACKENDS = ("rarfile", "libarchive")  # the order `auto` tries them in
MAX_BYTES_ENV = "VIDVOL_ARCHIVE_MAX_BYTES"
DEFAULT_MAX_BYTES = 64 << 30  # HMDB51 extracts to about 4 GiB (outer archive and class archives counted together)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_HASH_CHUNK = 4 << 20
_SELF_EXTRACT_HINT = ("Alternatively extract the archive with any RAR tool yourself: the extracted "
                      "layout works without any RAR tool.")


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


def max_bytes_setting(max_bytes: int | str | None = None) -> tuple[int | None, str]:
    """(the extraction cap in bytes or None for no cap, how to raise it): `max_bytes`, else VIDVOL_ARCHIVE_MAX_BYTES,
    else DEFAULT_MAX_BYTES; ValueError for a setting that is not a size."""
    source = "max_bytes argument"
    if max_bytes is None:
        max_bytes, source = os.environ.get(MAX_BYTES_ENV) or DEFAULT_MAX_BYTES, MAX_BYTES_ENV
    hint = f"set {MAX_BYTES_ENV} higher (e.g. {MAX_BYTES_ENV}=200G, or `none` for no cap) and run again"
    if isinstance(max_bytes, int):
        return max_bytes, hint
    text = str(max_bytes).strip().lower()
    if text in ("none", "unlimited"):
        return None, hint
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", text)
    if not found:
        raise ValueError(f"{source}={max_bytes!r}: expected a size such as 64G, 500M or 1000000 bytes, or `none`")
    return int(float(found.group(1)) * _UNITS[found.group(2)]), hint


def _backend_label(name: str) -> str:
    if name == "rarfile":
        tool = rar_backend_available()
        return f"rarfile (over {tool})" if tool else "rarfile (no external tool)"
    version = libarchive_version()
    return f"libarchive {version}" if version else "libarchive"


def _install_hint(failures: list[tuple[str, BackendFailed]]) -> str:
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


def _extract_into(path: str, dest_dir: str, *, archive: str, backends: tuple[str, ...], budget: Budget) -> list[str]:
    """Validate all entries of RAR `path`, then stream them under `dest_dir`; returns file paths.

    Each of `backends` is tried in turn until one reads the archive; a failed attempt is undone
    first. `archive` is the name used in messages (`outer.rar!inner.rar` for nested archives).
    """
    failures: list[tuple[str, BackendFailed]] = []
    for backend in backends:
        out = Output(dest_dir, archive, budget)
        try:
            files = EXTRACTORS[backend](path, archive, out)
        except BackendFailed as e:
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


def _extract_nested(archive: str, root: str, outer_files: list[str], backends: tuple[str, ...],
                    budget: Budget) -> list[str]:
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
        extracted = _extract_into(inner_path, folder, archive=label, backends=backends, budget=budget)
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


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _finished(target_dir: str) -> dict[str, object] | None:
    """The marker of a finished extraction in `target_dir` whose files are all there, else None."""
    try:
        with open(os.path.join(target_dir, MARKER_NAME), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("fingerprint"), dict):
        return None
    files = marker.get("files")
    if not isinstance(files, list) or not all(isinstance(rel, str) and os.path.isfile(os.path.join(target_dir, rel))
                                              for rel in files):
        return None
    return marker


def _same_content(marker: dict[str, object] | None, fingerprint: dict[str, object], digest: str | None) -> bool:
    """Whether `marker` records an extraction of the same archive: the same fingerprint, or (the mtime aside) the
    same name, size, mode and SHA-256."""
    if marker is None:
        return False
    if marker["fingerprint"] == fingerprint:
        return True
    other = dict(marker["fingerprint"], mtime_ns=fingerprint["mtime_ns"])  # type: ignore[arg-type]
    return digest is not None and other == fingerprint and marker.get("sha256") == digest


def _write_marker(folder: str, fingerprint: dict[str, object], digest: str, files: list[str]) -> None:
    tmp = os.path.join(folder, f"{MARKER_NAME}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"fingerprint": fingerprint, "sha256": digest, "files": files}, f)
    os.replace(tmp, os.path.join(folder, MARKER_NAME))


def _is_our_extraction(target_dir: str) -> bool:
    """Whether `target_dir` is missing, empty, or an earlier extract_rar result (marker present)."""
    if not os.path.lexists(target_dir):
        return True
    if not os.path.isdir(target_dir) or os.path.islink(target_dir):
        return False
    return not os.listdir(target_dir) or os.path.isfile(os.path.join(target_dir, MARKER_NAME))


def extract_rar(archive: str, target_dir: str, *, nested: bool = False,
                backend: str | None = None, max_bytes: int | str | None = None) -> list[str]:
    """Safely extracts every entry of RAR `archive` into `target_dir`.

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
    streamed by vidvol into paths it chose itself (`archive_entries.Output`), so no library or tool
    decides where bytes land.

    Sizes are checked before anything is written: the sizes the entries declare must fit under a cap
    (`max_bytes=`, else the VIDVOL_ARCHIVE_MAX_BYTES environment variable: bytes, or with a K/M/G/T
    suffix, or `none`; default 64 GiB, for all levels of a nested extraction together) and in the free
    space of the target's file system. While the data streams, every byte is counted: an entry that
    holds more than its header declares, or an extraction that passes the cap, stops at that point
    (an ArchiveError; what was written is removed), whatever the headers said.

    Extraction goes to a temporary folder beside the target and is renamed into place with a marker
    file (`.vidvol_extracted`: the archive's name, size, mtime and SHA-256, and the file list). A
    finished extraction of the same archive is reused, never replaced: by name, size and mtime, or,
    when only the mtime differs (a copied or re-downloaded archive), by its SHA-256; and a second
    process that finishes extracting the same archive after a first one keeps the first one's folder
    (which a build may be reading) and drops its own. An interrupted extraction leaves nothing
    half-written behind.

    Args:
      archive: the RAR file (a URL is fetched into a local temporary file, not when an extraction is reused).
      target_dir: where the entries land.
      nested: also extract each `.rar` found inside (same rules) into a folder named after it, then remove it,
        one level deep, as HMDB51 ships one `<class>.rar` per action class inside `hmdb51_org.rar`.
      backend: `rarfile`, `libarchive` or `auto` (else VIDVOL_RAR_BACKEND, else `auto`).
      max_bytes: the cap on declared sizes (else VIDVOL_ARCHIVE_MAX_BYTES, else 64 GiB).

    Returns:
      The extracted files' relative paths, sorted.

    Raises:
      UnsafeArchiveError: an entry name or kind is unsafe (nothing is written).
      ArchiveError: no backend can read it (naming what each said and what to install), or sizes over the cap
        or the free space, or data that outgrows its headers.
    """
    backends = _backend_order(backend)
    budget = Budget(*max_bytes_setting(max_bytes))
    archive = os.fspath(archive)
    target_dir = os.path.abspath(os.fspath(target_dir))
    if not file_layer.isfile(archive):
        raise FileNotFoundError(f"{archive}: RAR archive not found")
    fingerprint = _fingerprint(archive, nested)
    marker = _finished(target_dir)
    if _same_content(marker, fingerprint, None):
        logger.info("Reusing extraction of %s in %s", archive, target_dir)
        return list(marker["files"])  # type: ignore[index]
    if not _is_our_extraction(target_dir):
        raise ArchiveError(
            f"{target_dir}: exists and holds files that extract_rar did not write; "
            f"refusing to replace it with the contents of {archive} (choose an empty folder)")

    parent = os.path.dirname(target_dir)
    os.makedirs(parent, exist_ok=True)
    with file_layer.local_copy(archive) as local:
        digest = _sha256(local)
        if _same_content(marker, fingerprint, digest):  # the same archive with a new mtime (copied, re-downloaded)
            files = list(marker["files"])  # type: ignore[index]
            _write_marker(target_dir, fingerprint, digest, files)
            logger.info("Reusing extraction of %s in %s (same SHA-256, new mtime)", archive, target_dir)
            return files
        tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.tmp-", dir=parent)
        try:
            files = sorted(_extract_into(local, tmp_dir, archive=archive, backends=backends, budget=budget))
            if nested:
                files = _extract_nested(archive, tmp_dir, files, backends, budget)
            _write_marker(tmp_dir, fingerprint, digest, files)
            kept = _move_into_place(tmp_dir, target_dir, fingerprint, digest)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
    if kept is not None:
        logger.info("Another process extracted %s into %s first: using its result", archive, target_dir)
        return kept
    logger.info("Extracted %s into %s (%d files)", archive, target_dir, len(files))
    return files


def _move_into_place(tmp_dir: str, target_dir: str, fingerprint: dict[str, object], digest: str) -> list[str] | None:
    """Rename the finished `tmp_dir` to `target_dir`, replacing an empty or stale extraction; returns the file list
    of a finished extraction of the same archive found there instead (kept: a build may be reading it), else None."""
    for _ in range(3):
        finished = _finished(target_dir)
        if _same_content(finished, fingerprint, digest):
            shutil.rmtree(tmp_dir, ignore_errors=True)
            return list(finished["files"])  # type: ignore[index]
        if not (os.path.isdir(target_dir) and os.listdir(target_dir)):
            try:
                os.replace(tmp_dir, target_dir)  # an empty folder is replaced; a non-empty one (appeared since) refuses
                return None
            except OSError:
                continue
        # A stale extraction (archive changed): move it aside, check what was moved, then delete it.
        stale = tempfile.mkdtemp(prefix=f".{os.path.basename(target_dir)}.stale-", dir=os.path.dirname(target_dir))
        os.rmdir(stale)
        try:
            os.rename(target_dir, stale)
        except FileNotFoundError:
            continue
        if _same_content(_finished(stale), fingerprint, digest):  # another process finished it just now: put it back
            os.rename(stale, target_dir)
            continue
        os.rename(tmp_dir, target_dir)
        shutil.rmtree(stale, ignore_errors=True)
        return None
    raise ArchiveError(f"{target_dir}: could not move a finished extraction into place (other processes keep "
                       "writing there); run again")
