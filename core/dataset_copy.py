"""Copies a prepared dataset version between a bucket and a local folder, every shard checked against shards.json.

`pull` (bucket -> local) and `push` (local -> bucket) move the shards first and the metadata last,
`dataset_info.json` at the very end, so a folder or prefix holds a readable dataset only once all of
it is there. A shard whose size or SHA-256 differs from its `shards.json` entry stops the copy
naming it. A shard already present with the right digest is not copied again (a rerun resumes).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

from vidvol.core import artifacts, redact, store

INFO_NAME = "dataset_info.json"
_CHUNK = 4 << 20


class CopyError(RuntimeError):
    """A dataset could not be copied: a shard that does not match shards.json, a missing dataset, a conflict."""


def _digest(path: str) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def check_shard(entry: dict, path: str, where: str) -> None:
    """CopyError naming `where` when the file at `path` differs from its shards.json `entry` in size or SHA-256."""
    digest, size = _digest(path)
    if entry.get("num_bytes") is not None and size != entry["num_bytes"]:
        raise CopyError(f"{where}: {size} bytes, shards.json records {entry['num_bytes']}; rebuild or re-push it")
    if entry.get("sha256") and digest != entry["sha256"]:
        raise CopyError(f"{where}: SHA-256 {digest[:12]}..., shards.json records {entry['sha256'][:12]}...; "
                        "the shard was changed or damaged in transit; rebuild or re-push it")


def _matches(entry: dict, path: str) -> bool:
    try:
        check_shard(entry, path, path)
    except (CopyError, OSError):
        return False
    return True


def pull(url: str, local: str, *, splits: set[str] | None = None) -> int:
    """Copies the dataset version at `url` (a bucket prefix) into the local folder `local`.

    Args:
      url: the bucket prefix of one version, e.g. `s3://b/tfds/mri_volumes/small_32/2.0.0`.
      local: the local version folder to fill (created).
      splits: copy only the shards of these splits (the metadata always), e.g. for one reader's split.

    Returns:
      The number of files downloaded (0 when `local` already held all of it).

    Raises:
      CopyError: `url` holds no finished dataset, or a shard does not match its shards.json entry.
    """
    url = url.rstrip("/")
    if not store.exists(f"{url}/{INFO_NAME}"):
        raise CopyError(f"{redact.url(url)}: no {INFO_NAME} there, so no finished dataset (build it with "
                        f"`python -m vidvol build NAME --data_dir BUCKET_DATA_DIR`)")
    os.makedirs(local, exist_ok=True)
    doc = json.loads(store.read_bytes(f"{url}/{artifacts.SHARDS_NAME}"))
    names = {os.path.basename(o) for o in store.listdir(url)}
    shard_names = {e["file"] for e in doc["shards"]}
    copied = 0
    for entry in doc["shards"]:
        if splits is not None and entry["split"] not in splits:
            continue
        dst = os.path.join(local, entry["file"])
        if os.path.exists(dst) and _matches(entry, dst):
            continue
        fd, tmp = tempfile.mkstemp(dir=local, prefix=".pull-", suffix=".tmp")
        os.close(fd)
        try:
            store.download(f"{url}/{entry['file']}", tmp)
            check_shard(entry, tmp, f"{redact.url(url)}/{entry['file']}")
            os.replace(tmp, dst)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        copied += 1
    for name in sorted(names - shard_names, key=lambda n: n == INFO_NAME):  # metadata, dataset_info.json last
        if name.endswith(".info.json") or name.endswith(".tmp"):
            continue
        store.download(f"{url}/{name}", os.path.join(local, name))
        copied += 1
    return copied


def push(local: str, url: str, *, overwrite: bool = False) -> int:
    """Copies the local dataset version folder `local` to the bucket prefix `url`, shards first, metadata last.

    Args:
      local: a prepared version folder (with dataset_info.json and shards.json).
      url: the bucket prefix to write, e.g. `s3://b/tfds/mri_volumes/small_32/2.0.0`.
      overwrite: replace a dataset already there (else that is a CopyError).

    Returns:
      The number of files uploaded.

    Raises:
      CopyError: `local` is not a prepared dataset, a shard does not match shards.json, or `url` holds one.
    """
    url = url.rstrip("/")
    shards_path = os.path.join(local, artifacts.SHARDS_NAME)
    if not os.path.exists(os.path.join(local, INFO_NAME)) or not os.path.exists(shards_path):
        raise CopyError(f"{local}: not a prepared dataset folder (no {INFO_NAME} or {artifacts.SHARDS_NAME})")
    if store.exists(f"{url}/{INFO_NAME}"):
        if not overwrite:
            raise CopyError(f"{redact.url(url)}: a dataset is there already (--overwrite replaces it)")
        unpublish(url)  # first: the old dataset stops being readable
    with open(shards_path) as f:
        doc = json.load(f)
    for entry in doc["shards"]:
        check_shard(entry, os.path.join(local, entry["file"]), os.path.join(local, entry["file"]))
    count = 0
    for entry in doc["shards"]:
        store.upload(os.path.join(local, entry["file"]), f"{url}/{entry['file']}")
        count += 1
    return count + upload_metadata(local, url, skip={e["file"] for e in doc["shards"]})


def upload_metadata(local: str, url: str, *, skip: set[str] = frozenset()) -> int:
    """Uploads the files of the version folder `local` (but `skip` and dot files) to `url`, `dataset_info.json`
    last: a reader sees the dataset only once everything else is in. Returns the number uploaded."""
    names = [n for n in os.listdir(local) if os.path.isfile(os.path.join(local, n)) and n not in skip
             and not n.startswith(".")]
    for name in sorted(names, key=lambda n: (n == INFO_NAME, n)):
        store.upload(os.path.join(local, name), f"{url}/{name}")
    return len(names)


def unpublish(url: str, *, tree: bool = False) -> None:
    """Makes the dataset at `url` unreadable (its `dataset_info.json` removed first); `tree`: then every object."""
    store.remove(f"{url}/{INFO_NAME}")
    if tree:
        store.remove_tree(url)


def cache_dir(url: str) -> str:
    """The local folder a reader keeps a bucket dataset in (`VIDVOL_CACHE_DIR`, default ~/.cache/vidvol/buckets)."""
    base = os.environ.get("VIDVOL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "vidvol", "buckets")
    return os.path.join(base, hashlib.sha256(redact.url(url.rstrip("/")).encode()).hexdigest()[:16])
