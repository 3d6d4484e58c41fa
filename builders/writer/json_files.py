"""The small JSON documents a build writes next to its shards, each written whole, no URL secret in them.

They are the shard sidecars, the skip report, the build record, the shard list and the sources manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

from vidvol.builders.writer import outputs
from vidvol.core import redact, urls


_STREAM_DEPTH = 3  # a manifest's levels: the document, its splits (or shards), each split's sources (or shards)


def _compact(value: Any, depth: int = 0) -> Iterator[str]:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"))` in pieces: the containers of the first levels
    one item at a time (each item by the C encoder), so that a large document is never one string."""
    if depth < _STREAM_DEPTH and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        yield "{"
        for i, key in enumerate(sorted(value)):
            yield ("," if i else "") + json.dumps(key) + ":"
            yield from _compact(value[key], depth + 1)
        yield "}"
    elif depth < _STREAM_DEPTH and isinstance(value, (list, tuple)):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ","
            yield from _compact(item, depth + 1)
        yield "]"
    else:
        yield json.dumps(value, sort_keys=True, separators=(",", ":"))


def write_json(obj: Any, path: str, *, compact: bool = False) -> None:
    """Writes a JSON document whole (a reader sees all of it or none: local, gs:// or a bucket), with the
    credentials and query strings of the URLs in it redacted (`vidvol.core.redact`).

    `compact` (no indentation or spaces: the sources manifest, which grows with the collection) writes a local
    file a piece at a time into a temporary file, then renames it, so the document is never also one string.
    """
    doc = redact.data(obj)
    if not compact or urls.is_url(path):  # small documents, or gs:// and buckets: one write of the bytes
        layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 1}
        outputs.write_whole(path, json.dumps(doc, sort_keys=True, **layout).encode("utf-8"))
        return
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(_compact(doc))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def read_json(path: str) -> Any:
    """Reads a JSON document (local, gs:// or a bucket)."""
    return json.loads(outputs.read_bytes(path))
