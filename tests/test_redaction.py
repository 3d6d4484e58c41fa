"""No URL credentials or query strings in anything a build writes or logs: a real build whose inputs are presigned
URLs (an HTTP server on 127.0.0.1) and whose manual_dir carries `KEY:SECRET@` (a real S3 server), every file it
leaves grepped for the secrets, and the terminal and log records too."""

from __future__ import annotations

import functools
import http.server
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders.writer import shards_file
from vidvol.builders.writer import skip_report
from vidvol.core import redact
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.testing import samples
from conftest import in_process_config

TOKEN, SIGNATURE, CREDENTIAL, OTHER_SIGNATURE = "tok5ecretA1x", "sig5ecretB2y", "AKIA5ECRETC3", "sig5ecretD4z"


def _grep(root: pathlib.Path, secrets) -> list[tuple[str, str]]:
    """(file, secret) for every secret found in any file under root (bytes, so shards and logs alike)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [(str(path), s) for s in secrets if s.encode() in data]
    return found


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files; its access log (which would print the query strings it got) stays off."""

    def log_message(self, format, *args):
        pass


@pytest.fixture
def served(tmp_path):
    """(folder, port): an HTTP server on 127.0.0.1 serving the folder (it ignores credentials and query strings)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_build_from_presigned_urls_writes_and_logs_no_secret(tmp_path, served, capfd, caplog):
    folder, port = served
    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    samples.write_mri_volumes(str(manual), num_subjects=4, shape=(8, 8, 8))
    first = sorted((manual / "volumes").iterdir())[0]
    (folder / "vol").mkdir()
    shutil.move(str(first), folder / "vol" / "outside.nii.gz")
    base = f"http://reader:{TOKEN}@127.0.0.1:{port}/vol"
    presigned = f"{base}/outside.nii.gz?X-Amz-Signature={SIGNATURE}&X-Amz-Credential={CREDENTIAL}"
    missing = f"{base}/missing.nii.gz?sig={OTHER_SIGNATURE}"
    lines = (manual / "labels.csv").read_text().splitlines()
    lines = [l for l in lines if first.name not in l] + [f"{presigned},1,sub-url", f"{missing},0,sub-gone"]
    (manual / "labels.csv").write_text("\n".join(lines) + "\n")
    secrets = (TOKEN, SIGNATURE, CREDENTIAL, OTHER_SIGNATURE)

    caplog.set_level(logging.INFO)
    builder = mri.Builder(data_dir=str(data_dir), config="small_32")
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))

    shown = f"http://***@127.0.0.1:{port}/vol"
    paths = {ex["path"].decode() for split in builder.info.splits
             for ex in tfds.as_numpy(builder.as_dataset(split=split))}
    assert f"{shown}/outside.nii.gz?***" in paths, paths  # the `path` feature
    skipped = skip_report.read_skip_report(os.fspath(builder.data_path))["skipped"]
    assert any(f"{shown}/missing.nii.gz?***" in s["reason"] for s in skipped), skipped  # the skip reason
    assert _grep(data_dir, secrets) == []  # shards, shards.json, skip report, dataset_info, the build log
    out, err = capfd.readouterr()
    assert not [s for s in secrets if s in out + err + caplog.text]


def test_a_video_list_of_presigned_urls_keeps_them_out_of_keys_video_ids_and_reports(tmp_path, served, capfd):
    """video_folder: a CSV listing videos by presigned URL (one served, one missing); the `video_id` feature, the
    example keys in the shards, the skip report and everything else written hold no secret."""
    from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb

    folder, port = served
    manual = tmp_path / "manual"
    for i in range(3):
        samples.write_video(str(manual / "clips" / f"local{i}.avi"), 12, height=32, width=48, seed=i)
    samples.write_video(str(folder / "remote.avi"), 12, height=32, width=48, seed=7)
    remote = f"http://viewer:{TOKEN}@127.0.0.1:{port}/remote.avi?X-Amz-Signature={SIGNATURE}"
    gone = f"http://viewer:{TOKEN}@127.0.0.1:{port}/gone.avi?sig={OTHER_SIGNATURE}"
    rows = [f"clips/local{i}.avi,{'ab'[i % 2]},train" for i in range(3)] + [f"{remote},a,train", f"{gone},b,train"]
    (manual / "list.csv").write_text("path,label,split\n" + "\n".join(rows) + "\n")
    config = vfb.VideoFolderConfig(name="t4x32", csv_file="list.csv", num_frames=4, height=32, width=48)
    builder = vfb.Builder(data_dir=str(tmp_path / "data"), config=config)
    builder.download_and_prepare(download_config=in_process_config(manual_dir=str(manual)))
    ids = {ex["video_id"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train"))}
    assert any(i.endswith("/remote.avi?***") for i in ids), ids
    skipped = skip_report.read_skip_report(os.fspath(builder.data_path))["skipped"]
    assert len(skipped) == 1, skipped  # the missing one
    assert skipped[0]["source"].endswith("/gone.avi?***") and "gone.avi?***" in skipped[0]["reason"], skipped
    assert _grep(tmp_path / "data", (TOKEN, SIGNATURE, OTHER_SIGNATURE)) == []
    out, err = capfd.readouterr()
    assert not [s for s in (TOKEN, SIGNATURE, OTHER_SIGNATURE) if s in out + err]


def _cli(manual_dir: str, data_dir, env: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "vidvol.beam_jobs.build", "mri_volumes/small_32", "--manual_dir", manual_dir,
           "--data_dir", str(data_dir)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow  # a real S3 server and the build CLI in a subprocess
def test_a_manual_dir_with_credentials_in_its_url_is_never_written_or_shown(tmp_path):
    """`s3://KEY:SECRET@bucket/prefix` (the credentials only in the URL): the build reads through them, and neither
    shards.json's manual_dir, the build log's command line, the skip report, the shards, the terminal nor the
    error of a refused secret shows them."""
    from services import SeaweedS3

    local = tmp_path / "mri"
    samples.write_mri_volumes(str(local), num_subjects=4, shape=(8, 8, 8))
    (local / "volumes" / sorted(os.listdir(local / "volumes"))[0]).unlink()  # a skip naming a URL
    with SeaweedS3(buckets=("vidvol-test",)) as server:
        client = server.client()
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            client.put_object(Bucket="vidvol-test", Key=f"mri/{path.relative_to(local).as_posix()}", Body=path.read_bytes())
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL=server.endpoint_url, AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                   TF_CPP_MIN_LOG_LEVEL="2")
        key, secret = server.access_key, server.secret_key
        built = _cli(f"s3://{key}:{secret}@vidvol-test/mri", tmp_path / "data", env)
        assert built.returncode == 0, redact.text(built.stderr[-4000:])
        wrong = "wrong5ecret0123456789"
        refused = _cli(f"s3://{key}:{wrong}@vidvol-test/mri", tmp_path / "refused", env)
    data_path = tmp_path / "data" / "mri_volumes" / "small_32" / "2.0.0"
    assert shards_file.read_shards_file(str(data_path))["manual_dir"] == "s3://***@vidvol-test/mri"
    report = json.loads((data_path / "skip_report.json").read_text())
    assert [s["reason"] for s in report["skipped"]][0].startswith("FileNotFoundError: s3://***@vidvol-test/mri/volumes/")
    logs = list((tmp_path / "data" / "mri_volumes" / "small_32").glob("build-*.log"))
    assert logs and "--manual_dir s3://***@vidvol-test/mri" in logs[0].read_text()  # the command line, redacted
    assert refused.returncode != 0 and "s3://***@vidvol-test/mri" in refused.stderr, refused.stderr[-3000:]
    for value in (secret, wrong):
        assert _grep(tmp_path / "data", [value]) == [] and _grep(tmp_path / "refused", [value]) == []
        assert value not in built.stdout + built.stderr + refused.stdout + refused.stderr


class _FlakyHandler(_QuietHandler):
    """Serves files, ignoring query strings; a path holding `flaky` answers 503 to its second GET (the fetch, after
    the existence check): the fetch is retried."""

    gets: dict = {}

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        self.gets[path] = self.gets.get(path, 0) + 1
        if "flaky" in path and self.gets[path] == 2:
            self.send_error(503, "try again")
            return
        super().do_GET()


@pytest.mark.slow  # a real build of 5 videos, decoded in the child (about 8 s on the loaded 2-core machine)
def test_real_presigned_url_shapes_leave_no_secret_in_anything_the_build_writes(tmp_path, capfd, caplog):
    """video_folder whose CSV lists presigned URLs (AWS SigV4, GCS V4, Azure SAS shapes; one a 503 first, so the
    decoding child logs a retry; one missing, so a skip): the `video_id`s, keys, shards, metadata, build log, skip
    report, terminal and log records hold no part of any secret. (TFDS takes no http:// manual_dir: the URLs under
    a bucket manual_dir are `test_redact.test_keys_of_urls_under_manual_dir_carry_no_query`'s.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_test_redact_shapes", pathlib.Path(__file__).parent / "core" / "test_redact.py")
    shapes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shapes)  # the presigned-URL shapes (tests/core/test_redact.py), whatever sys.path holds
    AWS_SIGV4, AZURE_SAS, GCS_V4, SECRET_PARTS = shapes.AWS_SIGV4, shapes.AZURE_SAS, shapes.GCS_V4, shapes.SECRET_PARTS
    from vidvol.datasets.video_folder import video_folder_dataset_builder as vfb

    folder = tmp_path / "served"
    for i, name in enumerate(("aws.avi", "gcs.avi", "flaky.avi", "local.avi")):
        samples.write_video(str(folder / "clips" / name), 8, height=32, width=48, seed=i)
    handler = functools.partial(_FlakyHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    query = {name: shape.split("?", 1)[1] for name, shape in (("aws", AWS_SIGV4), ("gcs", GCS_V4), ("azure", AZURE_SAS))}
    rows = [f"{base}/clips/aws.avi?{query['aws']},a,train", f"{base}/clips/gcs.avi?{query['gcs']},b,train",
            f"{base}/clips/flaky.avi?{query['azure']},a,train", f"{base}/clips/gone.avi?{query['aws']},b,train",
            "clips/local.avi,b,train"]
    (folder / "list.csv").write_text("path,label,split\n" + "\n".join(rows) + "\n")
    config = vfb.VideoFolderConfig(name="t4x32", csv_file="list.csv", num_frames=4, height=32, width=48)
    builder = vfb.Builder(data_dir=str(tmp_path / "data"), config=config)
    caplog.set_level(logging.INFO)
    try:
        builder.download_and_prepare(download_config=in_process_config(manual_dir=str(folder)))
    finally:
        server.shutdown()
        server.server_close()
    ids = sorted(ex["video_id"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train")))
    assert len(ids) == 4 and "clips/local.avi" in ids, ids
    assert sorted(i.rsplit("/", 1)[1] for i in ids if i.startswith("external/")) == [
        "aws.avi?***", "flaky.avi?***", "gcs.avi?***"], ids
    skipped = skip_report.read_skip_report(os.fspath(builder.data_path))["skipped"]
    assert [s["source"].rsplit("/", 1)[1] for s in skipped] == ["gone.avi?***"], skipped
    assert f"{base}/clips/gone.avi?*** video not found" in skipped[0]["reason"], skipped
    out, err = capfd.readouterr()
    assert "attempt 1 of" in caplog.text + err  # the child's retry warning reached the worker's log
    assert _grep(tmp_path / "data", SECRET_PARTS) == []  # shards, shards.json, dataset_info, skip report, build log
    assert not [s for s in SECRET_PARTS if s in out + err + caplog.text]
