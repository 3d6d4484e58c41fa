"""A dataset in a bucket, read where it lies: its metadata copied once, its records by byte range or from a shard cache.

TensorFlow here has no s3:// (or other fsspec) file system, so the readers open such a data_dir through
`open_builder`: the version's metadata (dataset_info.json, features, shards.json) is copied into the
local cache folder (`dataset_copy.cache_dir`) and the builder made from there, while each shard stays in
the bucket. A shard is indexed once by ranged GETs of its record headers (the index kept beside the
metadata, keyed by the shard's SHA-256), and `vidvol.load` then fetches each batch's records as
concurrent ranged GETs. With a cache limit (`VIDVOL_CACHE_LIMIT` or `Tuning.cache_limit`, bytes), a
shard is downloaded whole on first use, checked against shards.json, and read from disk; the least
recently used shards are evicted to stay under the limit (Mosaic Streaming's `cache_limit`).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import re
import tempfile
import threading
import time

import numpy as np
import tensorflow_datasets as tfds

from vidvol.core import artifacts, dataset_copy, redact, store
from vidvol.core.tfrecord import FileIndex, FrameError, Window, walk

logger = logging.getLogger(__name__)

CACHE_LIMIT_ENV = "VIDVOL_CACHE_LIMIT"
INDEX_WINDOW = 1 << 18  # bytes of one ranged GET while walking a shard's record headers
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


class CacheLimitError(ValueError):
    """The shard cache cannot hold what a read needs (a shard, or a split the random-access readers open whole)."""


@dataclasses.dataclass
class Remote:
    """One dataset version in a bucket: its URL, the local folder with its metadata, and shards.json's entries."""

    url: str
    local: str
    data_dir: str  # the bucket data_dir it was opened from (what a copy in another process reopens)
    entries: dict[str, dict]  # shard file name -> its shards.json entry (split, num_bytes, sha256)
    present: set[str] = dataclasses.field(default_factory=set)  # file names the version's prefix held when opened

    def url_of(self, name: str) -> str:
        """The bucket URL of one file of the version."""
        return f"{self.url}/{name}"


_REMOTES: dict[str, Remote] = {}  # local version folder -> the bucket version it stands for
_BY_URL: dict[str, tuple[Remote, str]] = {}  # shard URL -> (its version, its file name)
_INDEXES: dict[tuple[str, str], FileIndex] = {}
_LOCK = threading.Lock()


def parse_limit(value: int | str | None, what: str = CACHE_LIMIT_ENV) -> int | None:
    """Bytes from an int or text such as "20GB", "512MiB" (None or "" or 0: no cache)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of bytes such as 20000000000 or '20GB', got {value!r}")
    if isinstance(value, (int, np.integer)):
        number = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what} must be a number of bytes such as 20000000000 or '20GB', got {value!r}")
        number = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if number < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {value!r}")
    return number or None


def cache_limit(override: int | str | None = None) -> int | None:
    """The shard cache limit in bytes: `override` (Tuning.cache_limit), else VIDVOL_CACHE_LIMIT, else None (stream)."""
    if override is not None:
        return parse_limit(override, "Tuning.cache_limit")
    return parse_limit(os.environ.get(CACHE_LIMIT_ENV))


def open_builder(name: str, url: str) -> tfds.core.DatasetBuilder:
    """The builder of dataset `name` in the bucket data_dir `url`, from a local copy of its metadata only.

    Raises:
      dataset_copy.CopyError: no finished dataset there (no dataset_info.json), or its shards.json is unreadable.
    """
    url = url.rstrip("/")
    cache = dataset_copy.cache_dir(url)
    planned = tfds.builder(name, data_dir=cache)
    local = os.fspath(planned.data_path)
    remote = url + "/" + os.path.relpath(local, cache).replace(os.sep, "/")
    dataset_copy.pull(remote, local, splits=set())  # the metadata, dataset_info.json last; no shard
    with open(os.path.join(local, artifacts.SHARDS_NAME)) as f:
        doc = json.load(f)
    listed = {o.rsplit("/", 1)[-1] for o in store.listdir(remote)}
    opened = Remote(remote, local, url, {e["file"]: e for e in doc["shards"]}, listed)
    with _LOCK:
        _REMOTES[os.path.normpath(local)] = opened
        _BY_URL.update({opened.url_of(n): (opened, n) for n in opened.entries})
    return tfds.builder(name, data_dir=cache)  # anew: TFDS reads dataset_info.json when the builder is made


def remote_of(path: str | os.PathLike) -> tuple[Remote, str] | None:
    """(the bucket version, the file name) when `path` is a shard of a dataset opened from a bucket, else None."""
    folder, name = os.path.split(os.path.normpath(os.fspath(path)))
    remote = _REMOTES.get(folder)
    if remote is None or name not in remote.entries:
        return None
    return remote, name


def shard_of_url(url: str) -> tuple[Remote, str] | None:
    """(the bucket version, the file name) of a shard URL `index` gave out, else None."""
    return _BY_URL.get(url)


def present(folder: str | os.PathLike) -> set[str] | None:
    """The file names a bucket version's prefix held when opened, None for a folder not opened from a bucket."""
    remote = _REMOTES.get(os.path.normpath(os.fspath(folder)))
    return None if remote is None else set(remote.present)


