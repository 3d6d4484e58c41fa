"""The build side's file layer: local paths through `os`/`open`, URLs (`s3://`, `gs://`, ...) through fsspec.

Layout discovery (listing class folders, reading CSV and split files, checking that files exist)
calls these functions with whatever manual_dir is (any fsspec protocol); a local path takes
exactly the `os` call it always took. The example functions fetch one URL source at a time into a
local temporary file (`local_copy`) for OpenCV and nibabel, which need local paths, and delete it
when done. Credentials and errors: see `read_bytes`; nothing here stores or prints a secret.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import posixpath
import re
import shutil
import stat as stat_module
import tempfile
from typing import IO, Any
from collections.abc import Iterator


from vidvol.core.store import (  # the store layer this file layer stands on
    RETRIES,
    AccessDeniedError,
    RemoteReadError,
    _call,
    _fs,
    credential_hint,
    is_transient,
    scrub,
)
from vidvol.core.urls import is_url, scheme, split_url

logger = logging.getLogger(__name__)

__all__ = [
    "AccessDeniedError",
    "FileStat",
    "credential_hint",
    "RemoteReadError",
    "NotARegularFileError",
    "basename",
    "check_regular",
    "dirname",
    "exists",
    "fetch_dir",
    "isabs",
    "isdir",
    "isfile",
    "is_transient",
    "is_url",
    "join",
    "listdir",
    "local_copy",
    "manual_dir",
    "missing_detail",
    "normpath",
    "open_binary",
    "open_text",
    "private_dir",
    "read_bytes",
    "relpath",
    "scheme",
    "scrub",
    "stat",
    "walk",
]

FETCH_DIR_ENV = "VIDVOL_FETCH_DIR"  # where local_copy puts its temporary files (default: <tmp>/vidvol_fetch_<uid>)

@dataclasses.dataclass(frozen=True)
class FileStat:
    """What `stat` tells about a path: size in bytes, whether it is a directory, modification time."""

    size: int
    isdir: bool
    mtime_ns: int  # 0 when the store does not report one


# --------------------------------------------------------------------------------------------
# Path strings
# --------------------------------------------------------------------------------------------


def join(base: str, *parts: str) -> str:
    """`os.path.join` for local paths; `/`-joined for URLs."""
    base = os.fspath(base)
    if not is_url(base):
        return os.path.join(base, *parts)
    out = base.rstrip("/")
    for part in parts:
        part = os.fspath(part).strip("/")
        if part:
            out = f"{out}/{part}"
    return out


def normpath(path: str) -> str:
    """`os.path.normpath` for local paths; URLs normalised after `scheme://`."""
    if not is_url(path):
        return os.path.normpath(path)
    prefix, rest = split_url(path)
    return prefix + posixpath.normpath(rest).lstrip("/") if rest else path


def dirname(path: str) -> str:
    """`os.path.dirname` for local paths; the parent URL (never above the bucket) for URLs."""
    if not is_url(path):
        return os.path.dirname(path)
    prefix, rest = split_url(path)
    rest = rest.rstrip("/")
    return prefix + posixpath.dirname(rest) if "/" in rest else prefix + rest


def basename(path: str) -> str:
    """Last component of a local path or URL."""
    if not is_url(path):
        return os.path.basename(path)
    return posixpath.basename(split_url(path)[1].rstrip("/"))


def relpath(path: str, start: str) -> str:
    """`os.path.relpath` for local paths; for two URLs of one scheme the `/`-separated relative path (ValueError otherwise)."""
    if not is_url(path) and not is_url(start):
        return os.path.relpath(path, start)
    if not (is_url(path) and is_url(start)) or scheme(path) != scheme(start):
        raise ValueError(f"no relative path from {start} to {path}")
    return posixpath.relpath("/" + split_url(path)[1], "/" + split_url(start)[1].rstrip("/"))


def isabs(path: str) -> bool:
    """A URL or an absolute local path."""
    return is_url(path) or os.path.isabs(path)


# --------------------------------------------------------------------------------------------
# Queries and reads
# --------------------------------------------------------------------------------------------


def exists(path: str) -> bool:
    """`os.path.exists` for local paths; whether the object or prefix exists for URLs."""
    if not is_url(path):
        return os.path.exists(path)
    fs, p = _fs(path)
    return _call(path, lambda: fs.exists(p), what="exists")


def isdir(path: str) -> bool:
    """`os.path.isdir` for local paths; whether the URL is a bucket or a prefix holding objects."""
    if not is_url(path):
        return os.path.isdir(path)
    fs, p = _fs(path)
    return _call(path, lambda: fs.isdir(p), what="isdir")


def isfile(path: str) -> bool:
    """`os.path.isfile` for local paths; whether the URL is an object."""
    if not is_url(path):
        return os.path.isfile(path)
    fs, p = _fs(path)
    return _call(path, lambda: fs.isfile(p), what="isfile")


def _mtime_ns(info: dict) -> int:
    """Modification time in ns from an fsspec info dict (s3 `LastModified`, local `mtime`, gcs `updated`), else 0."""
    for field in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = info.get(field)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1e9)
        if isinstance(value, (int, float)):
            return int(value * 1e9)
    return 0


def stat(path: str) -> FileStat:
    """Size, kind and mtime of a path or URL (FileNotFoundError when missing)."""
    if not is_url(path):
        st = os.stat(path)
        return FileStat(size=st.st_size, isdir=os.path.isdir(path), mtime_ns=st.st_mtime_ns)
    fs, p = _fs(path)
    info = _call(path, lambda: fs.info(p), what="stat")
    return FileStat(size=int(info.get("size") or 0), isdir=info.get("type") == "directory", mtime_ns=_mtime_ns(info))


def listdir(path: str) -> list[str]:
    """`os.listdir` for local paths; the sorted names right under a URL (FileNotFoundError when there are none)."""
    if not is_url(path):
        return os.listdir(path)
    fs, p = _fs(path)
    entries = _call(path, lambda: fs.ls(p, detail=False), what="list")
    own = p.rstrip("/")
    names = {posixpath.basename(e.rstrip("/")) for e in entries if e.rstrip("/") != own}
    return sorted(n for n in names if n)


def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk` for local paths; for URLs the same top-down `(folder, dirs, files)` from one recursive listing.

    As with `os.walk`, the caller may sort or prune `dirs` in place; a missing URL yields nothing.
    """
    if not is_url(top):
        yield from os.walk(top)
        return
    fs, root = _fs(top)
    root = root.rstrip("/")
    found = _call(top, lambda: fs.find(root, withdirs=False, detail=False), what="list")
    tree: dict = {}
    for p in found:
        if not p.startswith(root + "/"):
            continue
        *folders, name = p[len(root) + 1:].split("/")
        node = tree
        for folder in folders:
            node = node.setdefault(folder, {})
        if name:
            node[name] = None
    top = top.rstrip("/")

    def visit(url: str, node: dict) -> Iterator[tuple[str, list[str], list[str]]]:
        dirs = sorted(k for k, v in node.items() if isinstance(v, dict))
        names = sorted(k for k, v in node.items() if v is None)
        yield url, dirs, names
        for d in dirs:
            if isinstance(node.get(d), dict):
                yield from visit(f"{url}/{d}", node[d])

    if tree:
        yield from visit(top, tree)


