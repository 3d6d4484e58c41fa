"""SeaweedS3: a real `weed mini` S3 server on loopback, credentials enforced, cleaned up on exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

import services  # tests/ is on sys.path (conftest)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3():
    with services.SeaweedS3(buckets=("vidvol-test", "second-bucket")) as server:
        yield server


def _fs(**options):
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


def test_roundtrip_with_storage_options(s3):
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3.storage_options)
    assert sorted(fs.ls("", detail=False)) == ["second-bucket", "vidvol-test"]
    payloads = {f"vidvol-test/rt/f{i}.bin": os.urandom(1000 * (i + 1)) for i in range(3)}
    for key, data in payloads.items():
        fs.pipe(key, data)
    big = os.urandom(12 * 2**20)  # > s3fs's 5 MiB block: multipart upload
    with fs.open("vidvol-test/rt/big.bin", "wb") as f:
        f.write(big)
    assert sorted(fs.ls("vidvol-test/rt", detail=False)) == sorted([*payloads, "vidvol-test/rt/big.bin"])
    assert {k: fs.cat(k) for k in payloads} == payloads
    assert fs.cat("vidvol-test/rt/big.bin") == big


def test_listens_on_loopback_only(s3):
    pid = s3._proc.pid
    listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening
    assert {ip for ip, _ in listening} == {"127.0.0.1"}
    assert {port for _, port in listening} <= set(s3.ports.values())
    assert ("127.0.0.1", s3.ports["s3.port"]) in listening


@pytest.mark.parametrize(
    "options, message",
    [
        ({"secret": "wrong-secret"}, "signature"),
        ({"key": "nobody"}, "access key"),
        ({"key": None, "secret": None, "anon": True}, "denied"),
    ],
    ids=["wrong-secret", "unknown-key", "anonymous"],
)
def test_wrong_credentials_are_refused(s3, options, message):
    with pytest.raises(PermissionError, match=f"(?i){message}") as info:
        _fs(**{**s3.storage_options, **options}).ls("vidvol-test")
    assert s3.secret_key not in str(info.value) and s3.secret_key not in repr(info.value.__cause__)
    with pytest.raises(PermissionError):
        _fs(**{**s3.storage_options, **options}).pipe("vidvol-test/denied.txt", b"x")
    assert not _fs(**s3.storage_options).exists("vidvol-test/denied.txt")


def test_missing_bucket(s3):
    fs = _fs(**s3.storage_options)
    for op in (lambda: fs.ls("no-such-bucket"), lambda: fs.cat("no-such-bucket/a"),
               lambda: fs.pipe("no-such-bucket/a", b"1")):  # no auto-creation on upload
        with pytest.raises(FileNotFoundError, match="bucket does not exist") as info:
            op()
        assert s3.secret_key not in str(info.value)
    assert not fs.exists("no-such-bucket/a")
    with pytest.raises(FileNotFoundError):
        fs.cat("vidvol-test/no-such-key")


def test_env_credentials_alone_reach_it(s3):
    """fsspec.open('s3://...') in a fresh process with only AWS_* variables (how Beam workers see them)."""
    _fs(**s3.storage_options).pipe("vidvol-test/env/in.txt", b"from-driver")
    code = (
        "import fsspec\n"
        "print(fsspec.open('s3://vidvol-test/env/in.txt', 'rb').open().read().decode())\n"
        "with fsspec.open('s3://vidvol-test/env/out.txt', 'w') as f: f.write('from-child')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.run([sys.executable, "-c", code], env={**env, **s3.env()}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "from-driver"
    assert _fs(**s3.storage_options).cat("vidvol-test/env/out.txt") == b"from-child"
    wrong = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong"}
    proc = subprocess.run([sys.executable, "-c", code], env={**env, **wrong}, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "PermissionError" in proc.stderr


def test_stop_leaves_nothing_behind():
    t0 = time.monotonic()
    server = services.SeaweedS3()
    with server:
        assert time.monotonic() - t0 < 30
        pid, workdir, ports = server._proc.pid, server.workdir, dict(server.ports)
        assert os.path.isdir(workdir)
        assert "secret" not in repr(server) and server.secret_key not in repr(server)
        children = psutil.Process(pid).children(recursive=True)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not [c for c in children if c.is_running()]
    assert not os.path.exists(workdir)
    assert not [p for port in ports.values() for p in services._socket_paths(port) if os.path.exists(p)]
