"""Resuming a build that died: its fingerprint compared with the new build's, and the finished shards it left kept.

A build records `build_fingerprint.json` in its `incomplete.*` folder once its shards are planned
(`vidvol.builders.writer.fingerprint`, re-exported here as `fingerprint`); the next build of the config reads the fingerprints its dead predecessors left
(`previous_folders`), says what changed (`differences`) or keeps every shard whose sidecar is complete
and whose bytes match their SHA-256 (`keep_shards`), so only the other shards' sources are decoded.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use

from vidvol.builders.writer import json_files, outputs
from vidvol.builders.writer import shards_file
from vidvol.builders.writer.fingerprint import FORMAT, fingerprint, input_paths, stat_inputs  # noqa: F401 (re-exported)
from vidvol.builders.writer.plan import ShardTask
from vidvol.core import store

logger = logging.getLogger(__name__)

FINGERPRINT_NAME = "build_fingerprint.json"  # in the incomplete folder until the build publishes
RESUME_ENV = "VIDVOL_RESUME"  # 0/false/no/off: never resume (`--no_resume`)
HASH_INPUTS_ENV = "VIDVOL_HASH_INPUTS"  # 1/true/yes/on: fingerprint the inputs' bytes, not sizes and mtimes
INFO_SUFFIX = ".info.json"
_THREADS = 8  # shards hashed at once: each holds its read buffer (a bucket shard: 8 MiB parts)


def _flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def resume_enabled() -> bool:
    """Whether a build may resume a dead one (False when `VIDVOL_RESUME=0`, as `--no_resume` sets)."""
    return _flag(RESUME_ENV) is not False


def hash_inputs() -> bool:
    """Whether the fingerprint holds the inputs' SHA-256 (`VIDVOL_HASH_INPUTS=1`, `--hash_inputs`)."""
    return bool(_flag(HASH_INPUTS_ENV))


def _changed_shards(old: Sequence[str], new: Sequence[str]) -> str:
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    shown = ", ".join(str(i) for i in changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"shard{'s' if len(changed) != 1 else ''} {shown} of {len(new)}"


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two fingerprints, in words (empty: the same build)."""
    if not isinstance(old, Mapping) or old.get("format") != new.get("format"):
        return [f"its fingerprint is of another format ({old.get('format') if isinstance(old, Mapping) else old!r})"]
    out = []
    for key, what in (("dataset", "the dataset"), ("version", "the dataset version"), ("vidvol", "the vidvol version"),
                      ("tfds", "the TFDS version"), ("file_format", "the file format"), ("features", "the features"),
                      ("inputs", "how inputs are fingerprinted")):
        if old.get(key) != new.get(key):
            out.append(f"{what}: {old.get(key)} before, {new.get(key)} now" if key != "features" else f"{what} changed")
    for name, field in (("config", "config field"), ("options", "option")):
        a, b = old.get(name) or {}, new.get(name) or {}
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"{field} {k}: {a.get(k, '(none)')} before, {b.get(k, '(none)')} now")
    a_splits, b_splits = old.get("splits") or {}, new.get("splits") or {}
    for split in sorted(set(a_splits) | set(b_splits)):
        a, b = a_splits.get(split), b_splits.get(split)
        if a is None or b is None:
            out.append(f"split {split}: {'added' if a is None else 'gone'}")
            continue
        if a.get("sources") != b.get("sources"):
            out.append(f"split {split}: {a.get('sources')} inputs before, {b.get('sources')} now (inputs added or removed)")
        elif a.get("names") != b.get("names"):
            out.append(f"split {split}: other inputs (as many as before, but some added and others removed)")
        elif a.get("records") != b.get("records"):
            out.append(f"split {split}: the inputs' records changed (labels, paths, times; "
                       f"{_changed_shards(a.get('shard_records') or [], b.get('shard_records') or [])})")
        elif a.get("shards") != b.get("shards"):
            out.append(f"split {split}: {a.get('shards')} shards before, {b.get('shards')} now")
        elif a.get("files") != b.get("files") and old.get("inputs") == new.get("inputs"):
            what = "content" if new.get("inputs") == "content" else "size or modification time"
            out.append(f"split {split}: input files changed {what} (the inputs of "
                       f"{_changed_shards(a.get('shard_files') or [], b.get('shard_files') or [])})")
    return out


def write_fingerprint(folder: str, doc: Mapping[str, Any]) -> None:
    """Writes the fingerprint into a build's incomplete folder (whole: a reader sees all of it or nothing)."""
    json_files.write_json(doc, f"{folder}/{FINGERPRINT_NAME}")


def read_fingerprint(folder: str) -> dict[str, Any] | None:
    """The fingerprint a build left in `folder`; None when there is none or it cannot be read."""
    try:
        doc = json_files.read_json(f"{folder}/{FINGERPRINT_NAME}")
    except Exception:  # missing (killed while planning, an older vidvol) or unreadable: nothing to resume
        return None
    return doc if isinstance(doc, dict) else None


def previous_folders(incomplete: str) -> list[str]:
    """The other `incomplete.*_VERSION` folders beside this build's `incomplete` folder (local or gs://), sorted."""
    incomplete = incomplete.rstrip("/")
    parent, own = incomplete.rsplit("/", 1)
    version = own.rsplit("_", 1)[-1]
    try:
        names = tf.io.gfile.listdir(parent)
    except tf.errors.NotFoundError:
        return []
    return sorted(f"{parent}/{n.rstrip('/')}" for n in names
                  if n.startswith("incomplete.") and n.rstrip("/").endswith("_" + version) and n.rstrip("/") != own)


def folder_files(folder: str) -> set[str]:
    """The file names in a build folder (see `_listing`)."""
    return _listing(folder)


def _listing(folder: str) -> set[str]:
    """File names in a build folder (local, gs:// or a bucket prefix); empty when it cannot be listed."""
    try:
        if outputs.is_bucket(folder):
            return {n.rstrip("/").rsplit("/", 1)[-1] for n in store.listdir(folder)}
        return {n.rstrip("/") for n in tf.io.gfile.listdir(folder)}
    except Exception:
        return set()


@dataclasses.dataclass
class Kept:
    """What `keep_shards` kept: per split, the indices of the shards moved into this build's folder."""

    kept: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    damaged: list[str] = dataclasses.field(default_factory=list)  # shards found but not kept, with why
    infos: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # new shard path -> its sidecar

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.kept.values())