class _RangeFile:
    """Seek and read of an object by ranged GETs (what `tfrecord.Window` needs to walk a shard's headers)."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def close(self) -> None:
        pass

    def read(self, n: int) -> bytes:
        data = store.read_range(self.url, self.pos, self.pos + n)
        self.pos += len(data)
        return data


def _index_path(remote: Remote, name: str, kind: str = "") -> str:
    return os.path.join(remote.local, ".index", f"{name}.{remote.entries[name].get('sha256', 'nosha')[:16]}{kind}.npz")


def saved_index_path(remote: Remote, name: str, kind: str) -> str:
    """Where an index of kind `kind` of one shard is kept beside the metadata (keyed by the shard's SHA-256)."""
    return _index_path(remote, name, "." + kind)


def save_index(saved: str, **arrays: np.ndarray) -> None:
    """Writes a shard index (`saved_index_path`) whole: a reader in another process sees all of it or none."""
    os.makedirs(os.path.dirname(saved), exist_ok=True)
    tmp = f"{saved}.{os.getpid()}.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, saved)


def reader(remote: Remote, name: str, window: int = INDEX_WINDOW):
    """A `tfrecord.Window` over one shard: the cached file when the cache holds it, else ranged GETs of `window`."""
    f = open(os.path.join(remote.local, name), "rb", buffering=0) if _cached(remote, name) else _RangeFile(remote.url_of(name))
    return Window(f, window)


def index(remote: Remote, name: str) -> FileIndex:
    """Where each record of one bucket shard lies: walked once by ranged GETs, then kept beside the metadata.

    The FileIndex's path is the shard's URL, so `RecordReads` reads it by range (or from the shard cache).
    """
    url, entry = remote.url_of(name), remote.entries[name]
    key = (url, entry.get("sha256", ""))
    with _LOCK:
        if key in _INDEXES:
            return _INDEXES[key]
    saved = _index_path(remote, name)
    try:
        with np.load(saved) as z:
            found = FileIndex(url, z["starts"], z["lengths"], None)
    except (OSError, KeyError, ValueError):
        size = int(entry.get("num_bytes") or store.size(url))
        local = os.path.join(remote.local, name)
        starts, lengths, broken = [], [], None
        reader = open(local, "rb", buffering=0) if _cached(remote, name) else _RangeFile(url)
        try:
            for offset, length in walk(Window(reader, INDEX_WINDOW), size):
                starts.append(offset)
                lengths.append(length)
        except FrameError as e:
            broken = str(e)
        finally:
            if hasattr(reader, "close"):
                reader.close()
        found = FileIndex(url, np.asarray(starts, np.int64), np.asarray(lengths, np.int64), broken)
        if broken is None:
            save_index(saved, starts=found.starts, lengths=found.lengths)
    with _LOCK:
        _INDEXES[key] = found
    return found


# --------------------------------------------------------------------------------------------
# The shard cache: whole shards on local disk, least recently used evicted past the limit
# --------------------------------------------------------------------------------------------

def _marker(remote: Remote, name: str) -> str:
    return os.path.join(remote.local, f".{name}.sha256")


def _cached(remote: Remote, name: str) -> bool:
    """Whether the shard is in the cache, downloaded whole and checked against its shards.json entry."""
    path, entry = os.path.join(remote.local, name), remote.entries[name]
    try:
        with open(_marker(remote, name)) as f:
            recorded = f.read().strip()
        return recorded == entry.get("sha256", "") and os.path.getsize(path) == int(entry.get("num_bytes") or -1)
    except OSError:
        return False


def _cache_root() -> str:
    return os.path.dirname(dataset_copy.cache_dir("s3://x"))


def cached_bytes() -> list[tuple[float, int, str]]:
    """(last use, bytes, path) of every cached shard under the cache root, oldest first."""
    out = []
    for folder, _, names in os.walk(_cache_root()):
        for marker in names:
            if marker.startswith(".") and marker.endswith(".sha256"):
                path = os.path.join(folder, marker[1:-len(".sha256")])
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                out.append((st.st_mtime, st.st_size, path))
    return sorted(out)


def _evict(room: int, limit: int) -> None:
    """Removes the least recently used cached shards until `room` more bytes fit under `limit`."""
    entries = cached_bytes()
    total = sum(n for _, n, _ in entries)
    for _, n, path in entries:
        if total + room <= limit:
            break
        folder, name = os.path.split(path)
        for victim in (os.path.join(folder, f".{name}.sha256"), path):
            try:
                os.remove(victim)
            except FileNotFoundError:
                pass
        total -= n
        logger.info("shard cache: evicted %s (%d bytes) to stay under %d bytes", name, n, limit)


def check_fits(remote: Remote, name: str, limit: int) -> int:
    """The shard's size; CacheLimitError when it alone is larger than the cache `limit`."""
    need = int(remote.entries[name].get("num_bytes") or store.size(remote.url_of(name)))
    if need > limit:
        raise CacheLimitError(f"{redact.url(remote.url_of(name))}: this shard is {need} bytes, more than the shard "
                              f"cache limit of {limit} bytes; raise {CACHE_LIMIT_ENV} (or Tuning.cache_limit) to at "
                              "least the largest shard, or unset it to read by byte range")
    return need


def ensure_cached(remote: Remote, name: str, limit: int) -> str:
    """The local path of one shard in the cache, downloaded (and checked against shards.json) when it is not there.

    Raises:
      CacheLimitError: the shard alone is larger than `limit`.
      dataset_copy.CopyError: the downloaded bytes do not match shards.json (a damaged or replaced shard).
    """
    path, entry = os.path.join(remote.local, name), remote.entries[name]
    if _cached(remote, name):
        os.utime(path)  # its last use, for the eviction order
        return path
    need = check_fits(remote, name, limit)
    os.makedirs(remote.local, exist_ok=True)
    with open(os.path.join(_cache_root(), ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process at a time fills or evicts (workers share the cache)
        try:
            if _cached(remote, name):
                return path
            _evict(need, limit)
            fd, tmp = tempfile.mkstemp(dir=remote.local, prefix=".cache-", suffix=".tmp")
            os.close(fd)
            try:
                started = time.perf_counter()
                store.download(remote.url_of(name), tmp)
                dataset_copy.check_shard(entry, tmp, redact.url(remote.url_of(name)))
                os.replace(tmp, path)
                with open(_marker(remote, name), "w") as f:
                    f.write(entry.get("sha256", ""))
                logger.info("shard cache: %s in %.1f s", name, time.perf_counter() - started)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def ensure_split(remote: Remote, split_files: list[str], limit: int | None) -> None:
    """Every shard of a split on local disk (the random-access readers open ArrayRecord files whole).

    With no limit the shards are pulled into the version's cache folder; with one they go through the
    shard cache, and a split larger than the limit is a CacheLimitError saying so.
    """
    need = sum(int(remote.entries[n].get("num_bytes") or 0) for n in split_files)
    if limit is not None and need > limit:
        raise CacheLimitError(f"{redact.url(remote.url)}: the random-access readers open every shard of the split, "
                              f"{need} bytes, more than the shard cache limit of {limit} bytes; raise "
                              f"{CACHE_LIMIT_ENV}, or read it with vidvol.load, which streams records by byte range")
    for name in split_files:
        ensure_cached(remote, name, limit if limit is not None else 1 << 62)


def version_of(builder: tfds.core.DatasetBuilder) -> Remote:
    """The bucket version a builder was opened from (`open_builder`)."""
    return _REMOTES[os.path.normpath(os.fspath(builder.data_path))]


def data_dir_of(builder: tfds.core.DatasetBuilder) -> str | None:
    """The bucket data_dir a builder was opened from (`open_builder`), None for a local one."""
    remote = _REMOTES.get(os.path.normpath(os.fspath(builder.data_path)))
    return None if remote is None else remote.data_dir


def localize(builder: tfds.core.DatasetBuilder, files: list[str]) -> None:
    """The shard files (local paths) of a builder opened from a bucket, each put on local disk (`ensure_split`)."""
    names: dict[str, list[str]] = {}
    remotes: dict[str, Remote] = {}
    for path in files:
        found = remote_of(path)
        if found is not None:
            remotes[found[0].url] = found[0]
            names.setdefault(found[0].url, []).append(found[1])
    for url, shard_names in names.items():
        ensure_split(remotes[url], shard_names, cache_limit())
