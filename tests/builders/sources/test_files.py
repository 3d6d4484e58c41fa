"""vidvol.builders.sources.files: local paths exactly as os/open, URLs through fsspec (a real S3 server), retries, local copies."""

from __future__ import annotations

import errno
import http.client
import http.server
import os
import threading

import fsspec
import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import stringify_path

from vidvol.builders.sources import files
from vidvol.core import store
from vidvol.builders.transforms import video
from vidvol.builders.transforms import volume

FLAKY = "vidvolflaky"


class FlakyFileSystem(LocalFileSystem):
    """A real local file system under `vidvolflaky://` whose next `failures` reads raise `error` (our own test code)."""

    protocol = (FLAKY,)
    failures = 0
    calls = 0
    error: BaseException = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer (injected)")

    @classmethod
    def _strip_protocol(cls, path):
        path = stringify_path(path)
        if path.startswith(f"{FLAKY}://"):
            path = path[len(f"{FLAKY}://"):]
        return LocalFileSystem._strip_protocol(path)

    def _read(self):
        type(self).calls += 1
        if type(self).failures > 0:
            type(self).failures -= 1
            raise type(self).error

    def get_file(self, rpath, lpath, **kwargs):
        self._read()
        return super().get_file(rpath, lpath, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        self._read()
        return super().cat_file(path, start=start, end=end, **kwargs)


fsspec.register_implementation(FLAKY, FlakyFileSystem, clobber=True)


@pytest.fixture
def flaky(monkeypatch, tmp_path):
    """The flaky file system reset, no backoff, local_copy fetching into tmp_path/fetch."""
    monkeypatch.setattr(store, "BACKOFF_S", 0.0)
    monkeypatch.setenv(files.FETCH_DIR_ENV, str(tmp_path / "fetch"))
    FlakyFileSystem.failures, FlakyFileSystem.calls = 0, 0
    FlakyFileSystem.error = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer (injected)")
    return FlakyFileSystem


def _tree(root):
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "x.txt").write_text("hello\n")
    (root / "a" / "b" / "y.csv").write_text("time,hrr\n0,1\n")
    (root / "top.txt").write_text("top")
    (root / "empty").mkdir()
    return root


# --------------------------------------------------------------------------------------------
# Path strings and local paths (no store)
# --------------------------------------------------------------------------------------------


def test_path_strings_for_urls_and_local_paths():
    assert files.is_url("s3://b/k") and files.is_url("gs://b") and files.is_url("memory://x")
    assert not files.is_url("/data/x") and not files.is_url("rel/x") and not files.is_url("C:\\x")
    assert files.scheme("S3://b/k") == "s3" and files.scheme("/x") == ""
    assert files.join("s3://b/hmdb51/", "hmdb51_org", "wave", "v.avi") == "s3://b/hmdb51/hmdb51_org/wave/v.avi"
    assert files.join("/data", "a", "b") == os.path.join("/data", "a", "b")
    assert files.normpath("s3://b/fire/./frames/../labels.csv") == "s3://b/fire/labels.csv"
    assert files.normpath("/data/./a/../b") == "/data/b"
    assert files.dirname("s3://b/a/c.avi") == "s3://b/a" and files.dirname("s3://b") == "s3://b"
    assert files.basename("s3://b/a/scan.nii.gz") == "scan.nii.gz" and files.basename("/x/y.avi") == "y.avi"
    assert files.relpath("s3://b/fire/sub/t1.avi", "s3://b/fire") == "sub/t1.avi"
    assert files.relpath("/data/a/b", "/data") == os.path.join("a", "b")
    with pytest.raises(ValueError):
        files.relpath("s3://b/x", "/data")
    assert files.isabs("s3://b/x") and files.isabs("/x") and not files.isabs("x/y")


def test_local_paths_take_the_os_calls(tmp_path):
    root = _tree(tmp_path / "t")
    r = str(root)
    assert files.exists(r + "/a/x.txt") and not files.exists(r + "/nope")
    assert files.isdir(r + "/a") and not files.isdir(r + "/a/x.txt")
    assert files.isfile(r + "/a/x.txt") and not files.isfile(r + "/a")
    assert sorted(files.listdir(r)) == sorted(os.listdir(r))
    assert list(files.walk(r)) == list(os.walk(r))
    with files.open_text(r + "/a/b/y.csv", newline="") as f:
        assert f.read() == "time,hrr\n0,1\n"
    assert files.read_bytes(r + "/top.txt") == b"top"
    st = files.stat(r + "/a/x.txt")
    assert st.size == 6 and not st.isdir and st.mtime_ns == os.stat(r + "/a/x.txt").st_mtime_ns
    with files.local_copy(r + "/top.txt") as local:
        assert local == r + "/top.txt"  # no copy
    assert os.path.exists(r + "/top.txt")
    with pytest.raises(FileNotFoundError):
        files.listdir(r + "/nope")


