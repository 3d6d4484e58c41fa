"""Secrets inside URLs, kept out of everything vidvol writes or logs.

`url("https://user:token@host/a?X-Amz-Signature=abc")` -> `"https://***@host/a?***"`: the userinfo of a
URL (`user:password@`) and its whole query string (presigned URLs carry their signature, credential
and security token there) are replaced by `***`; the scheme, host and path stay, so a message still
says which file. `text(s)` does that to every URL inside a longer string (an error message, argv); `data` to every string of a
JSON document, `exception` to an error and its causes in place, and `install_log_redaction` to every log record
of the process. What vidvol writes or logs passes through one of them: `shards.json`, the skip report and shard
sidecars (`builders.writer.json_files`), the build log (its command line and every record), the errors a build
raises, the features and keys made from a path (mri_volumes `path`, external-file keys), `verify`'s output.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from vidvol.core import names

MASK = "***"
# scheme://[userinfo@]rest-up-to-whitespace-or-quote
_URL_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>]*)")


def _redact_rest(rest: str) -> str:
    authority_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    before_query = rest[:min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))]
    at = before_query.find("@")
    if at > authority_end and ":" in before_query[:at]:  # `key:secret@` whose secret holds a `/` (unencoded)
        authority_end = at + 1 + (before_query[at + 1:].find("/") % (len(before_query) - at))
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


def data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings) with `text` applied to every string in it, keys included."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {data(k): data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(data(v) for v in value)
    return value


_EXCEPTION_TEXT_ATTRS = ("filename", "filename2", "msg", "_message", "reason")


def exception(error: BaseException) -> BaseException:
    """`error` itself, its message (args and the text attributes OSError and TensorFlow errors print) and those of
    its causes redacted in place, so that wherever it is shown, a URL's credentials are not."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        try:
            e.args = tuple(text(a) if isinstance(a, str) else a for a in e.args)
        except (AttributeError, TypeError):
            pass
        for name in _EXCEPTION_TEXT_ATTRS:
            value = getattr(e, name, None)
            if isinstance(value, str) and has_secret(value):
                try:
                    setattr(e, name, text(value))
                except (AttributeError, TypeError):
                    pass
        e = e.__cause__ or e.__context__
    return error


def _suspect(value: Any) -> bool:
    return isinstance(value, (str, BaseException, os.PathLike)) and "://" in str(value)


_UNDECODED = re.compile("[\udc80-\udcff]")  # a byte of a file name that is not UTF-8, as os.fsdecode holds it


def _undecoded(value: Any) -> bool:
    return isinstance(value, str) and _UNDECODED.search(value) is not None


def record(log_record: logging.LogRecord) -> logging.LogRecord:
    """A log record with the URL secrets in its message and its exception text redacted (formatted eagerly when so),
    and a file name that is not UTF-8 shown as vidvol writes names (`caf\\xe9`), so no handler meets a lone surrogate."""
    args = log_record.args if isinstance(log_record.args, tuple) else (log_record.args,) if log_record.args else ()
    suspect, undecoded = (any(check(v) for v in (log_record.msg, *args)) for check in (_suspect, _undecoded))
    if suspect or undecoded:
        try:
            message = log_record.getMessage()
        except Exception:  # a bad format: leave it to the handler's error path
            return log_record
        if undecoded or has_secret(message):
            log_record.msg, log_record.args = names.shown(text(message)), ()
    if log_record.exc_info and log_record.exc_info[1] is not None:
        exception(log_record.exc_info[1])
    return log_record


_installed = False


def install_log_redaction() -> None:
    """Makes every log record of this process pass through `record` (idempotent): builds and their workers log
    paths, and a path may be a URL with credentials."""
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return record(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    _installed = True
