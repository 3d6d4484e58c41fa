"""A build into a bucket data_dir: TFDS runs on a local staging folder, the shards go to the bucket, metadata last.

TFDS writes its metadata through tf.io.gfile, which has no s3:// here, so the builder is rooted at a
local staging folder on the driver. Every path a worker writes (shards, sidecars, progress, the plan)
is mapped from that folder to the bucket. Once TFDS has finished, `publish` moves the shards from the
build's `incomplete.*` prefix to the version prefix (server-side copies), then uploads the metadata
files with `dataset_info.json` last: a reader sees a dataset only once every shard is in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import Any

from vidvol.core import dataset_copy, redact, store

logger = logging.getLogger(__name__)

STAGING_ENV = "VIDVOL_STAGING_DIR"  # where the driver keeps a bucket build's local TFDS folder
INFO_NAME = dataset_copy.INFO_NAME
PUBLISH_LOCK_SUFFIX = ".publishing"  # beside the version prefix while one build publishes into it


class PublishConflictError(RuntimeError):
    """Another build published (or is publishing) the same dataset version into the same bucket prefix."""


def staging_root(url: str) -> str:
    """The local folder a bucket build of `url` stages TFDS's files in (one per bucket data_dir and user)."""
    base = os.environ.get(STAGING_ENV) or os.path.join(tempfile.gettempdir(), f"vidvol_stage_{os.getuid()}")
    return os.path.join(base, hashlib.sha256(redact.url(url).encode()).hexdigest()[:16])


@dataclasses.dataclass(frozen=True)
class BucketTarget:
    """A bucket data_dir `url` and the local staging folder its builder is rooted at."""

    url: str
    staging: str

    @classmethod
    def for_url(cls, url: str) -> BucketTarget:
        """The target of a bucket data_dir, its staging folder created."""
        staging = staging_root(url)
        os.makedirs(staging, exist_ok=True)
        return cls(url.rstrip("/"), staging)

    def remote(self, local: str) -> str:
        """The bucket URL of a path under the staging folder."""
        rel = os.path.relpath(os.fspath(local), self.staging)
        if rel.startswith(".."):
            raise ValueError(f"{local} is not under the staging folder {self.staging}")
        return self.url if rel == "." else f"{self.url}/{rel.replace(os.sep, '/')}"

    def is_published(self, local_version_dir: str) -> bool:
        """Whether the bucket holds this version's `dataset_info.json` (a finished dataset)."""
        return store.exists(f"{self.remote(local_version_dir)}/{INFO_NAME}")

    def publish(self, local_version_dir: str, remote_incomplete: str, *, overwrite: bool, lease: Any = None) -> int:
        """Moves the shards into the version prefix, then uploads the metadata files, `dataset_info.json` last.

        Args:
          local_version_dir: the staging version folder TFDS finished (metadata only: the shards are remote).
          remote_incomplete: the bucket prefix the workers wrote this build's shards under.
          overwrite: replace a dataset already published there (else that is a PublishConflictError).
          lease: the build's `lease.BucketLease` (None for a build without one): checked once the publish lock is
            taken (a build that lost its lease never publishes); a publish lock left by the build whose expired
            lease it took over (a driver killed while publishing) is removed, with a warning.

        Returns:
          The number of objects published.

        Raises:
          PublishConflictError: another build published this version first, or is publishing it now.
        """
        version = self.remote(local_version_dir)
        lock = version + PUBLISH_LOCK_SUFFIX
        me = {"host": socket.gethostname(), "pid": os.getpid(), "id": uuid.uuid4().hex, "time": time.time()}
        if lease is not None:
            me["lease"] = lease.content["token"]
        try:
            store.write_bytes(lock, json.dumps(me).encode(), exclusive=True)
        except FileExistsError:
            if lease is not None and _remove_if_left_by(lock, lease.took_over):
                return self.publish(local_version_dir, remote_incomplete, overwrite=overwrite, lease=lease)
            raise PublishConflictError(
                f"{redact.url(version)}: another build is publishing this dataset version into the bucket "
                f"({_lock_owner(lock)}); this build's shards stay under {redact.url(remote_incomplete)}. "
                f"Remove {redact.url(lock)} if no such build runs, then build again."
            ) from None
        try:
            if store.read_bytes(lock) != json.dumps(me).encode():  # a server that ignores If-None-Match
                raise PublishConflictError(f"{redact.url(version)}: another build took the publish lock {redact.url(lock)}")
            if lease is not None:
                lease.check_held()  # BuildLockLostError: another build took the lease over; this one publishes nothing
            if store.exists(f"{version}/{INFO_NAME}"):
                if not overwrite:
                    raise PublishConflictError(
                        f"{redact.url(version)}: another build published this dataset version while this one ran; "
                        f"nothing was replaced (pass --overwrite to replace it)")
                dataset_copy.unpublish(version, tree=True)  # its dataset_info.json first: unreadable at once
            count = 0
            for obj in store.find(remote_incomplete):
                store.copy(obj, f"{version}/{obj[len(remote_incomplete) + 1:]}")
                count += 1
            count += dataset_copy.upload_metadata(local_version_dir, version)  # dataset_info.json last
            store.remove_tree(remote_incomplete)
        finally:
            store.remove(lock)
        logger.info("published %d objects to %s", count, redact.url(version))
        return count


def _remove_if_left_by(lock: str, dead: dict[str, Any] | None) -> bool:
    """Removes the publish lock `lock` if the build whose expired lease this one took over took it (True)."""
    if not dead or not dead.get("token"):
        return False
    got = store.read_with_etag(lock)
    if got is None:
        return True  # removed meanwhile: take it again
    try:
        owner = json.loads(got[0])
    except ValueError:
        return False
    if not isinstance(owner, dict) or owner.get("lease") != dead["token"]:
        return False
    logger.warning("%s: removing the publish lock left by the build whose expired lease this one took over "
                   "(pid %s on %s, killed while publishing)", redact.url(lock), owner.get("pid"), owner.get("host"))
    return store.remove_conditional(lock, got[1])


def _lock_owner(lock: str) -> str:
    """Who holds a publish lock, as its object says."""
    try:
        owner = json.loads(store.read_bytes(lock))
        return f"pid {owner.get('pid')} on {owner.get('host')}"
    except (OSError, ValueError, RuntimeError):
        return "owner unknown"


def clear_staging(local_version_dir: str) -> None:
    """Removes a staging version folder a previous bucket build left (its metadata is in the bucket, or nowhere)."""
    shutil.rmtree(local_version_dir, ignore_errors=True)
