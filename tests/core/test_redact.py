"""The one redaction helper: URL credentials and query strings out of text, JSON documents, errors and log records."""

from __future__ import annotations

import logging
import os

import pytest

from vidvol.core import redact
from vidvol.datasets.mri_volumes import layout as mri_layout
from vidvol.datasets.video_folder import layout as video_layout


@pytest.mark.parametrize("given,shown", [
    ("https://user:token@host/a/b.nii?X-Amz-Signature=abc&X-Amz-Credential=k", "https://***@host/a/b.nii?***"),
    ("s3://KEY:SECRET@bucket/x/y.mp4", "s3://***@bucket/x/y.mp4"),
    ("s3://KEY:sec/ret@bucket/x.mp4", "s3://***@bucket/x.mp4"),  # an unencoded `/` in the secret
    ("https://ghp_token@github.com/o/r.git", "https://***@github.com/o/r.git"),
    ("https://host/v.mp4?sig=zzz", "https://host/v.mp4?***"),
    ("gs://bucket/user@example.com/file.nii", "gs://bucket/user@example.com/file.nii"),  # an `@` in a path is kept
    ("/data/local/file.nii", "/data/local/file.nii"),
    ("reading 'https://u:p@h/x?a=1' failed, then s3://k:s@b/y", "reading 'https://***@h/x?***' failed, then s3://***@b/y"),
])
def test_text(given, shown):
    assert redact.text(given) == shown
    assert redact.has_secret(given) == (given != shown)


def test_data_redacts_every_string_keys_included():
    doc = {"manual_dir": "s3://k:s@b/m", "skipped": [{"reason": "gone: https://h/x?sig=1", "n": 3}],
           "https://u:p@h/key": (1, "ok")}
    assert redact.data(doc) == {"manual_dir": "s3://***@b/m", "skipped": [{"reason": "gone: https://h/x?***", "n": 3}],
                                "https://***@h/key": (1, "ok")}


def test_exception_is_redacted_in_place_with_its_causes():
    try:
        try:
            raise FileNotFoundError(2, "No such file", "https://u:tok@h/x?sig=1")
        except OSError as inner:
            raise ValueError("could not read s3://k:sec@b/y") from inner
    except ValueError as e:
        assert redact.exception(e) is e
        assert str(e) == "could not read s3://***@b/y"
        assert str(e.__cause__) == "[Errno 2] No such file: 'https://***@h/x?***'"


def test_log_records_are_redacted_once_installed(caplog):
    redact.install_log_redaction()
    redact.install_log_redaction()  # idempotent
    log = logging.getLogger("vidvol.test_redact")
    url = "s3://k:" + "".join(["sec", "456"]) + "@b/y"  # not whole in this source, which a traceback quotes
    with caplog.at_level(logging.INFO):
        log.info("fetching %s", "https://u:tok123@h/x?sig=abc")
        log.info("plain %d", 7)
        try:
            raise OSError(f"cannot open {url}")
        except OSError:
            log.exception("failed")
    assert "tok123" not in caplog.text and "sec456" not in caplog.text and "sig=abc" not in caplog.text
    assert "fetching https://***@h/x?***" in caplog.text and "plain 7" in caplog.text


def test_log_records_show_names_that_are_not_utf8_as_vidvol_writes_them(caplog):
    redact.install_log_redaction()
    name = os.fsdecode(b"caf\xe9.mp4")  # a Latin-1 file name, as os.listdir gives it
    with caplog.at_level(logging.INFO):
        logging.getLogger("vidvol.test_redact").info("skipping %s", name)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "vidvol.test_redact"]
    assert message == "skipping caf\\xe9.mp4"  # no lone surrogate reaches any handler


def test_keys_and_path_features_made_from_urls_carry_no_secret():
    row = mri_layout.Row(path="https://u:tok@h/scans/a.nii.gz?sig=s1", label="1", subject="", split="train", line=2,
                         csv_path="labels.csv")
    assert mri_layout.listed_path("/data/manual", row) == "https://***@h/scans/a.nii.gz?***"
    assert mri_layout.example_key("/data/manual", row).endswith("/a.nii.gz?***")
    key = video_layout.listed_id("/data/manual", "https://u:tok@h/v/clip.mp4?sig=s2")
    assert key.startswith("external/") and key.endswith("/clip.mp4?***") and "tok" not in key and "s2" not in key


# Real presigned-URL shapes (values made up): what each cloud puts in the query string.
AWS_SIGV4 = ("https://bkt.s3.us-east-1.amazonaws.com/scans/t1.nii.gz?X-Amz-Algorithm=AWS4-HMAC-SHA256"
             "&X-Amz-Credential=ASIAV5ECRETKEYID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z"
             "&X-Amz-Expires=900&X-Amz-Security-Token=IQoJb3JpZ2luX2VjSECRETTOKEN%2F%2B%3D&X-Amz-SignedHeaders=host"
             "&X-Amz-Signature=5ecre75160a7ure0123456789abcdef0123456789abcdef0123456789abcdef")
