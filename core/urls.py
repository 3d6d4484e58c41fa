"""URL or local path: the scheme of a path string (`s3://b/k` -> `s3`), for the build's file layer and its output checks."""

from __future__ import annotations

import os
import re

_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def is_url(path: str | os.PathLike) -> bool:
    """Whether `path` is a URL (`scheme://...`) rather than a local path."""
    return bool(_URL_RE.match(os.fspath(path))) if isinstance(path, (str, os.PathLike)) else False


def scheme(path: str | os.PathLike) -> str:
    """The URL scheme of `path` (`"s3"`), `""` for a local path."""
    m = _URL_RE.match(os.fspath(path))
    return m.group(1).lower() if m else ""


def split_url(url: str) -> tuple[str, str]:
    """`s3://b/k` -> (`s3://`, `b/k`)."""
    m = _URL_RE.match(url)
    return url[: m.end()], url[m.end():]
