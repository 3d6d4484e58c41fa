"""Facts about the machine this process runs on."""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys


def num_cpus() -> int:
    """Cores this process may use (its CPU affinity where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def release_freed_memory() -> None:
    """Collects Python's garbage and hands the allocator's free pages back to the OS (glibc's `malloc_trim`).

    A build calls it once, before its decode: what planning freed (the manual_dir's listing and digests)
    then no longer counts in the driver's resident memory while the decode's threads allocate their own.
    Without glibc (macOS, musl) only the garbage is collected.
    """
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


_BEAM_GCP_WARNING = _DropMessage("apitools not found")


def quiet_beam_import() -> None:
    """Drops, from the root logger, the one warning `import apache_beam` logs when Beam's GCP extra is absent.

    Beam logs "apitools not found, and bigquery client libraries are not available" whenever its `[gcp]`
    extra is not installed, which vidvol does not need (only `--runner dataflow` and `gs://` do: the
    `vidvol[gcp]` extra). `import vidvol` does not import Beam (a build, a `tfds build` or the reader of
    a bucket does, later), so the filter stays on the root logger: it drops that message and nothing else.
    """
    root = logging.getLogger()
    if _BEAM_GCP_WARNING not in root.filters:
        root.addFilter(_BEAM_GCP_WARNING)
