"""Every CSV list a dataset reads fails on a non-UTF-8 byte, or on a field over Python's csv limit (128 KiB, an unclosed
quote), with a ValueError naming the file and the line and saying what to do; a real build stops with that message."""

from __future__ import annotations

import csv
import os
import pathlib

import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders.sources import csv_files
from vidvol.builders.sources import labels as labels_lib
from vidvol.datasets.fire_hrr import layout as fire_layout
from vidvol.datasets.mri_volumes import layout as mri_layout
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
from vidvol.datasets.video_folder import csv_list
from vidvol.testing import samples

LIMIT = csv.field_size_limit()


def _lines(*lines: str) -> bytes:
    return "\n".join(lines).encode("utf-8") + b"\n"


# Each CSV a dataset reads: a well-formed file (as bytes), the reader, and the error class it raises.
READERS = {
    "mri_volumes labels.csv": (_lines("path,label,subject", "a.nii,1,s1", "b.nii,0,s2", "c.nii,1,s3"),
                               lambda p: mri_layout.read_labels_csv(p), mri_layout.LayoutError),
    "fire_hrr labels.csv": (_lines("experiment,frame,hrr", "e1,f/1.jpg,1.0", "e1,f/2.jpg,2.0", "e1,f/3.jpg,3.0"),
                            lambda p: fire_layout.read_labels(p, os.path.dirname(p)), fire_layout.LabelsError),
    "fire_hrr series csv": (_lines("time,hrr", "0.0,1.0", "1.0,2.0", "2.0,3.0"),
                            lambda p: fire_layout.read_series(p), fire_layout.LabelsError),
    "video_folder csv list": (_lines("path,label", "a/x.mp4,run", "b/y.mp4,walk", "c/z.mp4,run"),
                              lambda p: csv_list.read_video_csv(p), labels_lib.LayoutError),
    "hmdb51 split list": (_lines("x.avi 1", "y.avi 2", "z.avi 1"),
                          lambda p: labels_lib.parse_hmdb_split_file(p, "run"), ValueError),
}


def _with_latin1_on_line(good: bytes, line: int) -> bytes:
    """`good` with a Latin-1 é (0xe9, not UTF-8) put into its `line`th line (1-based)."""
    rows = good.split(b"\n")
    rows[line - 1] = rows[line - 1].replace(b"a", b"caf\xe9", 1) if b"a" in rows[line - 1] else rows[line - 1] + b"\xe9"
    return b"\n".join(rows)


@pytest.mark.parametrize("name", sorted(READERS))
def test_the_good_file_reads(tmp_path, name):
    good, read, _ = READERS[name]
    path = tmp_path / "list.csv"
    path.write_bytes(good)
    assert read(str(path))


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_byte_that_is_not_utf8_names_file_line_and_fix(tmp_path, name):
    good, read, error = READERS[name]
    path = tmp_path / "list.csv"
    path.write_bytes(_with_latin1_on_line(good, 3))
    with pytest.raises(error) as e:
        read(str(path))
    message = str(e.value)
    assert isinstance(e.value, ValueError)
    assert message.startswith(f"{path}:3: byte e9 at column"), message
    assert "save the file as UTF-8" in message and "iconv" in message


@pytest.mark.parametrize("name", sorted(n for n in READERS if "split list" not in n))  # the split lists are not CSV
def test_a_field_over_the_csv_limit_names_file_line_and_the_unclosed_quote(tmp_path, name):
    good, read, error = READERS[name]
    rows = good.split(b"\n")
    # Line 3 opens a quote that is never closed: the rest of the file (over 128 KiB) becomes one field.
    rows[2] = b'"' + rows[2]
    path = tmp_path / "list.csv"
    path.write_bytes(b"\n".join(rows[:3] + [b"x" * 1000] * (LIMIT // 1000 + 5) + rows[3:]))
    with pytest.raises(error) as e:
        read(str(path))
    message = str(e.value)
    assert message.startswith(f"{path}:3 (the record starting there runs to line "), message
    assert f"longer than {LIMIT} characters" in message and "never closed" in message


def test_a_bom_and_crlf_still_read_and_lines_count_from_one(tmp_path):
    path = tmp_path / "list.csv"
    path.write_bytes(b"\xef\xbb\xbfpath,label\r\na/x.mp4,run\r\nb/y.mp4,w\xe9\r\n")
    with pytest.raises(csv_files.CsvError, match=rf"{path}:3: byte e9 at column 10"):
        list(csv_files.rows(str(path)))
    path.write_bytes(b"\xef\xbb\xbfpath,label\r\na/x.mp4,run\r\n")
    assert list(csv_files.rows(str(path))) == [(1, ["path", "label"]), (2, ["a/x.mp4", "run"])]


def test_a_header_that_is_utf8_with_a_latin1_body_is_still_found_then_named(tmp_path):
    """video_folder finds its CSV by the header; a Latin-1 row further down must not hide the CSV (which then
    falls back to class folders with a confusing error), but be named at its line."""
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "videos.csv").write_bytes(b"path,label\n" + b"a/x.mp4,run\n" * 5000 + b"b/y.mp4,caf\xe9\n")
    assert csv_list.has_video_csv_header(str(manual / "videos.csv"))
    with pytest.raises(ValueError, match=r"videos.csv:5002: byte e9"):
        csv_list.read_video_csv(str(manual / "videos.csv"))


def test_a_real_build_stops_with_the_named_line(tmp_path):
    manual = tmp_path / "manual"
    samples.write_mri_volumes(str(manual), num_subjects=4, shape=(8, 8, 8))
    text = (manual / "labels.csv").read_bytes().split(b"\n")
    text[2] = text[2] + b"\xe9"
    (manual / "labels.csv").write_bytes(b"\n".join(text))
    builder = mri.Builder(data_dir=str(tmp_path / "out"), config="small_32")
    with pytest.raises(mri_layout.LayoutError, match=rf"{manual / 'labels.csv'}:3: byte e9 at column \d+ is not UTF-8"):
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    assert not pathlib.Path(builder.data_path).exists()
