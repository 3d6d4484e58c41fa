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
# [quote]scheme://rest-up-to-whitespace: the rest may hold quotes (a password may); a quote that opened the URL
# closes it at its last occurrence in the run (`'https://h/x?a=1',` keeps its `',`).
_URL_RE = re.compile(r"(?P<quote>['\"]?)(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s<>]*)")
# A query that a path without a scheme may carry (a URL made relative to manual_dir): `name=value` pairs, or a
# parameter name that is a credential.
_SCHEMELESS_QUERY_RE = re.compile(r"=|sig|token|credential|signature|key|secret|password|auth", re.IGNORECASE)


def _userinfo_end(rest: str) -> int:
    """Where the host starts in `rest` (the text after `scheme://`): after the last `@` whose text before it is
    `user:password` (a password may hold `/ ? # @ ' "` unencoded) or `user` (no `/` before it); else 0.

    Ambiguous text is read the safe way: `https://host:8080/a@b` masks `host:8080/a` too."""
    at = rest.rfind("@")
    while at >= 0:
        before = rest[:at]
        if ":" in before or "/" not in before:
            return at + 1
        at = rest.rfind("@", 0, at)
    return 0


def _parts(rest: str) -> tuple[str, str, str | None]:
    """(userinfo with its `@` or "", host and path, the query after `?` or None), of the text after `scheme://`."""
    start = _userinfo_end(rest)
    userinfo, tail = rest[:start], rest[start:]
    q = tail.find("?")
    if q < 0:
        return userinfo, tail, None
    return userinfo, tail[:q], tail[q + 1:]


def _redact_rest(rest: str) -> str:
    userinfo, where, query = _parts(rest)
    out = (MASK + "@" if userinfo else "") + where
    if query is not None:
        out += "?" + (MASK if query else "")  # the whole query, fragment included: a signature may hold a `#`
    return out


def _redact_match(m: re.Match) -> str:
    quote, rest, after = m.group("quote"), m.group("rest"), ""
    if quote and quote in rest:  # the URL ends at its closing quote (the last one in the run)
        end = rest.rfind(quote)
        rest, after = rest[:end], rest[end:]
    return quote + m.group("scheme") + _redact_rest(rest) + after


def url(value: str) -> str:
    """`value` (a path or URL) with a URL's userinfo and query string replaced by `***`.

    A value without a scheme (a presigned URL made relative to manual_dir, `sub1/t1.nii.gz?X-Amz-Signature=..`)
    has its query masked too when it looks like one (`name=value`, or a credential's parameter name)."""
    if "://" in value:
        return text(value)
    path, q, query = value.partition("?")
    if q and query and _SCHEMELESS_QUERY_RE.search(query):
        return f"{path}?{MASK}"
    return value


def without_query(value: str) -> str:
    """A URL with its query string (and fragment) cut off, userinfo kept (what to compare two URLs' paths by);
    other values as given."""
    if "://" not in value:
        return value
    prefix, _, rest = value.partition("://")
    userinfo, where, query = _parts(rest)
    return f"{prefix}://{userinfo}{where}" if query is not None else value


def text(value: str) -> str:
    """`value` with the userinfo and query string of every URL in it replaced by `***`."""
    if "://" not in value:
        return value
    return _URL_RE.sub(_redact_match, value)


def has_secret(value: str) -> bool:
    """Whether `value` holds a URL with userinfo or a query string (what `text` would change)."""
    return text(value) != value


def data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings) with `text` applied to every string in it, keys included.

    Copy on write: a container none of whose strings changes is returned as it is, not copied (a manifest of
    many thousand sources is written without a second copy of it in memory).
    """
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        items = [(data(k), data(v)) for k, v in value.items()]
        same = all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(items, value.items()))
        return value if same else dict(items)
    if isinstance(value, (list, tuple)):
        new = [data(v) for v in value]
        return value if all(a is b for a, b in zip(new, value)) else type(value)(new)
    return value


_EXCEPTION_TEXT_ATTRS = ("filename", "filename2", "msg", "_message", "reason")


def exception(error: BaseException) -> BaseException:
    """`error` itself, its message (args, notes and the text attributes OSError and TensorFlow errors print) and
    those of its causes redacted in place, so that wherever it is shown, a URL's credentials are not."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        try:
            e.args = tuple(text(a) if isinstance(a, str) else a for a in e.args)
        except (AttributeError, TypeError):
            pass
        notes = getattr(e, "__notes__", None)
        if isinstance(notes, list):  # add_note's texts (the decoding child's traceback) print with the error
            notes[:] = [text(n) if isinstance(n, str) else n for n in notes]
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
    if isinstance(log_record.exc_text, str):  # a traceback formatted already (a record relogged from a child)
        log_record.exc_text = text(log_record.exc_text)
    if isinstance(log_record.stack_info, str):
        log_record.stack_info = text(log_record.stack_info)
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
