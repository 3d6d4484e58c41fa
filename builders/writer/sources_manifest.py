"""What a dataset was built from: one digest per source, so a rebuild tells new, changed and removed sources apart.

A build writes `sources.json` next to its shards: per split, each source's id (its key) and a digest of its
record and of its input files (size and mtime, or their bytes' SHA-256 with `--hash_inputs`). A later build of
the same config over the same manual_dir plans its sources again (listing files, reading the labels CSV: nothing
is decoded) and compares (`compare`): the same digests mean the dataset is up to date; any difference is counted
as sources added, changed and removed. A record's `origin` field (where it was named, such as `labels.csv:12`) is
left out of its digest: reordering a CSV's rows changes no example. Format 2 also says what a grow needs
(`add_shards`, `build_digest`); format 1 is compared, never grown from (`grow_blocker`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vidvol.builders.example_io import Source
from vidvol.builders.writer import json_files, outputs
from vidvol.builders.writer import fingerprint as fingerprint_lib

MANIFEST_NAME = "sources.json"
FORMAT = 2
READABLE_FORMATS = (1, 2)
_MESSAGE_FIELDS = ("origin",)  # record fields that only say where a source was named: no part of its example
_SHOWN = 5  # source ids an error names per kind of change


class StaleDatasetError(ValueError):
    """A prepared dataset whose manual_dir no longer holds what it was built from."""


_FIELDS: dict[type, tuple[str, ...] | None] = {}  # a record class -> its fields but the message ones (None: no dataclass)
# Quoted strings holding a `/` in a record's repr (paths, URLs, ids); a repr with a backslash escape is walked instead.
_QUOTED = re.compile(r"'([^'\\]*/[^'\\]*)'|\"([^\"\\]*/[^\"\\]*)\"")


def _fields(kind: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(kind, ())
    if names == ():
        names = (tuple(f.name for f in dataclasses.fields(kind) if f.name not in _MESSAGE_FIELDS)
                 if dataclasses.is_dataclass(kind) else None)
        _FIELDS[kind] = names
    return names


def _record_text(record: Any) -> str:
    """A source record as text, its message fields (`origin`: a CSV line, a class folder) left out."""
    kind = type(record)
    names = _fields(kind)
    if names is None:
        return repr(record)
    return kind.__qualname__ + repr(tuple([getattr(record, n) for n in names]))


def _paths(text: str, record: Any) -> list[str]:
    """The strings holding a `/` that a record names (candidate input files), from its text when it can be read."""
    if "\\" not in text:
        return [a or b for a, b in _QUOTED.findall(text)]
    kind = type(record)
    names = _fields(kind)
    found: list[str] = []
    fingerprint_lib.input_paths([getattr(record, n) for n in names] if names is not None else record, found)
    return found


_CHUNK_PATHS = 16_384  # candidate input paths stat'ed (and their sources hashed) at a time: planning memory stays flat


def digests(sources: Mapping[str, Sequence[Source]], manual_dir: str | None, *,
            content: bool = False) -> dict[str, dict[str, str]]:
    """{split: {source id: digest}} of every planned source (examples and skips alike).

    Sources are digested a chunk at a time (about `_CHUNK_PATHS` input paths each), so a collection of many
    files (frame folders) never has every path, text and stat in memory at once. Whether relative strings
    count as paths is decided once, by the first relative candidates of the whole plan (`file_paths`' probes).

    Args:
      sources: each split's sources, `(id, record)` pairs.
      manual_dir: the manual_dir the build was given (its path is left out of the records' text).
      content: digest the input files' bytes (SHA-256) rather than their sizes and mtimes.

    Returns:
      Per split, each source id's 24-hex-digit digest of its record and input files.
    """
    prefix = manual_dir.rstrip("/") + "/" if manual_dir else None
    out: dict[str, dict[str, str]] = {split: {} for split in sources}
    pending: list[tuple[dict[str, str], str, str, list[str]]] = []  # (its split's digests, id, text, paths)
    every: list[str] = []
    probes: dict[str, None] = {}  # the plan's first relative candidates, in order
    sha256 = hashlib.sha256

    def flush() -> None:
        stats = fingerprint_lib.stat_inputs(every, content=content, probes=list(probes))
        for digest_of, key, text, found in pending:
            h = sha256(text.encode("utf-8", "surrogateescape"))
            for p in found:
                value = stats.get(p)
                if value is not None:
                    h.update(b"\0%d:%d" % value)
            digest_of[key] = h.hexdigest()[:24]
        pending.clear()
        every.clear()

    for split, srcs in sources.items():
        for key, record in srcs:
            text = _record_text(record)
            found = _paths(text, record)
            every.extend(found)
            if len(probes) < fingerprint_lib.PROBES:
                for p in found:
                    if not fingerprint_lib.is_absolute(p) and len(probes) < fingerprint_lib.PROBES:
                        probes[p] = None
            pending.append((out[split], str(key), text if prefix is None else text.replace(prefix, "<manual_dir>/"), found))
            # A chunk with relative candidates waits until the probes that decide them all are known.
            if len(every) >= _CHUNK_PATHS and (not probes or len(probes) >= fingerprint_lib.PROBES):
                flush()
    flush()
    return out


def document(sources: Mapping[str, Sequence[Source]], manual_dir: str | None, *,
             content: bool = False) -> dict[str, Any]:
    """The manifest a build writes: its format, how inputs were compared, and every source's digest.

    Args:
      sources: each split's sources, `(id, record)` pairs.
      manual_dir: the manual_dir the build was given.
      content: digest the input files' bytes (SHA-256) rather than their sizes and mtimes.

    Returns:
      The manifest, without its shards (`add_shards` adds them once they are written) and with an empty
      `build` (the build sets it: `build_digest`).
    """
    return {"format": FORMAT, "inputs": "content" if content else "size+mtime", "build": "", "generation": 0,
            "splits": digests(sources, manual_dir, content=content)}


def build_digest(fingerprint: Mapping[str, Any]) -> str:
    """A 24-hex-digit digest of a build's fingerprint document (`resume.fingerprint`, planned with no shard)."""
    text = json.dumps(fingerprint, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def add_shards(doc: dict[str, Any], shards: Mapping[str, Sequence[tuple[str, list | None]]], generation: int = 0) -> None:
    """Records each split's shard files and their sources in record order (`[id, examples, bytes]`), in place.

    A shard whose sources are not known (None) leaves its split without `shards`: that dataset cannot grow.
    """
    doc["generation"] = int(generation)
    doc["shards"] = {split: ([{"file": os.path.basename(f), "sources": src} for f, src in files]
                             if all(src is not None for _, src in files) else None)
                     for split, files in shards.items()}


def shard_files(doc: Mapping[str, Any]) -> set[str]:
    """The shard file names a manifest lists (`add_shards`), every split's."""
    return {s["file"] for shards in (doc.get("shards") or {}).values() for s in shards or []}


def grow_blocker(doc: Mapping[str, Any]) -> str:
    """Why a dataset with manifest `doc` cannot grow ("" when it can)."""
    if doc.get("format") != FORMAT:
        return (f"its {MANIFEST_NAME} is format {doc.get('format')} (an earlier vidvol's build), which does not say "
                "which shard holds each source")
    missing = sorted(split for split, files in (doc.get("shards") or {}).items() if files is None)
    if "shards" not in doc or missing:
        return f"its {MANIFEST_NAME} does not say which shard holds each source of {', '.join(missing) or 'its splits'}"
    return ""


def write(doc: Mapping[str, Any], version_dir: str) -> str:
    """Writes `sources.json` into a version folder (local, gs:// or a bucket); returns its path."""
    path = os.path.join(version_dir, MANIFEST_NAME) if not outputs.is_bucket(version_dir) else f"{version_dir}/{MANIFEST_NAME}"
    json_files.write_json(doc, path, compact=True)
    return path


def read(version_dir: str) -> dict[str, Any] | None:
    """The manifest of a built dataset, or None if it has none (built by vidvol 0.2.0 or earlier) or it is unreadable."""
    path = os.path.join(version_dir, MANIFEST_NAME) if not outputs.is_bucket(version_dir) else f"{version_dir}/{MANIFEST_NAME}"
    try:
        if not outputs.exists(path):
            return None
        doc = json.loads(outputs.read_bytes(path))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") in READABLE_FORMATS and isinstance(doc.get("splits"), dict) else None


@dataclasses.dataclass
class Changes:
    """How a manual_dir's sources differ from those a dataset was built from, per split: source ids."""

    added: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    changed: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    removed: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    kept: dict[str, int] = dataclasses.field(default_factory=dict)

    def count(self, kind: str) -> int:
        return sum(len(v) for v in getattr(self, kind).values())

    @property
    def any(self) -> bool:
        return bool(self.count("added") or self.count("changed") or self.count("removed"))

    def counts(self) -> str:
        """`3 added, 1 changed, 0 removed, 16 kept`."""
        kept = sum(self.kept.values())
        return (f"{self.count('added')} added, {self.count('changed')} changed, "
                f"{self.count('removed')} removed, {kept} kept")

    def details(self) -> list[str]:
        """One line per split that changed, naming the first few source ids of each kind."""
        lines = []
        for split in sorted(set(self.added) | set(self.changed) | set(self.removed)):
            parts = []
            for kind in ("added", "changed", "removed"):
                ids = getattr(self, kind).get(split, [])
                if ids:
                    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
                    parts.append(f"{len(ids)} {kind} ({', '.join(sorted(ids)[:_SHOWN])}{more})")
            if parts:
                lines.append(f"  {split}: " + "; ".join(parts))
        return lines


def kept_ids(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, set[str]]:
    """Per split, the ids of the sources kept: the same digest in the same split in both manifests."""
    before = old.get("splits", {})
    return {split: {k for k, d in per.items() if before.get(split, {}).get(k) == d}
            for split, per in new.get("splits", {}).items()}


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> Changes:
    """The sources added, changed and removed from manifest `old` to manifest `new`, split by split.

    A source id that moved to another split counts as changed (in its new split).
    """
    changes = Changes()
    old_splits, new_splits = old.get("splits", {}), new.get("splits", {})
    old_home = {key: split for split, per in old_splits.items() for key in per}
    for split in sorted(set(old_splits) | set(new_splits)):
        before, after = old_splits.get(split, {}), new_splits.get(split, {})
        added = [k for k in after if k not in before]
        moved = [k for k in added if k in old_home]
        changes.added[split] = [k for k in added if k not in old_home]
        changes.changed[split] = [k for k in after if k in before and before[k] != after[k]] + moved
        changes.removed[split] = [k for k in before if k not in after and not any(k in p for p in new_splits.values())]
        changes.kept[split] = sum(1 for k in after if k in before and before[k] == after[k])
    for kind in ("added", "changed", "removed"):
        setattr(changes, kind, {s: ids for s, ids in getattr(changes, kind).items() if ids})
    return changes