def read_bytes(path: str, retries: int = RETRIES) -> bytes:
    """The whole file; a URL is read in one request, transient errors retried.

    Credentials (for this and every URL call here) come from the usual environment variables
    (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    `AWS_ENDPOINT_URL`/`AWS_ENDPOINT_URL_S3`, `AWS_DEFAULT_REGION`, ...;
    `GOOGLE_APPLICATION_CREDENTIALS` for gs://) or fsspec's own configuration (`~/.config/fsspec/`,
    `FSSPEC_<PROTOCOL>_<OPTION>` variables), read by the file system library in each process, Beam
    workers included. Nothing here stores or prints a secret: messages of errors raised from here
    have the values of secret-looking environment variables replaced by `***`.

    Errors: a missing file is a `FileNotFoundError` naming the URL; refused credentials are an
    `AccessDeniedError` (a RuntimeError, so a worker stops the build rather than skipping every
    input); a transient error (connection reset or refused, timeout, 5xx) is retried `retries` times
    with a short backoff and then raised as `RemoteReadError` (an OSError: an example function's
    input error, i.e. a recorded skip) naming the URL and the error.
    """
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    fs, p = _fs(path)
    return _call(path, lambda: fs.cat_file(p), what="read", retries=retries)


def open_text(path: str, *, encoding: str = "utf-8", errors: str = "strict", newline: str | None = None) -> IO[str]:
    """`open(path, encoding=..., errors=..., newline=...)` for local paths; a URL (a CSV or split file) is read whole first."""
    if not is_url(path):
        return open(path, encoding=encoding, errors=errors, newline=newline)
    return io.TextIOWrapper(io.BytesIO(read_bytes(path)), encoding=encoding, errors=errors, newline=newline)


