"""The small JSON documents a build writes next to its shards, each written whole, no URL secret in them.

They are the shard sidecars and the skip report.
"""

from __future__ import annotations

import json
from typing import Any

from vidvol.builders.writer import outputs
from vidvol.core import redact


def write_json(obj: Any, path: str) -> None:
    """Writes a JSON document whole (`outputs.write_whole`: local, gs:// or a bucket), with the credentials and
    query strings of the URLs in it redacted (`vidvol.core.redact`)."""
    outputs.write_whole(path, json.dumps(redact.data(obj), indent=1, sort_keys=True).encode("utf-8"))


def read_json(path: str) -> Any:
    """Reads a JSON document (local, gs:// or a bucket)."""
    return json.loads(outputs.read_bytes(path))