def test_transient_errors_are_told_apart():
    assert files.is_transient(ConnectionResetError()) and files.is_transient(TimeoutError())
    assert files.is_transient(OSError(errno.EIO, "InternalError")) and files.is_transient(OSError(errno.ECONNREFUSED, "x"))
    assert not files.is_transient(FileNotFoundError(errno.ENOENT, "gone"))
    assert not files.is_transient(PermissionError("Forbidden"))
    assert not files.is_transient(OSError(errno.ENOSPC, "disk full"))
    assert not files.is_transient(ValueError("bad"))


# --------------------------------------------------------------------------------------------
# Retries and local copies, on a real (local) fsspec file system that fails on demand
# --------------------------------------------------------------------------------------------


def test_local_copy_retries_a_transient_error_then_succeeds(flaky, tmp_path):
    src = tmp_path / "scan.nii.gz"
    src.write_bytes(b"\x1f\x8b payload")
    flaky.failures = 2
    url = f"{FLAKY}://{src}"
    with files.local_copy(url, retries=3) as local:
        assert local.endswith("/scan.nii.gz") and local.startswith(str(tmp_path / "fetch"))
        assert open(local, "rb").read() == b"\x1f\x8b payload"
    assert flaky.calls == 3
    assert not os.path.exists(local) and os.listdir(tmp_path / "fetch") == []


def test_persistent_transient_error_becomes_a_remote_read_error_naming_the_url(flaky, tmp_path):
    src = tmp_path / "clip.avi"
    src.write_bytes(b"x")
    flaky.failures = 100
    url = f"{FLAKY}://{src}"
    with pytest.raises(files.RemoteReadError) as err:
        with files.local_copy(url, retries=3):
            pass
    assert flaky.calls == 4  # the first attempt and 3 retries
    assert isinstance(err.value, OSError)  # an input error: the example function's input becomes a skip
    assert url in str(err.value) and "after 4 attempts" in str(err.value) and "ConnectionResetError" in str(err.value)
    assert os.listdir(tmp_path / "fetch") == []


def test_missing_and_refused_are_not_retried(flaky, tmp_path):
    url = f"{FLAKY}://{tmp_path}/missing.avi"
    with pytest.raises(FileNotFoundError) as err:
        with files.local_copy(url):
            pass
    assert url in str(err.value) and flaky.calls == 1
    (tmp_path / "x.avi").write_bytes(b"x")
    flaky.failures, flaky.calls = 5, 0
    flaky.error = PermissionError(errno.EACCES, "Forbidden")
    with pytest.raises(files.AccessDeniedError, match=r"access denied for vidvolflaky://.*x\.avi") as err:
        files.read_bytes(f"{FLAKY}://{tmp_path}/x.avi")
    assert not isinstance(err.value, OSError)  # stops a build instead of skipping every input
    assert flaky.calls == 1


def test_local_copy_names_the_url_in_errors_and_always_deletes(flaky, tmp_path):
    src = tmp_path / "empty.avi"
    src.write_bytes(b"")
    url = f"{FLAKY}://{src}"
    with pytest.raises(video.VideoDecodeError) as err:
        with files.local_copy(url) as local:
            video.probe_video(local)
    assert str(err.value) == f"{url}: video file is empty (0 bytes)"
    assert os.listdir(tmp_path / "fetch") == []


