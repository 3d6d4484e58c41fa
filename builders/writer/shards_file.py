"""`shards.json`: what each worker records about the shard it wrote, read back by `python -m vidvol verify`.

At build time each worker hashes the shard file it wrote (SHA-256 of the bytes on disk, read once
before the file is renamed into place) and counts its examples; the driver gathers these into
`shards.json` next to the skip report. SHA-256 rather than CRC32C: it is in Python's standard
library (no extra package), `sha256sum` checks it with no vidvol at all, it is what TFDS records
for downloads, and it catches any change, not only the random ones a CRC is built for; one
hashing pass over a shard costs a small fraction of encoding its examples. The file is the same on every runner
(the shard bytes are deterministic, the entries are sorted). `vidvol.cli.verify` checks a prepared dataset
against it; `load_shards_file` is what it accepts as a usable `shards.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.builders.writer import json_files
from vidvol.core import artifacts
from vidvol.core import redact

DIGEST = "sha256"  # the checksum each shard entry records, by its hashlib name
_CHUNK = 1 << 20  # a remote shard's read size: threads hashing shards at once hold one each


def file_digest(path: str) -> tuple[str, int]:
    """(SHA-256 hex digest, size in bytes) of a file: a local one read into one small reused buffer
    (`hashlib.file_digest`), others (gs://, ...) through tf.io.gfile a chunk at a time."""
    if "://" not in path or path.startswith("file://"):
        with open(path.removeprefix("file://"), "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest(), f.tell()
    h = hashlib.sha256()
    size = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def shard_entry(path: str, split: str, examples: int, file_bytes: int | None, digest: str | None) -> dict[str, Any]:
    """One shard's line in `shards.json` (by file name: the folder moves when TFDS renames it)."""
    return {"file": os.path.basename(path), "split": split, "examples": int(examples),
            "num_bytes": file_bytes, DIGEST: digest}


def write_shards_file(
    path: str, *, dataset: str, version: str, manual_dir: str | None, entries: Sequence[dict[str, Any]]
) -> None:
    """Writes `shards.json`: the dataset, the manual_dir it was built from and one entry per shard file."""
    doc = {
        "dataset": dataset,
        "version": version,
        "manual_dir": redact.url(manual_dir) if manual_dir else manual_dir,  # never a URL's credentials
        "checksum": DIGEST,
        "shards": sorted(entries, key=lambda e: e["file"]),
    }
    json_files.write_json(doc, path)


def read_shards_file(data_path: str) -> dict[str, Any] | None:
    """The `shards.json` of a prepared dataset folder, or None where there is none (built before it existed)."""
    path = os.path.join(os.fspath(data_path), artifacts.SHARDS_NAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return json.loads(f.read())


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _entry_problems(i: int, entry: Any) -> list[str]:
    """What is wrong with the `i`th entry of `shards` (none when well formed)."""
    if not isinstance(entry, dict):
        return [f"shards[{i}] is {_kind(entry)}, expected an object"]
    where = f"shards[{i}] ({entry['file']})" if isinstance(entry.get("file"), str) else f"shards[{i}]"
    out = []
    if not isinstance(entry.get("file"), str) or not entry["file"] or "/" in entry["file"]:
        out.append(f"{where}: `file` is {_kind(entry.get('file'))}, expected a shard file name")
    if not isinstance(entry.get("split"), str):
        out.append(f"{where}: `split` is {_kind(entry.get('split'))}, expected a string")
    for key, optional in (("examples", False), ("num_bytes", True)):
        value = entry.get(key)
        if not ((optional and value is None) or (type(value) is int and value >= 0)):  # not bool
            out.append(f"{where}: `{key}` is {value!r}, expected a whole number" + (" or null" if optional else ""))
    digest = entry.get(DIGEST)
    if digest is not None and not (isinstance(digest, str) and _SHA256_RE.fullmatch(digest)):
        out.append(f"{where}: `{DIGEST}` is {_kind(digest)} {str(digest)[:20]!r}, expected 64 hex digits or null")
    return out


def shards_doc_problems(doc: Any) -> list[str]:
    """What makes `doc` (a parsed `shards.json`) unusable: not an object, keys missing or of the wrong kind."""
    if not isinstance(doc, dict):
        return [f"it is {_kind(doc)}, expected an object with dataset, version, manual_dir, checksum and shards"]
    out = [f"no `{key}`" for key in ("dataset", "version", "manual_dir", "checksum", "shards") if key not in doc]
    for key in ("dataset", "version", "checksum"):
        if key in doc and not isinstance(doc[key], str):
            out.append(f"`{key}` is {_kind(doc[key])}, expected a string")
    if doc.get("manual_dir") is not None and not isinstance(doc["manual_dir"], str):
        out.append(f"`manual_dir` is {_kind(doc['manual_dir'])}, expected a string or null")
    if isinstance(doc.get("checksum"), str) and doc["checksum"] != DIGEST:
        out.append(f"`checksum` is {doc['checksum']!r}; this vidvol records and checks {DIGEST!r}")
    if "shards" in doc and not isinstance(doc["shards"], list):
        out.append(f"`shards` is {_kind(doc['shards'])}, expected an array of shard entries")
    elif isinstance(doc.get("shards"), list):
        names: set[str] = set()
        for i, entry in enumerate(doc["shards"]):
            out.extend(_entry_problems(i, entry))
            name = entry.get("file") if isinstance(entry, dict) else None
            if isinstance(name, str) and name in names:
                out.append(f"shards[{i}]: {name} is listed twice")
            if isinstance(name, str):  # a `file` that is an array or object is reported above (and is unhashable)
                names.add(name)
    return out


def load_shards_file(data_path: str, *, dataset: str, version: str) -> tuple[dict[str, Any] | None, str | None]:
    """(`shards.json` of `data_path` if usable here, else None; why it is not, None when fine or absent).

    Usable: valid JSON, well formed (`shards_doc_problems`), and written for `dataset` (NAME/CONFIG) at `version`.
    """
    try:
        doc = read_shards_file(data_path)
    except (ValueError, UnicodeDecodeError, tf.errors.OpError) as e:
        return None, f"unreadable ({first_line(e)}); it is written by the build, so rebuild"
    if doc is None:
        return None, None
    problems = shards_doc_problems(doc)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        return None, f"malformed: {shown}. It is written by the build and never edited by hand: rebuild to restore it"
    if (doc["dataset"], doc["version"]) != (dataset, version):
        return None, (f"it was written for {doc['dataset']} {doc['version']}, but this folder holds {dataset} {version}: "
                      "its checksums do not apply here (a file copied from another dataset?)")
    return doc, None


def first_line(error: BaseException) -> str:
    """The first line of an error's message, without TensorFlow's `{{function_node ...}}` and `[Op:...]` decorations.

    Args:
      error: any exception (a `tf.errors.OpError` gives its `message`).

    Returns:
      One line of text; the exception's type name when it has no message.
    """
    text = getattr(error, "message", None) or str(error)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:[^\]]*\].*", "", text)  # eager op suffix: `[Op:IteratorGetNext] name: `
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__
