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
