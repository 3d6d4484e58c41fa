"""Facts about the machine this process runs on."""

from __future__ import annotations

import logging
import os


def num_cpus() -> int:
    """Cores this process may use (its CPU affinity where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def import_beam_quietly() -> None:
    """Imports Apache Beam without its root-logger warning that the GCP client libraries are absent.

    `import apache_beam` logs "apitools not found, and bigquery client libraries are not available"
    whenever Beam's `[gcp]` extra is not installed, which vidvol does not need (only
    `--runner dataflow` and `gs://` do: the `vidvol[gcp]` extra); every `import vidvol` would print it.
    """
    root, drop = logging.getLogger(), _DropMessage("apitools not found")
    root.addFilter(drop)
    try:
        import apache_beam  # noqa: F401
    finally:
        root.removeFilter(drop)
