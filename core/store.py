"""The object store behind URLs (`s3://`, any fsspec protocol): file systems, retries, clear errors, bucket writes.

Credentials come from the usual variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, ...;
`GOOGLE_APPLICATION_CREDENTIALS`) or fsspec's configuration, read in each process. A missing object is a
`FileNotFoundError` naming the URL, refused credentials an `AccessDeniedError` naming what to check, a transient
error (reset, timeout, 5xx, 429) is retried with backoff; no message carries a secret.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import mmap
import os
import re
import threading
import time
import urllib.parse
from typing import Any, TypeVar
from collections.abc import Callable


from vidvol.core import redact
from vidvol.core.s3_direct import RANGED_GETS_ENV  # noqa: F401  (store.RANGED_GETS_ENV: the users' name)
from vidvol.core.s3_direct import S3_USERINFO_RE as _S3_USERINFO_RE  # stdlib only: no store client at import
from vidvol.core.urls import is_url, scheme

logger = logging.getLogger(__name__)

RETRIES = 3  # retries of a transient error (attempts = RETRIES + 1)
BACKOFF_S = 0.5  # first wait between attempts; doubles each time

_SECRET_ENV_RE = re.compile(r"SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)
_CREDENTIAL_ENV_PREFIXES = ("AWS_", "FSSPEC_", "GOOGLE_", "AZURE_", "GCSFS_", "HF_")
_CREDENTIAL_HINTS = {
    "s3": "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_ENDPOINT_URL, AWS_DEFAULT_REGION)",
    "s3a": "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, AWS_ENDPOINT_URL, AWS_DEFAULT_REGION)",
    "gs": "check GOOGLE_APPLICATION_CREDENTIALS or the gcloud login",
    "gcs": "check GOOGLE_APPLICATION_CREDENTIALS or the gcloud login",
}
# Errors of the store libraries (botocore, aiohttp, urllib3, requests, fsspec) that a retry may cure.
_TRANSIENT_NAMES = frozenset({
    "EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError", "ReadTimeoutError",
    "ConnectionError", "HTTPClientError", "IncompleteReadError", "ResponseStreamingError", "ProxyConnectionError",
    "ClientConnectionError", "ClientConnectorError", "ClientOSError", "ClientPayloadError", "ServerDisconnectedError",
    "ServerTimeoutError", "ProtocolError", "ChunkedEncodingError", "ConnectTimeout", "ReadTimeout", "FSTimeoutError",
    "IncompleteRead",
})
_CREDENTIAL_NAMES = frozenset({
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "NoAuthTokenError",
    "DefaultCredentialsError", "RefreshError",
})
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name) for name in (
        "EIO", "EREMOTEIO", "ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "ETIMEDOUT", "EPIPE", "EAGAIN",
        "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "ENETRESET", "EBUSY",
    ) if hasattr(errno, name)
)
_PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)

T = TypeVar("T")


class AccessDeniedError(RuntimeError):
    """The store refused the credentials (or has none): a configuration error that stops the build, never a skip."""


class RemoteReadError(OSError):
    """A URL could not be read (a transient error persisted through the retries, or the store failed otherwise)."""




_FS_CACHE: dict[tuple, Any] = {}
_FS_LOCK = threading.Lock()


def _env_fingerprint() -> str:
    """Digest of the credential-related environment (a new value, e.g. another secret, gets a new client)."""
    items = sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_ENV_PREFIXES))
    return hashlib.sha256(repr(items).encode()).hexdigest()


def _filesystem(protocol: str, **options: str):
    """One fsspec file system per protocol, credential environment (and URL credentials) and process; listings are
    not cached."""
    import fsspec  # here, not at import: registering the datasets needs no store client

    key = (protocol, _env_fingerprint(), hashlib.sha256(repr(sorted(options.items())).encode()).hexdigest(), os.getpid())
    with _FS_LOCK:
        fs = _FS_CACHE.get(key)
        if fs is None:
            try:
                fs = fsspec.filesystem(protocol, skip_instance_cache=True, use_listings_cache=False, **options)
            except TypeError:  # a file system that takes no listing-cache option
                fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
            if len(_FS_CACHE) > 8:
                _FS_CACHE.clear()  # an old environment's clients are not needed again
            _FS_CACHE[key] = fs
    return fs




def _fs(url: str):
    """(file system, its path) for a URL; `s3://KEY:SECRET@bucket/...` gives the credentials to that URL's client."""
    found = _S3_USERINFO_RE.match(url)
    if found:
        fs = _filesystem(scheme(url), key=urllib.parse.unquote(found.group(2)), secret=urllib.parse.unquote(found.group(3)))
        return fs, fs._strip_protocol(found.group(1) + url[found.end():])
    fs = _filesystem(scheme(url))
    return fs, fs._strip_protocol(url)