def open_binary(path: str) -> IO[bytes]:
    """`open(path, "rb")` for local paths; a streaming fsspec file for URLs."""
    if not is_url(path):
        return open(path, "rb")
    fs, p = _fs(path)
    return _call(path, lambda: fs.open(p, "rb"), what="open")


def missing_detail(path: str) -> str:
    """Why a URL folder is missing, for messages (`" (bucket 'b' does not exist, ...)"`); `""` for local paths, or when it exists."""
    if not is_url(path):
        return ""
    prefix, rest = split_url(path)
    bucket = rest.split("/", 1)[0]
    try:
        if bucket and not exists(prefix + bucket):
            return f" (bucket {bucket.rsplit('@', 1)[-1]!r} does not exist, or these credentials cannot see it)"
        if not exists(path):
            return f" (no object under {path.rstrip('/')}/)"
    except (OSError, AccessDeniedError):
        return ""
    return ""


# --------------------------------------------------------------------------------------------
# Local copies for OpenCV and nibabel
# --------------------------------------------------------------------------------------------


def fetch_dir() -> str:
    """Folder for local_copy's temporary files: $VIDVOL_FETCH_DIR, else `<tempfile.gettempdir()>/vidvol_fetch_<uid>`.

    Use it through `private_dir(fetch_dir())`, which checks (or replaces) it."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.environ.get(FETCH_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"vidvol_fetch_{uid}")


_replaced: dict[str, str] = {}  # a default fetch dir that failed the check -> the fresh private one used instead


def _unsafe(path: str) -> str:
    """Why `path` is no private folder of this user ("" when it is one): a symlink, not a folder, another owner,
    writable by others. Looked at without following a symlink."""
    st = os.lstat(path)
    if stat_module.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat_module.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"others may write into it (mode {stat_module.S_IMODE(st.st_mode):04o})"
    return ""


def private_dir(path: str) -> str:
    """The folder to put temporary copies of inputs in: `path`, made `0700` if missing, once it is checked to be
    this user's own (not a symlink, owned by this user, writable by nobody else).

    Someone who could write into it could swap a fetched file for another while it is decoded. The
    default folder (`<tmp>/vidvol_fetch_<uid>`, a predictable name another local user may have made first)
    that fails the check is replaced by a fresh private folder (a warning names both); a folder given by
    `VIDVOL_FETCH_DIR` that fails it is a PermissionError naming the fix.
    """
    if path in _replaced:
        return _replaced[path]
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:  # a parent is missing: a given folder may be nested
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    why = _unsafe(path)
    if not why:
        return path
    if os.environ.get(FETCH_DIR_ENV) == path:
        raise PermissionError(
            f"{FETCH_DIR_ENV}={path}: {why}, so another user could swap the inputs fetched there; give a folder "
            f"of your own that only you can write (`mkdir -m 700 DIR`), or unset {FETCH_DIR_ENV}")
    fresh = tempfile.mkdtemp(prefix=os.path.basename(path) + "_")  # 0700, a name nobody can guess
    logger.warning("fetch folder %s is not safe (%s): using %s instead", path, why, fresh)
    _replaced[path] = fresh
    return fresh


def _local_name(url: str) -> str:
    """A safe local file name that keeps the URL's name and suffix (`scan.nii.gz`, `clip.avi`), without an http(s)
    URL's query string (a presigned URL's signature)."""
    if scheme(url) in ("http", "https"):
        url = url.split("#", 1)[0].split("?", 1)[0]
    name = basename(url).replace(os.sep, "_") or "object"
    name = re.sub(r"[\x00-\x1f]", "_", name)
    if len(name) > 200:
        stem, dot, suffix = name.partition(".")
        name = stem[: 200 - len(suffix) - 1] + dot + suffix[-(200 - 1):]
    return name


def _renamed(e: BaseException, old: str, new: str) -> BaseException | None:
    """A copy of `e` with the local path `old` replaced by the URL `new` in its message, or None."""

    def fix(value):
        return value.replace(old, new) if isinstance(value, str) else value

    mentioned = any(isinstance(a, str) and old in a for a in e.args)
    filename = getattr(e, "filename", None) if isinstance(e, OSError) else None
    if not mentioned and not (isinstance(filename, str) and old in filename):
        return None
    try:
        if isinstance(e, OSError) and filename is not None:
            return type(e)(e.errno, fix(e.strerror), fix(filename))
        return type(e)(*(fix(a) for a in e.args))
    except Exception:  # an exception class with another signature
        return None


class NotARegularFileError(OSError):
    """An input that is a FIFO, a device or a socket: a decoder reading it could wait forever (a skip)."""


def check_regular(path: str) -> None:
    """NotARegularFileError when the local `path` exists but is no regular file (a FIFO nobody writes blocks its
    reader forever, a device never ends); a missing path is left to the reader's own FileNotFoundError."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat_module.S_ISREG(mode) or stat_module.S_ISDIR(mode):
        return
    kind = ("a FIFO (named pipe)" if stat_module.S_ISFIFO(mode) else "a socket" if stat_module.S_ISSOCK(mode)
            else "a device")
    raise NotARegularFileError(f"{path}: {kind}, not a regular file: a decoder reading it could wait forever; "
                               "list regular files only (copy the data into a file)")


