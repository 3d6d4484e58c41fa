"""Where a bucket build keeps what another host needs to finish it: its lease and its `incomplete.*` prefix.

Beside the version prefix `.../NAME/CONFIG/VERSION/` in the bucket: `build_VERSION.lock`, the lease
(`vidvol.builders.writer.lease`), and `incomplete.ID_VERSION/`, the shards, their sidecars (written last),
the progress records, the plan and `build_fingerprint.json`. Readers open a version prefix only once its
`dataset_info.json` is there. The lease holder lists the `incomplete.*` prefixes in the bucket, not its
local staging folder, so the build a dead driver left is resumed from any host.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from vidvol.builders.writer import build_lock, lease
from vidvol.builders.writer.bucket import BucketTarget
from vidvol.core import redact, store

logger = logging.getLogger(__name__)


def in_bucket(target: BucketTarget | None) -> bool:
    """Whether the build's lock and state live in the bucket (an `s3://` data_dir: conditional writes)."""
    return target is not None and store.conditional_writes(target.url) and lease.enabled()


def lease_url(target: BucketTarget, local_version_dir: str | os.PathLike) -> str:
    """`s3://.../NAME/CONFIG/build_VERSION.lock` for the staging version folder `local_version_dir`."""
    return build_lock.lock_path(target.remote(os.fspath(local_version_dir)))


@contextlib.contextmanager
def hold(data_path: str | os.PathLike, *, what: str, target: BucketTarget | None, mode: str | None = None,
         on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[Any]:
    """The build's lock: the lease in the bucket for an `s3://` data_dir, else the local lock (`build_lock.hold`).

    Args:
      data_path: the (staging) version folder the build prepares.
      what: the build, as logs and errors name it.
      target: the bucket target of a bucket build, None for a local one.
      mode: "wait" or "fail" (default: `VIDVOL_BUILD_LOCK`, else "wait").
      on_wait: called with the holder's record when this build starts waiting.

    Returns:
      A context manager yielding the held lock (a `BuildLock` or a `BucketLease`).
    """
    if in_bucket(target):
        with lease.hold(lease_url(target, data_path), what=what, mode=mode, on_wait=on_wait) as held:
            yield held
        return
    if target is not None:
        why = (f"{lease.ENV_LEASE}=0" if store.conditional_writes(target.url)
               else f"{target.url.split('://', 1)[0]}:// has no conditional writes in vidvol")
        logger.warning("%s: %s, so this bucket build's lock and resume state stay on this driver (%s): a build that "
                       "dies is resumed from this host only", what, why, target.staging)
    with build_lock.hold(data_path, what=what, mode=mode, on_wait=on_wait) as held:
        yield held


def incomplete_prefixes(target: BucketTarget, local_version_dir: str | os.PathLike) -> list[str]:
    """The URLs of the `incomplete.*_VERSION` prefixes in the bucket beside the version prefix, sorted."""
    local_version_dir = os.fspath(local_version_dir).rstrip("/")
    parent, version = os.path.split(local_version_dir)
    remote_parent = target.remote(parent)
    return sorted(u for u in store.listdir(remote_parent)
                  if (n := u.rsplit("/", 1)[-1]).startswith("incomplete.") and n.endswith("_" + version))


def previous_folders(target: BucketTarget, local_incomplete: str) -> list[str]:
    """The staging paths of the other builds' `incomplete.*` folders of this version, found in the bucket, sorted.

    A staging path maps to its prefix in the bucket by `target.remote`; the folder need not exist on this
    host (the build that left it may have run on another).
    """
    local_incomplete = local_incomplete.rstrip("/")
    parent, own = os.path.split(local_incomplete)
    version = own.rsplit("_", 1)[-1]
    names = {u.rsplit("/", 1)[-1] for u in incomplete_prefixes(target, os.path.join(parent, version))}
    with contextlib.suppress(OSError):  # and the local ones (a folder killed before its workers wrote anything)
        names |= {n for n in os.listdir(parent) if n.startswith("incomplete.") and n.endswith("_" + version)}
    return sorted(os.path.join(parent, n) for n in names if n != own)


def running_build(target: BucketTarget, local_version_dir: str | os.PathLike) -> str | None:
    """Who holds the build lease, if its holder renewed it lately (by its own clock), else None."""
    if not in_bucket(target):
        return None
    url = lease_url(target, local_version_dir)
    got = lease.read(url)
    if got is None or not lease.looks_live(got[0]):
        return None
    return lease.describe(got[0], url)


def remove_prefix(url: str) -> None:
    """Removes an `incomplete.*` prefix a dead build left (`--remove_incomplete`)."""
    logger.warning("Removing %s (left by an interrupted build)", redact.url(url))
    store.remove_tree(url)
