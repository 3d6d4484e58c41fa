"""The fingerprint of a build: everything that decides its output, as a small JSON document of digests.

`fingerprint` hashes the planned shard tasks' source records (by columns, one C call per field of a shard's
records) and the input files they name (size and mtime, or with `content` their bytes' SHA-256), split by
split and shard by shard. Equal documents mean the same shards; `vidvol.builders.writer.resume` compares a
dead build's with the new one's. `input_paths` and `stat_inputs` also serve the sources manifest.
"""

from __future__ import annotations

import array
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import operator
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.builders.writer import shards_file
from vidvol.builders.writer.plan import ShardTask
from vidvol.core import store

logger = logging.getLogger(__name__)

FORMAT = 2  # of the fingerprint document (2: records hashed by columns, files as int64s)
_THREADS = 16
_NO_FILE = (-1, -1)  # what an input path that does not exist (or cannot be read) records


_LEAVES = frozenset({int, float, bool, complex, bytes, type(None)})
_FIELDS: dict[type, tuple[str, ...]] = {}  # a record class -> its dataclass fields (none for other classes)


def _fields_of(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else ()
        _FIELDS[kind] = names
    return names


def _collect(values: list, out: list[str], arrays: list[Any] | None, firsts: list[str] | None = None) -> None:
    """Appends the strings holding a `/` in `values` and in everything they hold, one column at a time.

    A column is a list of like values (the same field of every record of a shard): each kind is walked
    with one comprehension, not one call per value, which keeps a 1M-source plan to about a second.
    `arrays` gets the array values met (NumPy's); `firsts` the first `PROBES` relative strings of each column.
    """
    if not values:
        return
    kinds = set(map(type, values))
    for kind in kinds:
        vs = values if len(kinds) == 1 else [v for v in values if type(v) is kind]
        if kind is str:
            found = [v for v in vs if "/" in v]
            out.extend(found)
            if firsts is not None:
                firsts.extend([v for v in found[:4 * PROBES] if not is_absolute(v)][:PROBES])
        elif kind in _LEAVES:
            continue
        elif kind is dict:
            _collect([x for d in vs for x in d.values()], out, arrays, firsts)
        elif kind is tuple or kind is list:
            _collect([x for t in vs for x in t], out, arrays, firsts)
        elif hasattr(kind, "__array__") and hasattr(kind, "tobytes"):
            if arrays is not None:
                arrays.extend(vs)
        elif issubclass(kind, os.PathLike):
            _collect([os.fspath(v) for v in vs], out, arrays, firsts)
        elif issubclass(kind, Mapping):
            _collect([x for d in vs for x in d.values()], out, arrays, firsts)
        elif issubclass(kind, (tuple, list)):
            _collect([x for t in vs for x in t], out, arrays, firsts)
        elif issubclass(kind, (set, frozenset)):
            _collect([x for t in vs for x in sorted(t, key=repr)], out, arrays, firsts)
        else:
            for name in _fields_of(kind):
                _collect(list(map(operator.attrgetter(name), vs)), out, arrays, firsts)


def input_paths(source: Any, out: list[str], arrays: list[Any] | None = None) -> None:
    """Appends the strings holding a `/` a source record names (paths, URLs, ids; see `file_paths`).

    Walks tuples, lists, mappings, sets, dataclass fields and `os.PathLike` values; `arrays` (if given)
    gets the array values met (NumPy's), whose bytes the record's digest adds (their repr is shortened).
    """
    _collect([source], out, arrays)


def is_absolute(path: str) -> bool:
    return path[:1] == "/" or "://" in path


def _remote_stat(path: str) -> tuple[int, int]:
    try:
        if store.is_bucket(path):
            return store.size(path), 0  # the object's size (core.store reads no mtime)
        st = tf.io.gfile.stat(path)
        return st.length, st.mtime_nsec
    except Exception:  # missing or unreadable: the build skips it, and the fingerprint says so
        return _NO_FILE


def _content(path: str) -> tuple[int, int]:
    """(size, first 7 bytes of the SHA-256 as an int: it packs as an int64) of a file's bytes."""
    try:
        if store.is_bucket(path):
            data = store.read_bytes(path)
            return len(data), int.from_bytes(hashlib.sha256(data).digest()[:7], "big")
        local = path[len("file://"):] if path.startswith("file://") else path
        digest, size = shards_file.file_digest(local)
        return size, int(digest[:14], 16)
    except Exception:
        return _NO_FILE


PROBES = 3  # relative strings holding a `/` tried as files before all of them are (a record's id often has one)


def file_paths(candidates: Iterable[str], probes: Sequence[str] | None = None) -> list[str]:
    """The candidates that name files: absolute paths and URLs, and relative ones if one probed exists here.

    Relative strings holding a `/` are most often ids (`class/video.avi`); they count as paths only when
    one of `probes` (by default the first `PROBES` relative candidates; `fingerprint` passes the first
    few of each column of a split's first shard) is a file or folder (a manual_dir given as a relative path).
    """
    unique = list(dict.fromkeys(candidates))
    absolute = [p for p in unique if p[:1] == "/" or "://" in p]
    if len(absolute) == len(unique):
        return absolute
    if probes is None:
        probes = [p for p in unique if not (p[:1] == "/" or "://" in p)][:PROBES]
    if any(os.path.exists(p) for p in probes if not is_absolute(p)):
        return unique
    return absolute


def _stat_local(paths: Sequence[str]) -> list[tuple[int, int]]:
    out = []
    append, stat = out.append, os.stat
    for p in paths:  # inline: this loop runs once per input file (1M for a Kinetics-size plan)
        try:
            st = stat(p[7:] if p[:7] == "file://" else p)
            append((st.st_size, st.st_mtime_ns))
        except (OSError, ValueError):
            append(_NO_FILE)
    return out


def _stat_all(paths: Sequence[str], pool: concurrent.futures.Executor | None = None) -> list[tuple[int, int]]:
    """(size, mtime in ns) of each path, in order: local ones inline, bucket and gs:// ones on `pool`'s threads."""
    remote = [p for p in paths if "://" in p and p[:7] != "file://"]
    if not remote:
        return _stat_local(paths)
    local = [p for p in paths if "://" not in p or p[:7] == "file://"]
    if pool is None:
        with concurrent.futures.ThreadPoolExecutor(_THREADS) as own:
            return _stat_all(paths, own)
    found = dict(zip(local, _stat_local(local)))
    found.update(zip(remote, pool.map(_remote_stat, remote)))
    return [found[p] for p in paths]


_CHILD_MIN = 20_000  # sources from which local inputs are stat'ed by a child process, beside the hashing
_STAT_CHILD = r"""
import array, os, sys
r, w, stat = sys.stdin.buffer, sys.stdout.buffer, os.stat
while True:
    head = r.read(8)
    if len(head) < 8:
        break
    out = array.array("q")
    for p in r.read(int.from_bytes(head, "little")).split(b"\0"):
        try:
            st = stat(p[7:] if p[:7] == b"file://" else p)
            out.append(st.st_size)
            out.append(st.st_mtime_ns)
        except (OSError, ValueError):
            out.append(-1)
            out.append(-1)
    data = out.tobytes()
    w.write(len(data).to_bytes(8, "little") + data)
    w.flush()
"""


_FS_UTF8 = sys.getfilesystemencoding() == "utf-8" and sys.getfilesystemencodeerrors() == "surrogateescape"


class _StatChild:
    """A Python child process that stats local paths while this one hashes records (the check uses both cores).

    `submit` sends one shard's paths; `results` gives each submission's (size, mtime) int64s, in order,
    the same bytes `_stat_local` gives. Whatever the child could not answer (it died, or never started)
    is stat'ed here, so a fingerprint never depends on whether the child ran.
    """

    def __init__(self):
        self.sent: list[list[str]] = []
        self.replies: list[bytes] = []
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _STAT_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
        except (OSError, ValueError):
            self.proc = None
            return
        self.reader = threading.Thread(target=self._read, name="vidvol-stat-child", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            head = out.read(8)
            if len(head) < 8:
                return
            self.replies.append(out.read(int.from_bytes(head, "little")))

    def submit(self, paths: list[str], data: bytes | None = None) -> None:
        """Sends `paths` (`data`: their `_encode("\\0".join(paths))`, as the files digest hashed them)."""
        self.sent.append(paths)
        if self.proc is None:
            return
        if data is None or not _FS_UTF8:
            data = b"\0".join(map(os.fsencode, paths))
        try:
            if data.count(b"\0") != len(paths) - 1:  # a path holding a NUL: the rest is stat'ed here
                raise BrokenPipeError
            self.proc.stdin.write(len(data).to_bytes(8, "little") + data)
        except (OSError, ValueError):
            self._stop()

    def _stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        self.reader.join()
        if self.proc.wait() != 0:
            logger.debug("the fingerprint's stat process ended with %s", self.proc.returncode)
        self.proc = None

    def results(self) -> list[bytes]:
        """Ends the child; each submission's (size, mtime) int64s as bytes, in order."""
        self._stop()
        got = self.replies[: len(self.sent)]
        for paths in self.sent[len(got):]:
            got.append(array.array("q", itertools.chain.from_iterable(_stat_local(paths))).tobytes())
        return [g if len(g) == 16 * len(p) else
                array.array("q", itertools.chain.from_iterable(_stat_local(p))).tobytes() for g, p in zip(got, self.sent)]


def stat_inputs(paths: Iterable[str], *, content: bool = False,
                probes: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of each path (or with `content`, (size, a digest of its bytes)); (-1, -1) if missing.

    Only the paths `file_paths` keeps (`probes` as there) are looked at and returned.
    """
    unique = file_paths(paths, probes)
    if content:
        with concurrent.futures.ThreadPoolExecutor(_THREADS) as pool:
            return dict(zip(unique, pool.map(_content, unique)))
    return dict(zip(unique, _stat_all(unique)))


def _short(h: Any) -> str:
    return h.hexdigest()[:32]


@dataclasses.dataclass
class _Inputs:
    """What one shard task's sources name: their ids, the candidate paths, and the digest of their records."""

    keys: list[str]
    paths: list[str]
    records: bytes


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _column(values: list, h: Any, out: list[str], arrays: list[Any], firsts: list[str] | None,
            relative: bool = True) -> None:
    """Hashes a column of like values (one field of every record of a shard) into `h`, collecting paths.

    One comprehension or C call per column, not one Python call per value: strings by their lengths
    and bytes, ints as int64s, dicts with the same keys and dataclasses (and equal-length tuples) field by
    field, anything else (a column of mixed kinds) by its repr; arrays by their dtype, shape and bytes.
    Each part is tagged with its kind and count, so different records never hash alike by accident.
    """
    kinds = set(map(type, values))
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    h.update(b"%d:" % len(values))
    if kind is str:
        joined = "\0".join(values)
        h.update(b"s" + array.array("q", map(len, values)).tobytes())
        h.update(_encode(joined))
        if firsts is not None or relative:
            found = [v for v in values if "/" in v]
            out.extend(found if relative else [v for v in found if v[:1] == "/" or "://" in v])
            if firsts is not None:
                firsts.extend([v for v in found[:4 * PROBES] if not is_absolute(v)][:PROBES])
        elif joined.count("\0") == len(values) - 1 and "://" not in joined:  # told by C scans of the column
            absolute = (joined[:1] == "/") + joined.count("\0/")
            if absolute == len(values):
                out.extend(values)  # all absolute paths (the path field)
            elif absolute:
                out.extend([v for v in values if v[:1] == "/"])
        else:  # only absolute paths and URLs count
            out.extend([v for v in values if v[:1] == "/" or "://" in v])
        return
    if kind is int:
        try:
            h.update(b"i" + array.array("q", values).tobytes())
            return
        except OverflowError:
            pass
    elif kind is float:
        h.update(b"f" + array.array("d", values).tobytes())
        return
    elif kind is dict:
        shapes = set(map(tuple, values))
        if len(shapes) == 1:
            keys = next(iter(shapes))
            h.update(b"d" + _encode(repr(keys)))
            for k in keys:
                _column(list(map(operator.itemgetter(k), values)), h, out, arrays, firsts, relative)
            return
    elif kind is tuple or kind is list:
        if len(set(map(len, values))) == 1:
            h.update(b"t" if kind is tuple else b"l")
            for c in zip(*values):
                _column(list(c), h, out, arrays, firsts, relative)
            return
    elif kind is not None and _fields_of(kind):
        names = _fields_of(kind)
        h.update(b"c" + _encode(repr((kind.__module__, kind.__qualname__, names))))
        for n in names:
            _column(list(map(operator.attrgetter(n), values)), h, out, arrays, firsts, relative)
        return
    elif kind is not None and hasattr(kind, "__array__") and hasattr(kind, "tobytes"):
        h.update(b"a")
        for a in values:
            h.update(_encode(f"{getattr(a, 'dtype', '')}{getattr(a, 'shape', '')}"))
            h.update(a.tobytes())
        arrays.extend(values)
        return
    elif kind is not None and issubclass(kind, os.PathLike):
        h.update(b"p" + _encode(repr(kind)))
        _column([os.fspath(v) for v in values], h, out, arrays, firsts, relative)
        return
    h.update(b"r" + _encode(repr(values)))  # mixed kinds (None or a path, ...), sets, other objects
    more: list[Any] = []
    found: list[str] = []
    _collect(values, found, more, firsts)
    out.extend(found if relative else [v for v in found if v[:1] == "/" or "://" in v])
    for a in more:  # arrays in it (their repr is shortened)
        h.update(_encode(f"{getattr(a, 'dtype', '')}{getattr(a, 'shape', '')}"))
        h.update(a.tobytes())
    arrays.extend(more)


def _task_inputs(task: ShardTask, firsts: list[str] | None = None, relative: bool = True) -> _Inputs:
    """The ids and paths a shard's sources name, and the digest of its records (by columns, see `_column`).

    `relative=False` leaves out the relative strings (only absolute paths and URLs are `paths` then).
    """
    sources = list(task.sources)
    paths: list[str] = []
    arrays: list[Any] = []
    h = hashlib.sha256()
    _column(sources, h, paths, arrays, firsts, relative)
    keys = [s[0] for s in sources]
    return _Inputs(keys if set(map(type, keys)) <= {str} else [str(k) for k in keys], paths, h.digest())


def _files_digest(paths: Sequence[str], values: Iterable[tuple[int, int]]) -> Any:
    """SHA-256 of a shard's input files: their names, then their (size, mtime or content digest) as int64s."""
    h = hashlib.sha256("\0".join(paths).encode("utf-8", "surrogateescape"))
    h.update(array.array("q", itertools.chain.from_iterable(values)).tobytes())
    return h


def _split_doc(tasks: Sequence[ShardTask], shards: Iterable[tuple[_Inputs, Any]]) -> dict[str, Any]:
    """A split's part of the fingerprint: input count, digests of their names, records and files, per shard too.

    `shards`: each task's `_task_inputs` and the digest of its files (`_files_digest`). The names are hashed
    in the plan's order, which `plan.stable_order` derives from the names alone.
    """
    names, records, files = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    shard_records, shard_files = [], []
    for i, f in shards:
        shard_records.append(i.records.hex()[:32])
        shard_files.append(_short(f))
        records.update(i.records)
        files.update(f.digest())
        names.update("\0".join(i.keys).encode("utf-8", "surrogateescape") + b"\0")
    return {"sources": sum(len(t.sources) for t in tasks), "shards": len(tasks), "names": _short(names),
            "records": _short(records), "files": _short(files), "shard_records": shard_records, "shard_files": shard_files}


def split_fingerprint(tasks: Sequence[ShardTask], inputs: Sequence[_Inputs],
                      stats: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """A split's part of the fingerprint from each task's `_task_inputs` and each path's `stat_inputs`."""
    def files(i: _Inputs) -> Any:
        ps = [p for p in i.paths if p in stats]  # only the paths that name files: others are in the record digest
        return _files_digest(ps, map(stats.__getitem__, ps))

    return _split_doc(tasks, ((i, files(i)) for i in inputs))


def fingerprint(
    *, dataset: str, version: str, vidvol_version: str, tfds_version: str, file_format: str, config: Mapping[str, str],
    features: str, options: Mapping[str, Any], tasks: Mapping[str, Sequence[ShardTask]], content: bool = False,
) -> dict[str, Any]:
    """Everything that decides a build's output, as a JSON document (equal documents: the same shards).

    The document is small (a few digests per shard). Sizes and mtimes are read shard by shard, right
    after the shard's records are hashed (by columns, `_task_inputs`), while they are in the CPU's
    caches: a 1M-source plan costs one `stat` per input file and a few passes over 500 records at a time.
    Relative strings count as paths when one of the first few of a column of a split's first shard
    exists (`file_paths`).

    Args:
      dataset: `NAME/CONFIG`.
      version: the dataset version.
      vidvol_version: vidvol's release.
      tfds_version: TFDS's release (its feature encoders write the examples).
      file_format: tfrecord or array_record.
      config: the builder config's fields, each as its repr.
      features: the features' JSON (or a digest of it).
      options: the build options that shape the shards (num_shards, max_shard_size, ...).
      tasks: the planned shard tasks per split.
      content: record the inputs' SHA-256 instead of their sizes and mtimes (slower: every byte is read).

    Returns:
      The fingerprint document.
    """
    firsts: list[str] = []  # the first relative strings of each column of each split's first shard
    for ts in tasks.values():
        if ts:
            _task_inputs(ts[0], firsts)
    relative = any(os.path.exists(p) for p in firsts)
    splits = {}
    if content:  # every file read once (threads), however many shards name it
        inputs = {split: [_task_inputs(t) for t in ts] for split, ts in tasks.items()}
        stats = stat_inputs(itertools.chain.from_iterable(i.paths for per in inputs.values() for i in per),
                            content=True, probes=firsts if relative else [])
        splits = {split: split_fingerprint(ts, inputs[split], stats) for split, ts in tasks.items()}
    else:
        child = _StatChild() if sum(len(t.sources) for ts in tasks.values() for t in ts) >= _CHILD_MIN else None
        pending: list[tuple[Any, Any]] = []  # (files digest, its values' bytes or None: the child's answer, in order)
        with concurrent.futures.ThreadPoolExecutor(_THREADS) as pool:  # bucket and gs:// inputs only
            def shard(task: ShardTask) -> _Inputs:
                i = _task_inputs(task, relative=relative)
                ps = list(dict.fromkeys(i.paths))
                names = _encode("\0".join(ps))
                h = hashlib.sha256(names)
                if child is not None and ps and (b"://" not in names or
                                                 not any("://" in p and p[:7] != "file://" for p in ps)):
                    child.submit(ps, names)
                    pending.append((h, None))
                else:
                    pending.append((h, array.array("q", itertools.chain.from_iterable(_stat_all(ps, pool))).tobytes()))
                return i

            try:
                inputs = {split: [shard(t) for t in ts] for split, ts in tasks.items()}
            except BaseException:
                if child is not None:
                    child._stop()  # the child ends with this check (whatever stopped it)
                raise
        answers = iter(child.results() if child is not None else ())
        digests = iter([h for h, _ in pending])
        for h, values in pending:
            h.update(next(answers) if values is None else values)
        splits = {split: _split_doc(ts, [(i, next(digests)) for i in inputs[split]]) for split, ts in tasks.items()}
    return {
        "format": FORMAT, "dataset": dataset, "version": version, "vidvol": vidvol_version, "tfds": tfds_version,
        "file_format": file_format, "config": dict(config),
        "features": hashlib.sha256(features.encode("utf-8", "surrogateescape")).hexdigest()[:32],
        "options": dict(options), "inputs": "content" if content else "size+mtime",
        "splits": splits,
    }