@contextlib.contextmanager
def local_copy(path: str, retries: int = RETRIES) -> Iterator[str]:
    """A local path to read `path` from: the path itself when local, else a temporary copy deleted on exit.

    A URL is fetched whole into its own folder under `fetch_dir()`, keeping its file name (and so
    its suffix, e.g. `.nii.gz`); a local path that is a FIFO, device or socket is NotARegularFileError (a read of
    it would never end); transient errors are retried `retries` times with a short
    backoff, then raised as RemoteReadError naming the URL. Input errors (ValueError, OSError,
    EOFError) raised inside the block that name the temporary file are re-raised naming the URL.
    """
    path = os.fspath(path)
    if not is_url(path):
        check_regular(path)
        yield path
        return
    fs, p = _fs(path)
    folder = tempfile.mkdtemp(prefix="fetch-", dir=private_dir(fetch_dir()))
    local = os.path.join(folder, _local_name(path))
    try:
        _call(path, lambda: fs.get_file(p, local), what="fetch", retries=retries)
        try:
            yield local
        except (ValueError, OSError, EOFError) as e:
            clone = _renamed(e, local, path)
            if clone is None:
                raise
            raise clone.with_traceback(e.__traceback__) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def utf8_path(path: str) -> Iterator[str]:
    """A name C libraries can open a local file by: `path` itself when it is UTF-8, else an ASCII-named link to it.

    OpenCV takes a file name as UTF-8 text, and one that is not (a name `os.fsdecode` gave
    surrogates, e.g. Latin-1 `caf\\xe9.mp4`) crashes it. The link (a symlink, else a hard link) lives in
    a fresh temporary folder, removed on exit; it keeps the name's suffix when that is ASCII.
    """
    path = os.fspath(path)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield path
        return
    suffix = os.path.splitext(path)[1]
    if not (suffix.isascii() and suffix.isprintable() and len(suffix) <= 16):
        suffix = ""
    folder = tempfile.mkdtemp(prefix="vidvol-name-")
    link = os.path.join(folder, "input" + suffix)
    try:
        try:
            os.symlink(os.path.abspath(path), link)
        except OSError:
            os.link(path, link)
        yield link
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Builder-side helpers
# --------------------------------------------------------------------------------------------


def manual_dir(dl_manager: Any) -> str:
    """The build's manual_dir as a string: the URL itself for a bucket, else TFDS's checked local `dl_manager.manual_dir`.

    TFDS keeps manual_dir as an `epath.Path`, whose `dl_manager.manual_dir` property checks it with
    tf.io.gfile: that has no s3:// file system here, so a URL is taken as given (layout discovery
    checks it through fsspec and names what is missing). TFDS itself only accepts URL schemes
    epath knows (s3://, gs://, az://, hf://); the layout functions take any fsspec URL.
    """
    from vidvol.core import tfds_api  # TensorFlow: not for the decoding child

    given = tfds_api.given_manual_dir(dl_manager)
    if given is not None and is_url(given):
        return given.rstrip("/")
    return os.fspath(dl_manager.manual_dir)