def _secrets() -> list[str]:
    """Values that must never appear in a message: secret-looking environment variables and fsspec config."""
    import fsspec

    values = [v for k, v in os.environ.items() if _SECRET_ENV_RE.search(k) and len(v) >= 6]
    for options in getattr(fsspec.config, "conf", {}).values():
        if isinstance(options, dict):
            values += [str(v) for k, v in options.items() if _SECRET_ENV_RE.search(str(k)) and len(str(v)) >= 6]
    return sorted(set(values), key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every known secret value, and every URL's credentials and query string, replaced by `***`."""
    for secret in _secrets():
        text = text.replace(secret, "***")
    return redact.text(text)


def _is_obstore(e: BaseException) -> bool:
    """An obstore error: its HTTP status and S3 code are only in its message."""
    return type(e).__module__.startswith("obstore")


def _describe(e: BaseException) -> str:
    """`Type: message`, secrets scrubbed (an obstore error: its first line, the store's error code kept)."""
    text = str(e)
    if _is_obstore(e):
        text = text.split("\n\nDebug source", 1)[0]
        text = re.sub(r"Error performing (\w+) \S+ in [^ ]+ - ", r"\1: ", text)
        text = re.sub(r": <\?xml.*?<Code>([^<]*)</Code>.*", r" (\1)", text, flags=re.DOTALL)
    return scrub(f"{type(e).__name__}: {text}")


def _http_status(e: BaseException) -> int | None:
    """The HTTP status an error carries, if any (aiohttp `status`, botocore `response`)."""
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status
    status = getattr(e, "status", None)
    if isinstance(status, int):
        return status
    if _is_obstore(e):
        found = _OBSTORE_STATUS_RE.search(str(e))
        return int(found.group(1)) if found else None
    return None


def is_transient(e: BaseException) -> bool:
    """Whether a retry may cure `e`: connection errors, timeouts, 5xx/429; never a missing file or refused access."""
    if isinstance(e, _PERMANENT_OS_ERRORS):
        return False
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    status = _http_status(e)
    if status is not None:
        return status >= 500 or status == 429
    if isinstance(e, OSError):
        return e.errno in _TRANSIENT_ERRNOS  # s3fs turns 5xx and unknown error codes into EIO/EREMOTEIO
    if _is_obstore(e):
        return bool(_OBSTORE_TRANSIENT_RE.search(str(e)))
    return bool({c.__name__ for c in type(e).__mro__} & _TRANSIENT_NAMES)


def _is_store_error(e: BaseException) -> bool:
    """An error of the store or its libraries (OSError, or an exception class defined outside the stdlib)."""
    return isinstance(e, OSError) or type(e).__module__.split(".")[0] not in ("builtins", "vidvol")


def credential_hint(url: str) -> str:
    """What to check when the store behind `url` refuses or lacks credentials (the variables, for s3://)."""
    return _CREDENTIAL_HINTS.get(scheme(url), f"check the credentials of fsspec's {scheme(url)}:// file system")


def _access_denied(url: str, e: BaseException) -> AccessDeniedError:
    """The clear error for refused or missing credentials."""
    return AccessDeniedError(f"access denied for {redact.url(url)}: {credential_hint(url)} ({_describe(e)})")


def _call(url: str, fn: Callable[[], T], *, what: str, retries: int = RETRIES) -> T:
    """Runs one store operation on `url`, retrying transient errors; raises errors that name the URL, secrets scrubbed."""
    attempts = max(0, retries) + 1
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (AccessDeniedError, RemoteReadError):
            raise
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", url) from None
        except Exception as e:  # a store's own error classes come from many libraries
            if isinstance(e, PermissionError) or type(e).__name__ in _CREDENTIAL_NAMES:
                raise _access_denied(url, e) from None
            if not _is_store_error(e):
                raise
            if is_transient(e) and attempt < attempts:
                wait = BACKOFF_S * 2 ** (attempt - 1)
                logger.warning("%s: %s failed (%s), attempt %d of %d; retrying in %.1f s",
                               redact.url(url), what, _describe(e), attempt, attempts, wait)
                time.sleep(wait)
                continue
            tries = f" after {attempt} attempts" if attempt > 1 else ""
            raise RemoteReadError(f"{redact.url(url)}: {what} failed{tries} ({_describe(e)})") from None
    raise AssertionError("unreachable")




# --------------------------------------------------------------------------------------------
# A data_dir in a bucket
# --------------------------------------------------------------------------------------------

# Schemes TensorFlow's own file layer (tf.io.gfile) reads and writes in this build; every other URL is vidvol's own.
TF_SCHEMES = frozenset({"", "file", "gs", "ram"})
UPLOAD_PART_BYTES = 8 << 20  # multipart part size: an upload holds a few parts in memory, never the whole file
UPLOAD_CONCURRENCY = 2


def is_bucket(path: str | os.PathLike | None) -> bool:
    """Whether `path` is a URL TensorFlow cannot open here (`s3://`, `az://`, ...), so vidvol does its I/O."""
    if path is None:
        return False
    text = os.fspath(path)
    return is_url(text) and scheme(text) not in TF_SCHEMES


def fs_path(url: str):
    """(fsspec file system, its path) for a URL; `s3://KEY:SECRET@bucket/...` gives the credentials to that client."""
    return _fs(url)


def exists(url: str) -> bool:
    """Whether the object (or a prefix of objects) exists."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        return _call(url, lambda: s3_direct.exists(*direct), what="exists")
    fs, p = _fs(url)
    return _call(url, lambda: fs.exists(p), what="exists")


def size(url: str) -> int:
    """The object's size in bytes."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        return _call(url, lambda: s3_direct.size(*direct), what="stat")
    fs, p = _fs(url)
    return int(_call(url, lambda: fs.size(p), what="stat"))


def read_bytes(url: str) -> bytes:
    """The whole object (metadata files: small)."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        return _call(url, lambda: s3_direct.read_bytes(*direct), what="read")
    fs, p = _fs(url)
    return _call(url, lambda: fs.cat_file(p), what="read")


def read_range(url: str, start: int, end: int) -> bytes:
    """Bytes `[start, end)` of the object, in one ranged GET."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        return _call(url, lambda: s3_direct.read_range(*direct, start, end), what=f"read bytes {start}-{end}")
    fs, p = _fs(url)
    return _call(url, lambda: fs.cat_file(p, start=start, end=end), what=f"read bytes {start}-{end}")


def read_ranges(url: str, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Bytes `[start, end)` of each range of one object, fetched concurrently (one ranged GET each, at once)."""
    return read_many([(url, int(a), int(b)) for a, b in ranges])


def read_many(spans: list[tuple[str, int, int]], *, copy: bool = True) -> list[bytes]:
    """Bytes `[start, end)` of each `(url, start, end)`, all fetched at once (one ranged GET each, concurrently).

    The URLs share one file system (one split's shards); a batch's records spread over many shards are then
    fetched together instead of shard after shard. `s3://` goes through obstore where it can (`_ranged`), else
    through the URL's fsspec file system (`cat_ranges`). `copy=False`: obstore's responses as they are (objects
    with the buffer protocol, for `memoryview`/`np.frombuffer`), not copied into `bytes`.
    """
    if not spans:
        return []
    ranged = {url: _ranged(url) for url in dict.fromkeys(url for url, _, _ in spans)}
    where = spans[0][0] if len(ranged) == 1 else spans[0][0].rsplit("/", 1)[0] + "/"
    what = f"read {len(spans)} byte ranges"
    if all(r is not None and r[0] is ranged[spans[0][0]][0] for r in ranged.values()):
        client = ranged[spans[0][0]][0]
        from vidvol.core import s3_direct

        return _call(where, lambda: s3_direct.get_ranges(client, [ranged[url][1] for url, _, _ in spans], spans, copy),
                     what=what)
    fs, _ = _fs(spans[0][0])
    paths = [_fs(url)[1] for url, _, _ in spans]
    starts, ends = [int(a) for _, a, _ in spans], [int(b) for _, _, b in spans]
    return _call(where, lambda: fs.cat_ranges(paths, starts, ends, on_error="raise"), what=what)


# Ranged GETs of s3:// records through obstore (Rust's object_store): a fraction of s3fs's client CPU per GET, which
# decides the read rate of small records (docs/clusters.md, "Datasets in a bucket"). The client is configured from the URL's s3fs file system
# (URL or fsspec-config credentials, endpoint, region, anon), else from the AWS_* variables; credentials that
# only botocore's chain finds (profiles, SSO, instance roles), or AWS with no region named, leave the reads to s3fs. Its own retries are off:
# `_call` retries, as for every store operation. VIDVOL_RANGED_GETS=fsspec sends every ranged read through s3fs.
STREAM_PART_BYTES = 16 << 20  # an object larger than this is streamed into one buffer (obstore) or fetched in parts


def read_object(url: str, size: int, part_bytes: int = STREAM_PART_BYTES) -> Any:
    """The whole object of `size` bytes: one GET, or (s3fs) ranges of `part_bytes` fetched concurrently.

    What a streamed read of a whole shard takes (`readers.tfdata.shard_window`). Up to `part_bytes`, the single
    GET's response is returned as it came (an object with the buffer protocol: `memoryview` it), never copied.
    Larger: through obstore, one GET whose body is copied into one buffer as it arrives (`s3_direct.read_into`:
    the object is held once); through s3fs, ranges of `part_bytes` fetched at once into one buffer. That buffer is
    an anonymous `mmap` (returned to the system when dropped).
    """
    size, part = int(size), max(1, int(part_bytes))
    if size <= part:
        return read_many([(url, 0, size)], copy=False)[0]
    # Its own mapping, unmapped when the last reference goes: a heap buffer of this size, freed, is kept by the
    # allocator's arenas (a window of shards held and dropped in turn grew the reader's peak far past the window).
    out = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # private, not shared memory: huge pages, fewer faults
    with contextlib.suppress(AttributeError, OSError):  # a kernel or platform without transparent huge pages
        out.madvise(mmap.MADV_HUGEPAGE)
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        _call(url, lambda: s3_direct.read_into(*direct, out), what=f"read {size} bytes")
        return out
    spans = [(url, a, min(size, a + part)) for a in range(0, size, part)]
    for (_, a, b), data in zip(spans, read_many(spans, copy=False)):
        out[a:b] = memoryview(data)
    return out


_OBSTORE_STATUS_RE = re.compile(r"\bstatus(?: code)?:? (\d{3})\b", re.IGNORECASE)
_OBSTORE_TRANSIENT_RE = re.compile(
    r"error sending request|connection (?:reset|refused|closed)|timed? ?out|broken pipe|incomplete|"
    r"error decoding response body|unexpected eof", re.IGNORECASE)


def _ranged(url: str) -> tuple[Any, str] | None:
    """(obstore S3Store of the URL's bucket, the object's key), or None where s3fs does the reads (`s3_direct`)."""
    from vidvol.core import s3_direct

    return s3_direct.client_for(url)


def digest(url: str, chunk: int = 8 << 20) -> tuple[str, int]:
    """(SHA-256 hex digest, size) of the object, streamed `chunk` bytes at a time (never the whole object in memory)."""
    fs, p = _fs(url)

    def run() -> tuple[str, int]:
        h, n = hashlib.sha256(), 0
        with fs.open(p, "rb", block_size=chunk, cache_type="none") as f:
            while True:
                data = f.read(chunk)
                if not data:
                    return h.hexdigest(), n
                h.update(data)
                n += len(data)

    return _call(url, run, what="read")


def write_bytes(url: str, data: bytes, *, exclusive: bool = False) -> None:
    """Writes a small object whole (one PUT: it appears complete or not at all).

    Args:
      url: the object's URL.
      data: its bytes.
      exclusive: fail with FileExistsError when the object exists (S3 `If-None-Match: *`).
    """
    fs, p = _fs(url)
    kwargs = {"mode": "create"} if exclusive else {}
    try:
        _call(url, lambda: fs.pipe_file(p, data, **kwargs), what="write")
    except RemoteReadError as e:
        said = str(e).lower().replace("-", "")
        if exclusive and ("precondition" in said or "412" in said):  # S3's PreconditionFailed, as s3fs words it
            raise FileExistsError(errno.EEXIST, "already exists", url) from None
        raise


def upload(local: str, url: str) -> None:
    """Uploads a local file to `url`: multipart past two parts, read from disk part by part.

    The object appears under `url` only when the upload completes (S3 completes a multipart upload atomically;
    an interrupted one leaves no object, and s3fs aborts it).
    """
    fs, p = _fs(url)
    _call(url, lambda: fs.put_file(local, p, chunksize=UPLOAD_PART_BYTES, max_concurrency=UPLOAD_CONCURRENCY),
          what="upload")


def download(url: str, local: str) -> None:
    """Downloads the object to the local path `local` (streamed to disk)."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        _call(url, lambda: s3_direct.download(*direct, local), what="download")
        return
    fs, p = _fs(url)
    _call(url, lambda: fs.get_file(p, local), what="download")


def copy(src: str, dst: str) -> None:
    """Server-side copy of one object (no bytes through this process)."""
    fs, p = _fs(src)
    _, q = _fs(dst)
    _call(src, lambda: fs.copy(p, q), what=f"copy to {redact.url(dst)}")


def remove(url: str) -> None:
    """Removes one object; a missing one is not an error."""
    fs, p = _fs(url)
    try:
        _call(url, lambda: fs.rm_file(p), what="remove")
    except FileNotFoundError:
        pass


def listdir(url: str) -> list[str]:
    """The URLs of the objects and prefixes directly under `url` (empty when there is none)."""
    direct = _ranged(url)
    if direct is not None:
        from vidvol.core import s3_direct

        names = _call(url, lambda: s3_direct.listdir(*direct), what="list")
        return sorted(f"{url.rstrip('/')}/{n}" for n in names)
    fs, p = _fs(url)
    try:
        entries = _call(url, lambda: fs.ls(p, detail=False, refresh=True), what="list")
    except FileNotFoundError:
        return []
    base = url.rstrip("/")
    return sorted(f"{base}/{e.rstrip('/').rsplit('/', 1)[-1]}" for e in entries if e.rstrip("/") != p.rstrip("/"))


def find(url: str) -> list[str]:
    """The URLs of every object below `url`, recursively."""
    fs, p = _fs(url)
    try:
        found = _call(url, lambda: fs.find(p, withdirs=False, detail=False), what="list")
    except FileNotFoundError:
        return []
    base, root = url.rstrip("/"), p.rstrip("/")
    return sorted(base + f[len(root):] for f in found)


def remove_tree(url: str) -> None:
    """Removes every object below `url`."""
    for obj in find(url):
        remove(obj)


# Conditional writes (S3 `If-None-Match: *` / `If-Match: ETAG`), for the build lease in a bucket data_dir
# (vidvol.builders.writer.lease). Through s3fs's botocore client: any credentials s3fs takes work here.
CONDITIONAL_SCHEMES = frozenset({"s3", "s3a"})


class PreconditionFailedError(RuntimeError):
    """A conditional write or delete found the object otherwise than it expected (created, changed or gone)."""


def conditional_writes(url: str) -> bool:
    """Whether vidvol makes conditional writes to `url`'s store (`s3://`: If-None-Match and If-Match on PUT and DELETE)."""
    return scheme(url) in CONDITIONAL_SCHEMES


def _precondition(e: BaseException) -> bool:
    """A 412 Precondition Failed (as s3fs translates it: FileExistsError, or an OSError caused by the ClientError)."""
    for err in (e, e.__cause__, e.__context__):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            error = response.get("Error", {})
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if error.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return True
    return isinstance(e, FileExistsError)


def _bucket_key(url: str) -> tuple[Any, str, str]:
    fs, p = _fs(url)
    bucket_name, _, key = p.partition("/")
    return fs, bucket_name, key


def put_conditional(url: str, data: bytes, *, etag: str | None) -> str:
    """Writes a small object only if it is absent (`etag` None) or still has `etag`; its new ETag.

    Raises:
      PreconditionFailedError: the object exists (`etag` None), or has another ETag, or is gone.
    """
    fs, bucket_name, key = _bucket_key(url)
    match = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}

    def put():
        try:
            return fs.call_s3("put_object", Bucket=bucket_name, Key=key, Body=data, **match)["ETag"]
        except (FileNotFoundError, FileExistsError) as e:
            raise PreconditionFailedError(f"{redact.url(url)}: {_describe(e)}") from None
        except Exception as e:
            if _precondition(e):
                raise PreconditionFailedError(f"{redact.url(url)}: {_describe(e)}") from None
            raise

    return _call(url, put, what="conditional write")  # PreconditionFailedError, a vidvol error, passes through


def read_with_etag(url: str) -> tuple[bytes, str] | None:
    """(the object's bytes, its ETag), both of one version; None when there is no such object."""
    import fsspec.asyn

    fs, bucket_name, key = _bucket_key(url)

    async def get() -> tuple[bytes, str]:
        resp = await fs._call_s3("get_object", Bucket=bucket_name, Key=key)
        body = resp["Body"]
        try:
            return await body.read(), resp["ETag"]
        finally:
            body.close()

    try:
        return _call(url, lambda: fsspec.asyn.sync(fs.loop, get), what="read")
    except FileNotFoundError:
        return None


def remove_conditional(url: str, etag: str) -> bool:
    """Removes the object only if it still has `etag` (S3 `If-Match` on DELETE); False when it has another or is gone."""
    fs, bucket_name, key = _bucket_key(url)

    def delete() -> bool:
        try:
            fs.call_s3("delete_object", Bucket=bucket_name, Key=key, IfMatch=etag)
            return True
        except FileNotFoundError:
            return False
        except Exception as e:
            if _precondition(e):
                return False
            raise

    return _call(url, delete, what="conditional remove")