def _check(task: ShardTask, old_path: str) -> tuple[dict[str, Any] | None, str]:
    """(the old shard's sidecar if the shard is whole, else None; why not)."""
    try:
        info = json_files.read_json(old_path + INFO_SUFFIX)
    except Exception as e:
        return None, f"its sidecar cannot be read ({type(e).__name__})"
    if not isinstance(info, dict) or info.get("split") != task.split or info.get("index") != task.index:
        return None, "its sidecar is of another shard"
    digest, size = info.get(shards_file.DIGEST), info.get("file_bytes")
    if not isinstance(digest, str) or not isinstance(size, int) or not isinstance(info.get("keys"), list):
        return None, "its sidecar is incomplete"
    try:
        if outputs.is_bucket(old_path):
            actual, actual_size = store.digest(old_path)  # streamed: never a whole shard in memory
        else:
            actual, actual_size = shards_file.file_digest(old_path)
    except Exception as e:
        return None, f"it cannot be read ({type(e).__name__})"
    if actual_size != size or actual != digest:
        return None, f"its bytes do not match its SHA-256 ({actual_size} bytes, {size} recorded)"
    return info, ""


def keep_shards(tasks: Sequence[ShardTask], folders: Sequence[str]) -> Kept:
    """Moves every whole shard of `tasks` found in `folders` (old incomplete folders) to its planned path.

    A shard is kept when its `.info.json` is complete and its bytes match the SHA-256 recorded there;
    it is renamed to the task's path and its sidecar written beside it (the shard first: the sidecar
    marks it done). Anything else (no sidecar, a half-written or damaged shard) is left to be rebuilt.

    Args:
      tasks: this build's planned shard tasks (their paths in this build's incomplete folder).
      folders: the folders (where their workers wrote: a bucket URL for a bucket build) of dead builds with
        the same fingerprint.

    Returns:
      What was kept.
    """
    listings = {f: _listing(f) for f in folders}
    candidates = []
    for task in tasks:
        name = os.path.basename(task.path)
        for folder in folders:
            if name + INFO_SUFFIX in listings[folder] and name in listings[folder]:
                candidates.append((task, f"{folder}/{name}"))
                break
    kept = Kept()
    with concurrent.futures.ThreadPoolExecutor(_THREADS) as pool:
        checked = list(pool.map(lambda c: _check(*c), candidates))
    for (task, old_path), (info, why) in zip(candidates, checked):
        if info is None:
            kept.damaged.append(f"{task.split} shard {task.index} ({old_path}): {why}")
            continue
        new_path = task.path
        try:
            outputs.rename(old_path, new_path)
            info = dict(info, path=new_path)
            json_files.write_json(info, new_path + INFO_SUFFIX)
        except Exception as e:  # the folder went away meanwhile: the shard is built again
            kept.damaged.append(f"{task.split} shard {task.index} ({old_path}): could not be moved ({type(e).__name__}: {e})")
            outputs.remove(new_path)
            continue
        kept.kept.setdefault(task.split, set()).add(task.index)
        kept.infos[new_path] = info
    return kept


def remove_folder(folder: str) -> None:
    """Removes a dead build's folder (local, gs:// or a bucket prefix); a missing one is not an error."""
    try:
        if outputs.is_bucket(folder):
            store.remove_tree(folder)
        elif tf.io.gfile.isdir(folder):
            tf.io.gfile.rmtree(folder)
    except Exception as e:
        logger.warning("could not remove %s (%s: %s); remove it by hand", folder, type(e).__name__, e)


def canonical(doc: Any) -> str:
    """A fingerprint as compared: its JSON with sorted keys."""
    return json.dumps(doc, sort_keys=True)
