"""A small HTTP proxy in front of a real S3 server that answers chosen requests itself: 503 SlowDown, 500, 429.

`FaultProxy(upstream).start()` listens on 127.0.0.1; point `AWS_ENDPOINT_URL` at `proxy.url`. Every request
is forwarded as it came (the Host header too, so SigV4 signatures still match), except those `fail` picks:
they get an S3 error document with that status and never reach the server. `delay` (request -> seconds)
slows chosen requests down, e.g. multipart part uploads, so that a test can kill a client mid-upload.
`seen` counts requests by kind ("GET", "PUT part", "POST complete", ...); `injected` counts the faults.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "upgrade", "te"}
_CODES = {503: "SlowDown", 500: "InternalError", 429: "TooManyRequests"}


def kind(method: str, path: str) -> str:
    """What an S3 request is: the method plus the multipart step its query names ("PUT part", "POST complete")."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query, keep_blank_values=True)
    if "partNumber" in query:
        return f"{method} part"
    if "uploads" in query:
        return f"{method} initiate"
    if "uploadId" in query:
        return f"{method} complete" if method == "POST" else f"{method} upload"
    return method


class FaultProxy:
    """Forwards to `upstream` (http://host:port), failing the requests `fail(number, kind)` picks with `status`
    (a number, or request number -> status)."""

    def __init__(self, upstream: str, *, fail: Callable[[int, str], bool] | None = None,
                 status: int | Callable[[int], int] = 503, delay: Callable[[str], float] | None = None):
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.fail, self.status, self.delay = fail, status, delay
        self.seen: Counter[str] = Counter()
        self.injected = 0
        self.statuses: Counter[int] = Counter()  # the injected answers' statuses
        self.requests = 0
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _proxy(self) -> None:
                body = self._body()
                what = kind(self.command, self.path)
                with proxy._lock:
                    proxy.requests += 1
                    number = proxy.requests
                    proxy.seen[what] += 1
                    failing = bool(proxy.fail and proxy.fail(number, what))
                    proxy.injected += failing
                if proxy.delay:
                    time.sleep(proxy.delay(what))
                if failing:
                    status = proxy.status(number) if callable(proxy.status) else proxy.status
                    with proxy._lock:
                        proxy.statuses[status] += 1
                    code = _CODES.get(status, "InternalError")
                    doc = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by '
                           f'the test proxy</Message><RequestId>fault{number}</RequestId></Error>').encode()
                    self._answer(status, [("Content-Type", "application/xml")], doc)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    self._answer(response.status, response.getheaders(), data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _proxy

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
