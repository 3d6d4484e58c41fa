"""The small JSON documents a build writes next to its shards (shard sidecars, the skip report), each written whole, no URL secret in them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import tensorflow as tf

from vidvol.core import redact


def write_json(obj: Any, path: str) -> None:
    """Writes a JSON document whole (temporary file, then rename) through tf.io.gfile (local, gs://, hdfs://), with
    the credentials and query strings of the URLs in it redacted (`vidvol.core.redact`)."""
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(redact.data(obj), indent=1, sort_keys=True))
    tf.io.gfile.rename(tmp, path, overwrite=True)


def read_json(path: str) -> Any:
    """Reads a JSON document through tf.io.gfile."""
    with tf.io.gfile.GFile(path, "r") as f:
        return json.loads(f.read())