def test_stages_take_urls_directly(flaky, tmp_path):
    from vidvol.testing import samples

    samples.write_video(str(tmp_path / "v.avi"), 12, height=48, width=64)
    info = video.probe_video(f"{FLAKY}://{tmp_path}/v.avi")
    assert (info.height, info.width) == (48, 64)
    decoded = video.decode_frames(f"{FLAKY}://{tmp_path}/v.avi", [0, 5], size=(24, 32))
    assert decoded.frames.shape == (2, 24, 32, 3)
    with pytest.raises(video.VideoNotFoundError) as err:
        video.probe_video(f"{FLAKY}://{tmp_path}/none.avi")
    assert "Video file not found" in str(err.value) and f"{FLAKY}://" in str(err.value)
    frame = samples.make_frame(3, height=40, width=50)
    import cv2

    cv2.imwrite(str(tmp_path / "f.png"), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    np.testing.assert_array_equal(video.read_image(f"{FLAKY}://{tmp_path}/f.png"), frame)
    with pytest.raises(video.ImageNotFoundError):
        video.read_image(f"{FLAKY}://{tmp_path}/none.png")
    samples.write_mri_volumes(str(tmp_path / "mri"), num_subjects=1, shape=(8, 9, 7))
    vol = volume.load_volume(f"{FLAKY}://{tmp_path}/mri/volumes/sub-001_scan-0.nii.gz")
    assert vol.data.shape == (8, 9, 7)
    assert os.listdir(tmp_path / "fetch") == []


# --------------------------------------------------------------------------------------------
# A real S3 server (SeaweedFS)
# --------------------------------------------------------------------------------------------

BUCKET = "vidvol-files"


@pytest.fixture(scope="module")
def s3():
    from services import SeaweedS3  # tests/services.py

    with SeaweedS3(buckets=(BUCKET,)) as server:
        client = server.client()
        for key, body in {
            "t/a/x.txt": b"hello\n", "t/a/b/y.csv": b"time,hrr\n0,1\n", "t/top.txt": b"top",
            "t/scan.nii.gz": b"\x1f\x8b not really", "t/empty.avi": b"",
        }.items():
            client.put_object(Bucket=BUCKET, Key=key, Body=body)
        yield server


@pytest.fixture
def s3_env(s3, monkeypatch, tmp_path):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(files.FETCH_DIR_ENV, str(tmp_path / "fetch"))
    monkeypatch.setattr(store, "BACKOFF_S", 0.0)
    return s3


@pytest.mark.slow
def test_s3_listing_reading_and_missing(s3_env):
    root = f"s3://{BUCKET}/t"
    assert files.exists(root + "/a/x.txt") and files.exists(root + "/a") and not files.exists(root + "/nope")
    assert files.isdir(root + "/a") and not files.isdir(root + "/a/x.txt")
    assert files.isfile(root + "/a/x.txt") and not files.isfile(root + "/a") and not files.isfile(root + "/nope")
    assert files.listdir(root) == ["a", "empty.avi", "scan.nii.gz", "top.txt"]
    assert list(files.walk(root)) == [
        (root, ["a"], ["empty.avi", "scan.nii.gz", "top.txt"]), (root + "/a", ["b"], ["x.txt"]), (root + "/a/b", [], ["y.csv"]),
    ]
    assert list(files.walk(root + "/nope")) == []
    with files.open_text(root + "/a/b/y.csv", newline="") as f:
        assert f.read() == "time,hrr\n0,1\n"
    with files.open_binary(root + "/top.txt") as f:
        assert f.read() == b"top"
    st = files.stat(root + "/a/x.txt")
    assert st.size == 6 and not st.isdir and st.mtime_ns > 0
    with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/t/nope"):
        files.listdir(root + "/nope")
    with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/t/nope.txt"):
        files.read_bytes(root + "/nope.txt")
    assert not files.exists("s3://no-such-bucket-x/t")
    assert "bucket 'no-such-bucket-x' does not exist" in files.missing_detail("s3://no-such-bucket-x/t")
    assert files.missing_detail(root + "/nothing") == f" (no object under {root}/nothing/)"
    assert files.missing_detail(root) == ""


@pytest.mark.slow
def test_s3_local_copy_keeps_the_suffix_and_deletes(s3_env, tmp_path):
    url = f"s3://{BUCKET}/t/scan.nii.gz"
    with files.local_copy(url) as local:
        assert local.endswith(".nii.gz") and open(local, "rb").read() == b"\x1f\x8b not really"
    assert not os.path.exists(local)
    with pytest.raises(RuntimeError):
        with files.local_copy(url) as local:
            raise RuntimeError("the example failed")
    assert not os.path.exists(local) and os.listdir(tmp_path / "fetch") == []
    with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/t/missing.avi"):
        with files.local_copy(f"s3://{BUCKET}/t/missing.avi"):
            pass


@pytest.mark.slow
def test_s3_wrong_secret_is_a_clear_error_without_the_secret(s3_env, monkeypatch, capfd, caplog):
    wrong = "wrong-secret-" + "7f3c9a1e5b2d4c6f"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    for call in (lambda: files.isdir(f"s3://{BUCKET}/t"), lambda: files.read_bytes(f"s3://{BUCKET}/t/top.txt")):
        with pytest.raises(files.AccessDeniedError) as err:
            call()
        text = str(err.value)
        assert text.startswith(f"access denied for s3://{BUCKET}/t") and "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in text
        assert wrong not in text and s3_env.secret_key not in text
    out, errs = capfd.readouterr()
    for secret in (wrong, s3_env.secret_key):
        assert secret not in out + errs + caplog.text


class _FailingProxy:
    """A real HTTP proxy in front of the S3 server that answers the first `failures` GETs of a key with 500 InternalError."""

    def __init__(self, target: str):
        self.target = target.split("://", 1)[1]
        self.failures = 0
        self.gets = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self):
                if self.command == "GET" and "/flaky/" in self.path:
                    proxy.gets += 1
                    if proxy.failures > 0:
                        proxy.failures -= 1
                        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                                b"<Message>We encountered an internal error. Please try again.</Message></Error>")
                        self.send_response(500)
                        self.send_header("Content-Type", "application/xml")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(proxy.target, timeout=30)
                conn.request(self.command, self.path, body=data, headers=dict(self.headers.items()))
                resp = conn.getresponse()
                payload = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, *args):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_s3_server_errors_are_retried_then_skipped(s3_env, monkeypatch, tmp_path):
    s3_env.client().put_object(Bucket=BUCKET, Key="flaky/clip.avi", Body=b"video bytes")
    with _FailingProxy(s3_env.endpoint_url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: every attempt is ours
        url = f"s3://{BUCKET}/flaky/clip.avi"
        proxy.failures = 2
        with files.local_copy(url, retries=3) as local:
            assert open(local, "rb").read() == b"video bytes"
        assert proxy.gets == 3
        proxy.failures, proxy.gets = 100, 0
        with pytest.raises(files.RemoteReadError) as err:
            with files.local_copy(url, retries=2):
                pass
        assert proxy.gets == 3
        assert url in str(err.value) and "after 3 attempts" in str(err.value) and "internal error" in str(err.value)
    assert os.listdir(tmp_path / "fetch") == []


def test_the_fetch_dir_is_private_or_replaced_or_refused(tmp_path, monkeypatch, caplog):
    """Real folders: a missing one is made 0700; the default one made first by someone else (here: a symlink, another
    owner) is replaced by a fresh private folder; one given by VIDVOL_FETCH_DIR that others may write is refused."""
    import stat
    import tempfile

    monkeypatch.delenv(files.FETCH_DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(files, "_replaced", {})
    default = files.fetch_dir()
    assert files.private_dir(default) == default and stat.S_IMODE(os.lstat(default).st_mode) == 0o700
    os.rmdir(default)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", default)  # planted by another local user
    fresh = files.private_dir(default)
    assert fresh != default and os.path.dirname(fresh) == str(tmp_path) and not os.path.islink(fresh)
    assert stat.S_IMODE(os.lstat(fresh).st_mode) == 0o700 and "is a symbolic link" in caplog.text
    assert files.private_dir(default) == fresh  # the same replacement for the rest of the process

    given = tmp_path / "given"
    given.mkdir(mode=0o700)
    monkeypatch.setenv(files.FETCH_DIR_ENV, str(given))
    assert files.private_dir(files.fetch_dir()) == str(given)
    os.chmod(given, 0o777)
    with pytest.raises(PermissionError, match=r"VIDVOL_FETCH_DIR=.*others may write into it \(mode 0777\).*mkdir -m 700"):
        files.private_dir(files.fetch_dir())
    if os.getuid() == 0:  # root can give the folder to another user: a real other owner
        os.chmod(given, 0o700)
        os.chown(given, 4321, -1)
        with pytest.raises(PermissionError, match="belongs to uid 4321"):
            files.private_dir(files.fetch_dir())


def test_a_fifo_listed_as_a_volume_or_a_video_is_a_skip_not_a_hang(tmp_path):
    """A FIFO nobody writes would block its reader forever (volumes are read in the worker, with no child to kill):
    the build's readers refuse it at once, naming the file (videos did already: `video._check_input_file`)."""
    from vidvol.builders.transforms import volume_examples

    fifo = str(tmp_path / "scan.nii.gz")
    os.mkfifo(fifo)
    errors: list = []

    def read_all():
        source = volume_examples.VolumeSource(fifo, "scan", {}, "labels.csv:2")
        spec = volume_examples.VolumeSpec(spatial_size=(8, 8, 8))
        for read in (lambda: list(volume_examples.volume_example(source, spec)), lambda: video.decode_frames(fifo, [0])):
            try:
                read()
            except (OSError, ValueError) as e:
                errors.append(e)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "a reader hangs on the FIFO"
    assert [type(e).__name__ for e in errors] == ["NotARegularFileError", "VideoDecodeError"], errors
    assert str(errors[0]).startswith(f"{fifo}: a FIFO (named pipe), not a regular file")
