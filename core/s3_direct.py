"""`s3://` reads through obstore (Rust's object_store), configured without s3fs or botocore where it can be.

A reader of a bucket data_dir lists, stats and reads objects (metadata, record indexes, ranged GETs of
records, whole shards) through obstore, at a fraction of s3fs's client CPU per GET, and a process that only
reads never imports s3fs, aiobotocore or botocore (~30 MiB resident less). Configuration: fsspec's `s3`
options s3fs would take (`key`, `secret`, `token`, `anon`, `endpoint_url`, `client_kwargs`), the URL's
credentials, else AWS_*; anything else leaves the reads to s3fs (`client_for` gives None), as does
`VIDVOL_RANGED_GETS=fsspec`. obstore's retries are off: `vidvol.core.store` retries every operation.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import errno
import hashlib
import os
import re
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from vidvol.core.urls import scheme

T = TypeVar("T")

RANGED_GETS_ENV = "VIDVOL_RANGED_GETS"
# `s3://KEY:SECRET@bucket/key`: credentials in the URL (percent-encoded where they hold `/`, `@` or `:`).
S3_USERINFO_RE = re.compile(r"^(s3a?://)([^/@?#:]+):([^/@?#]*)@")
# The s3fs options this module reads; any other one in fsspec's configuration leaves the reads to s3fs.
_OPTIONS = frozenset({"key", "secret", "token", "anon", "endpoint_url", "client_kwargs"})
_CLIENT_KWARGS = frozenset({"endpoint_url", "region_name"})
_CLIENTS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _s3_options(url: str) -> tuple[dict[str, Any], str] | None:
    """(the s3fs options of the URL: fsspec's configuration, then the URL's credentials; its `bucket/key` path),
    or None where an option this module does not read is set."""
    import fsspec.config  # fsspec alone: no s3fs, no botocore

    conf = getattr(fsspec.config, "conf", {}) or {}
    options: dict[str, Any] = {}
    for protocol in dict.fromkeys(("s3", scheme(url))):
        options.update(conf.get(protocol) or {})
    found = S3_USERINFO_RE.match(url)
    if found:
        options.update(key=urllib.parse.unquote(found.group(2)), secret=urllib.parse.unquote(found.group(3)))
        rest = url[found.end():]
    else:
        rest = url.split("://", 1)[1]
    if set(options) - _OPTIONS or set(options.get("client_kwargs") or {}) - _CLIENT_KWARGS:
        return None
    return options, rest.split("?", 1)[0].rstrip("/")


def client_for(url: str) -> tuple[Any, str] | None:
    """(obstore S3Store of the URL's bucket, the object's key), or None where s3fs does the reads."""
    if scheme(url) not in ("s3", "s3a") or os.environ.get(RANGED_GETS_ENV, "").lower() == "fsspec":
        return None
    parsed = _s3_options(url)
    if parsed is None:
        return None
    options, path = parsed
    bucket_name, _, key = path.partition("/")
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_"))
    cache_key = (bucket_name, hashlib.sha256(repr((sorted(options.items(), key=str), env)).encode()).hexdigest(),
                 os.getpid())
    with _LOCK:
        if cache_key in _CLIENTS:
            client = _CLIENTS[cache_key]
            return None if client is None else (client, key)
    try:
        from obstore.store import S3Store
    except ImportError:
        client = None
    else:
        client = make_client(S3Store, options, bucket_name)
    with _LOCK:
        if len(_CLIENTS) > 32:
            _CLIENTS.clear()  # an old environment's clients are not needed again
        _CLIENTS[cache_key] = client
    return None if client is None else (client, key)


def make_client(S3Store, options: dict[str, Any], bucket_name: str):
    """An S3Store for `bucket_name` from s3fs-style `options` and the AWS_* variables; None where obstore cannot
    be configured as s3fs would be (no region nor endpoint named, credentials only botocore finds, a refusal)."""
    env = os.environ.get
    kwargs = dict(options.get("client_kwargs") or {})
    endpoint = kwargs.get("endpoint_url") or options.get("endpoint_url") or env("AWS_ENDPOINT_URL_S3") \
        or env("AWS_ENDPOINT_URL")
    region = kwargs.get("region_name") or env("AWS_REGION") or env("AWS_DEFAULT_REGION")
    if not (region or endpoint):
        return None  # AWS with no region named: botocore (s3fs) finds the bucket's region, object_store would not
    config: dict[str, Any] = {"region": region or "us-east-1"}
    if options.get("anon"):
        config["skip_signature"] = True
    else:
        key_id, secret, token = options.get("key"), options.get("secret"), options.get("token")
        if not (key_id and secret):
            key_id, secret, token = env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN")
        if not (key_id and secret):
            return None
        config.update(access_key_id=key_id, secret_access_key=secret)
        if token:
            config["session_token"] = token
    if endpoint:
        config["endpoint"] = endpoint
    try:
        return S3Store(bucket_name, config=config,
                       client_options={"allow_http": bool(endpoint and endpoint.startswith("http://")),
                                       "timeout": "120s", "connect_timeout": "10s"},
                       retry_config={"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=1),
                                     "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                                                 "max_backoff": datetime.timedelta(seconds=1), "base": 2.0}})
    except Exception:  # a configuration obstore refuses: s3fs reads instead
        return None


def _mapped(fn: Callable[[], T]) -> T:
    """Runs an obstore call; a missing object is FileNotFoundError, refused access PermissionError (the caller
    names the URL and scrubs the message); other obstore errors pass through for the caller's retries."""
    from obstore import exceptions

    try:
        return fn()
    except exceptions.NotFoundError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory") from None
    except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError) as e:
        raise PermissionError(errno.EACCES, str(e).split("\n\nDebug source", 1)[0]) from None


