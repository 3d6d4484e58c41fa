"""Secrets inside URLs, kept out of everything vidvol writes or logs.

`url("https://user:token@host/a?X-Amz-Signature=abc")` -> `"https://***@host/a?***"`: the userinfo of a
URL (`user:password@`) and its whole query string (presigned URLs carry their signature, credential
and security token there) are replaced by `***`; the scheme, host and path stay, so a message still
says which file. `text(s)` does that to every URL inside a longer string (an error message, argv).
"""

from __future__ import annotations

import re

MASK = "***"
# scheme://[userinfo@]rest-up-to-whitespace-or-quote
_URL_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>]*)")


def _redact_rest(rest: str) -> str:
    authority_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    if "@" in authority:
        authority = MASK + "@" + authority.rsplit("@", 1)[1]
    if "?" in tail:
        path, _, query = tail.partition("?")
        fragment = ("#" + query.split("#", 1)[1]) if "#" in query else ""
        tail = f"{path}?{MASK}{fragment}" if query.split("#", 1)[0] else tail
    return authority + tail


def url(value: str) -> str:
    """`value` (a path or URL) with a URL's userinfo and query string replaced by `***`."""
    return text(value)


def text(value: str) -> str:
    """`value` with the userinfo and query string of every URL in it replaced by `***`."""
    if "://" not in value:
        return value
    return _URL_RE.sub(lambda m: m.group("scheme") + _redact_rest(m.group("rest")), value)


def has_secret(value: str) -> bool:
    """Whether `value` holds a URL with userinfo or a query string (what `text` would change)."""
    return text(value) != value