GCS_V4 = ("https://storage.googleapis.com/bkt/clips/a.mp4?X-Goog-Algorithm=GOOG4-RSA-SHA256"
          "&X-Goog-Credential=svc%40proj.iam.gserviceaccount.com%2F20260101%2Fauto%2Fstorage%2Fgoog4_request"
          "&X-Goog-Date=20260101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host"
          "&X-Goog-Signature=9005ecre7516deadbeef00112233445566778899")
AZURE_SAS = ("https://acct.blob.core.windows.net/ctr/v.avi?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-01-02T00:00:00Z"
             "&st=2026-01-01T00:00:00Z&spr=https&sig=a2V5U0VDUkVUc2ln%2Bx%2F9%3D")
SECRET_PARTS = ("ASIAV5ECRETKEYID", "SECRETTOKEN", "5ecre75160a7ure", "9005ecre7516", "a2V5U0VDUkVUc2ln", "svc%40proj")


@pytest.mark.parametrize("presigned", [AWS_SIGV4, GCS_V4, AZURE_SAS])
def test_real_presigned_url_shapes_lose_their_whole_query(presigned):
    path = presigned.split("?", 1)[0]
    for shown in (redact.url(presigned), redact.text(f"reading '{presigned}' failed: 403"), redact.url(presigned[8:])):
        assert not [s for s in SECRET_PARTS if s in shown], shown
    assert redact.url(presigned) == path + "?***"
    assert redact.text(f"reading '{presigned}' failed") == f"reading '{path}?***' failed"
    relative = presigned.split("/", 4)[4]  # `t1.nii.gz?X-Amz-...` as a URL made relative to its manual_dir
    assert redact.url(relative) == relative.split("?", 1)[0] + "?***"


@pytest.mark.parametrize("password", ["se'cret", 'pa"ss', "pa#ss", "pa?ss", "pa@ss", "pa/ss", "a'b\"c#d?e@f/g"])
def test_a_password_with_any_legal_character_is_masked_whole(password):
    for url in (f"https://user:{password}@host/a.mp4", f"s3://KEY:{password}@bucket/x.nii.gz?versionId=1"):
        host = url.split("@")[-1].split("?")[0]
        expected = url.split("://")[0] + "://***@" + host + ("?***" if "?versionId" in url else "")
        assert redact.url(url) == expected
        for line in (f"cannot open {url}", f"cannot open '{url}', giving up", f'manual_dir "{url}"', f"[{url!r}]"):
            shown = redact.text(line)
            assert password not in shown and "user" not in shown and "KEY" not in shown, shown
            assert host in shown, shown
        assert redact.data({"manual_dir": url}) == {"manual_dir": expected}


def test_a_local_path_keeps_a_question_mark_that_is_no_query():
    assert redact.url("/data/what?.nii") == "/data/what?.nii"
    assert redact.url("clips/a?b.avi") == "clips/a?b.avi"
    assert redact.without_query("https://u:p@h/a/b.nii?sig=1#f") == "https://u:p@h/a/b.nii"


def test_exception_notes_and_relogged_tracebacks_are_redacted():
    error = ValueError("bad frame")
    error.add_note(f"raised in the decoding child process:\nOSError: {GCS_V4}")
    redact.exception(error)
    assert not [s for s in SECRET_PARTS if s in "".join(error.__notes__)], error.__notes__
    record = logging.makeLogRecord({"msg": "plain", "exc_text": f"Traceback ...\nOSError: {AWS_SIGV4}"})
    assert not [s for s in SECRET_PARTS if s in redact.record(record).exc_text]


def test_keys_of_urls_under_manual_dir_carry_no_query():
    manual = "https://bkt.s3.us-east-1.amazonaws.com"
    row = mri_layout.Row(path=AWS_SIGV4, label="1", subject="", split="train", line=2, csv_path="labels.csv")
    assert mri_layout.listed_path(manual, row) == "scans/t1.nii.gz?***"
    assert mri_layout.example_key(manual, row) == "scans/t1.nii.gz?***"
    relative = mri_layout.Row(path="scans/t1.nii.gz?" + AWS_SIGV4.split("?")[1], label="1", subject="", split="train",
                              line=3, csv_path="labels.csv")
    assert mri_layout.listed_path(manual, relative) == mri_layout.example_key(manual, relative) == "scans/t1.nii.gz?***"
    assert video_layout.listed_id("https://storage.googleapis.com/bkt", GCS_V4) == "clips/a.mp4?***"
    assert video_layout.listed_id("/data", "clips/v.avi?" + AZURE_SAS.split("?")[1]) == "clips/v.avi?***"