GET_THREADS = 16  # ranged GETs in flight at once in one process (a batch's records, a shard's parts)
_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}  # pid -> the pool (a forked child makes its own)


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    with _LOCK:
        pool = _POOLS.get(os.getpid())
        if pool is None:
            _POOLS.clear()  # a parent's pool: its threads do not exist in this process
            pool = _POOLS[os.getpid()] = concurrent.futures.ThreadPoolExecutor(GET_THREADS,
                                                                               thread_name_prefix="vidvol-get")
        return pool


def get_ranges(client, keys: list[str], spans: list[tuple[str, int, int]], copy: bool = True) -> list:
    """One ranged GET per span (not coalesced: a shuffled batch's records are far apart), at most `GET_THREADS`
    at once.

    Each GET is obstore's blocking call, which runs without the GIL, on a thread of one pool. Its asyncio API
    (`get_range_async` gathered in `asyncio.run`) was several times slower here and held more memory (CHANGELOG.md,
    "Changed (#44, reading from a bucket)").
    """
    import obstore

    def one(i: int):
        _, a, b = spans[i]
        return _mapped(lambda: obstore.get_range(client, keys[i], start=int(a), end=int(b)))

    got = [one(0)] if len(spans) == 1 else list(_pool().map(one, range(len(spans))))
    return [bytes(b) for b in got] if copy else got


def read_into(client, key: str, out) -> None:
    """Fills `out` (a writable buffer) with the object's first `len(out)` bytes in one GET, each chunk of its body copied into `out` as it
    arrives: the object is held once, and besides it a chunk (of at least `CHUNK_BYTES`).

    Against ranged GETs of 16 MiB parts on the pool, as fast, without the parts in flight held beside the object.

    Raises:
      OSError: the body ended before `len(out)` bytes (the object is smaller or changed).
    """
    import obstore

    view, at = memoryview(out), 0

    def fill() -> int:
        nonlocal at
        for chunk in obstore.get(client, key, options={"range": (0, len(out))}).stream(min_chunk_size=CHUNK_BYTES):
            n = len(chunk)
            view[at:at + n] = memoryview(chunk)
            at += n
        return at

    if _mapped(fill) != len(out):
        raise OSError(errno.EIO, f"{key}: the object ended after {at} of {len(out)} bytes (it changed or was cut short)")


CHUNK_BYTES = 1 << 20  # a streamed body is copied out at least this much at a time


def size(client, key: str) -> int:
    """The object's size (one HEAD)."""
    import obstore

    return int(_mapped(lambda: obstore.head(client, key))["size"])


def read_bytes(client, key: str) -> bytes:
    """The whole object (one GET)."""
    import obstore

    return bytes(_mapped(lambda: obstore.get(client, key).bytes()))


def read_range(client, key: str, start: int, end: int) -> bytes:
    """Bytes `[start, end)` of the object (one ranged GET); an empty range is b""."""
    import obstore

    if end <= start:
        return b""
    return bytes(_mapped(lambda: obstore.get_range(client, key, start=int(start), end=int(end))))


def download(client, key: str, local: str) -> None:
    """The object streamed into the local file `local` (chunk by chunk, never whole in memory)."""
    import obstore

    def run() -> None:
        result = obstore.get(client, key)
        with open(local, "wb") as f:
            for chunk in result.stream(min_chunk_size=8 << 20):
                f.write(memoryview(chunk))

    _mapped(run)


def exists(client, key: str) -> bool:
    """Whether the object, or any object below `key/`, exists."""
    import obstore

    try:
        _mapped(lambda: obstore.head(client, key))
        return True
    except FileNotFoundError:
        pass
    return bool(listdir(client, key, limit=1))


def listdir(client, key: str, limit: int | None = None) -> list[str]:
    """The names of the objects and prefixes directly under `key/` (no listing cache: each call asks the store)."""
    import obstore

    prefix = key.rstrip("/") + "/" if key.strip("/") else None
    listed = _mapped(lambda: obstore.list_with_delimiter(client, prefix))
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"]]
    names += [o["path"].rsplit("/", 1)[-1] for o in listed["objects"]]
    return names[:limit] if limit is not None else names

