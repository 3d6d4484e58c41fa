"""The small JSON documents a build writes next to its shards, each written whole, no URL secret in them.

They are the shard sidecars, the skip report, the build record, the shard list and the sources manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any

from vidvol.builders.writer import outputs
from vidvol.core import redact, urls


def write_json(obj: Any, path: str, *, compact: bool = False) -> None:
    """Writes a JSON document whole (a reader sees all of it or none: local, gs:// or a bucket), with the
    credentials and query strings of the URLs in it redacted (`vidvol.core.redact`).

    A local file is encoded straight into a temporary file, then renamed: a large document (the sources
    manifest of a big collection) is never also held as one string. `compact`: no indentation or spaces.
    """
    doc = redact.data(obj)
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 1}
    if urls.is_url(path):  # gs:// or a bucket: one write of the bytes
        outputs.write_whole(path, json.dumps(doc, sort_keys=True, **layout).encode("utf-8"))
        return
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True, **layout)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def read_json(path: str) -> Any:
    """Reads a JSON document (local, gs:// or a bucket)."""
    return json.loads(outputs.read_bytes(path))
