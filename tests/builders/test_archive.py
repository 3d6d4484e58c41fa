"""Safe RAR extraction over real RAR 4.x archives written byte by byte (tests/rar_writer.py)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest
import rar_writer  # tests/rar_writer.py, on sys.path through tests/conftest.py
import rarfile
from rar_writer import RarEntry

from vidvol.builders import archive


def _payload(seed: int, size: int) -> bytes:
    """Deterministic, non-repeating bytes, so a misplaced chunk would change the content."""
    return bytes((i * 31 + seed * 7 + (i >> 8)) % 251 for i in range(size))


def _all_files(root: pathlib.Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_rar_writer_round_trips_through_rarfile(tmp_path):
    entries = {"a.txt": b"hello", "sub/b.bin": _payload(1, 70_000), "empty.txt": b""}
    path = rar_writer.write_rar4(
        tmp_path / "x.rar",
        [RarEntry("sub", is_dir=True), *entries.items(), RarEntry("link", symlink_target="../t")])
    with rarfile.RarFile(path, errors="strict") as rf:
        infos = {info.filename: info for info in rf.infolist()}
        assert set(infos) == {"sub/", "a.txt", "sub/b.bin", "empty.txt", "link"}
        assert infos["sub/"].is_dir() and infos["link"].is_symlink()
        for name, data in entries.items():
            assert infos[name].file_size == len(data)
            assert infos[name].compress_type == rarfile.RAR_M0
            assert rf.read(name) == data
        rf.testrar()


def test_extracts_files_and_folders_with_contents(tmp_path):
    entries = {"top.txt": b"top", "videos/a.avi": _payload(2, 3_000_000), "videos/deep/b.avi": b"b"}
    path = rar_writer.write_rar4(
        tmp_path / "in.rar",
        [RarEntry("videos", is_dir=True), RarEntry("empty_dir", is_dir=True), *entries.items()])
    target = tmp_path / "out" / "extracted"

    files = archive.extract_rar(str(path), str(target))

    assert files == sorted(entries)
    for name, data in entries.items():
        assert (target / name).read_bytes() == data
    assert (target / "empty_dir").is_dir()
    assert _all_files(target) == set(entries) | {archive.MARKER_NAME}
    assert os.listdir(tmp_path / "out") == ["extracted"]  # no temporary folder left behind


def test_nested_hmdb_style_archive(tmp_path):
    classes = {"brush_hair": {"brush_hair_clip0.avi": _payload(3, 5000), "brush_hair_clip1.avi": b"1"},
               "cartwheel": {"cartwheel_clip0.avi": _payload(4, 4000)}}
    inner_paths = [rar_writer.write_rar4(tmp_path / "inner" / f"{name}.rar", videos.items())
                   for name, videos in classes.items()]
    outer = rar_writer.write_rar4(
        tmp_path / "hmdb51_org.rar",
        [(os.path.basename(p), pathlib.Path(p).read_bytes()) for p in inner_paths])
    target = tmp_path / "hmdb51_org"

    files = archive.extract_rar(str(outer), str(target), nested=True)

    expected = sorted(f"{c}/{v}" for c, videos in classes.items() for v in videos)
    assert files == expected
    for name, videos in classes.items():
        assert not (target / f"{name}.rar").exists()
        for video, data in videos.items():
            assert (target / name / video).read_bytes() == data
    assert _all_files(target) == set(expected) | {archive.MARKER_NAME}

    # Without nested=True the inner archives are plain files.
    flat = archive.extract_rar(str(outer), str(tmp_path / "flat"))
    assert flat == ["brush_hair.rar", "cartwheel.rar"]


_UNSAFE_ENTRIES = {
    "parent": RarEntry("../evil.txt", b"evil"),
    "parent_deep": RarEntry("a/../../evil.txt", b"evil"),
    "absolute": RarEntry("/tmp/evil.txt", b"evil"),
    "windows_absolute": RarEntry("\\evil.txt", b"evil", host_os=rar_writer.HOST_WIN32),
    "windows_drive": RarEntry("C:\\evil.txt", b"evil", host_os=rar_writer.HOST_WIN32),
    "windows_parent": RarEntry("a\\..\\..\\evil.txt", b"evil", host_os=rar_writer.HOST_WIN32),
    "symlink": RarEntry("evil.txt", symlink_target="../../outside.txt"),
}


@pytest.mark.parametrize("kind", sorted(_UNSAFE_ENTRIES))
def test_refuses_unsafe_entry_and_writes_nothing(tmp_path, kind):
    bad = _UNSAFE_ENTRIES[kind]
    # A safe entry comes first: it must not be written either.
    path = rar_writer.write_rar4(tmp_path / "bad.rar", [("good.txt", b"good"), bad])
    target = tmp_path / "work" / "out"

    with pytest.raises(archive.UnsafeArchiveError) as excinfo:
        archive.extract_rar(str(path), str(target))

    message = str(excinfo.value)
    assert str(path) in message
    assert "evil.txt" in message
    assert isinstance(excinfo.value, ValueError)
    if kind == "symlink":
        assert "symlink" in message
    assert not target.exists()
    assert os.listdir(tmp_path / "work") == []
    assert _all_files(tmp_path) == {"bad.rar"}


def test_refuses_unsafe_entry_in_nested_archive(tmp_path):
    inner = rar_writer.write_rar4(tmp_path / "inner" / "kick.rar", [("ok.avi", b"x"), ("../../evil.avi", b"e")])
    outer = rar_writer.write_rar4(tmp_path / "outer.rar", [("kick.rar", pathlib.Path(inner).read_bytes()),
                                                          ("ok.txt", b"ok")])
    shutil.rmtree(tmp_path / "inner")
    target = tmp_path / "out"

    with pytest.raises(archive.UnsafeArchiveError, match=r"outer\.rar!kick\.rar.*evil\.avi"):
        archive.extract_rar(str(outer), str(target), nested=True)

    assert _all_files(tmp_path) == {"outer.rar"}


@pytest.mark.parametrize("name,expected", [("a/b.txt", "a/b.txt"), ("./a//b.txt", "a/b.txt"),
                                           ("dir/", "dir")])
def test_safe_entry_path_normalizes(name, expected):
    assert archive.safe_entry_path("x.rar", name) == expected


@pytest.mark.parametrize("name", ["", "/", "a\\b.txt", "D:evil", "a/../../b", "..", "x\x00y"])
def test_safe_entry_path_refuses(name):
    with pytest.raises(archive.UnsafeArchiveError, match=r"x\.rar"):
        archive.safe_entry_path("x.rar", name)


def test_rerun_reuses_extraction_and_redoes_it_when_archive_changes(tmp_path):
    path = tmp_path / "in.rar"
    rar_writer.write_rar4(path, [("a.txt", b"first"), ("b/c.txt", b"c")])
    target = tmp_path / "out"
    first = archive.extract_rar(str(path), str(target))
    extracted = target / "a.txt"
    inode, mtime = extracted.stat().st_ino, extracted.stat().st_mtime_ns
    marker = json.loads((target / archive.MARKER_NAME).read_text())
    assert marker["fingerprint"]["size"] == path.stat().st_size
    assert marker["files"] == first

    second = archive.extract_rar(str(path), str(target))

    assert second == first == ["a.txt", "b/c.txt"]
    assert extracted.stat().st_ino == inode and extracted.stat().st_mtime_ns == mtime
    assert extracted.read_bytes() == b"first"

    # A different archive (new size and mtime) replaces the stale extraction.
    rar_writer.write_rar4(path, [("a.txt", b"second!"), ("d.txt", b"d")])
    os.utime(path, ns=(mtime + 5_000_000_000, mtime + 5_000_000_000))
    third = archive.extract_rar(str(path), str(target))
    assert third == ["a.txt", "d.txt"]
    assert extracted.read_bytes() == b"second!"
    assert not (target / "b").exists()
    assert sorted(os.listdir(tmp_path)) == ["in.rar", "out"]


def test_refuses_to_replace_foreign_folder(tmp_path):
    path = rar_writer.write_rar4(tmp_path / "in.rar", [("a.txt", b"a")])
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")

    with pytest.raises(archive.ArchiveError, match="mine"):
        archive.extract_rar(str(path), str(target))

    assert _all_files(target) == {"notes.txt"}


def test_non_rar_and_truncated_files_raise_archive_error(tmp_path):
    not_rar = tmp_path / "fake.rar"
    not_rar.write_bytes(b"PK\x03\x04 this is not a rar archive" * 10)
    with pytest.raises(archive.ArchiveError, match="fake.rar"):
        archive.extract_rar(str(not_rar), str(tmp_path / "out1"))

    full = rar_writer.rar4_bytes([("a.txt", _payload(5, 1000)), ("b.txt", _payload(6, 1000))])
    truncated = tmp_path / "truncated.rar"
    truncated.write_bytes(full[: len(full) - 700])
    with pytest.raises(archive.ArchiveError, match="truncated.rar"):
        archive.extract_rar(str(truncated), str(tmp_path / "out2"))

    with pytest.raises(FileNotFoundError, match="missing.rar"):
        archive.extract_rar(str(tmp_path / "missing.rar"), str(tmp_path / "out3"))
    assert _all_files(tmp_path) == {"fake.rar", "truncated.rar"}


def test_corrupt_data_fails_crc_and_leaves_nothing(tmp_path):
    data = _payload(7, 2000)
    raw = bytearray(rar_writer.rar4_bytes([("ok.txt", b"ok"), ("video.avi", data)]))
    raw[raw.index(data) + 1000] ^= 0xFF  # flip one byte of the stored data
    path = tmp_path / "crc.rar"
    path.write_bytes(bytes(raw))

    with pytest.raises(archive.ArchiveError, match=r"crc\.rar.*video\.avi"):
        archive.extract_rar(str(path), str(tmp_path / "out"))

    assert _all_files(tmp_path) == {"crc.rar"}


def test_duplicate_and_clashing_entries_raise(tmp_path):
    path = rar_writer.write_rar4(tmp_path / "dup.rar", [("a", b"file"), ("a/b.txt", b"x")])
    with pytest.raises(archive.ArchiveError, match=r"dup\.rar"):
        archive.extract_rar(str(path), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_compressed_entry_without_backend_says_what_to_install(tmp_path):
    if archive.rar_backend_available() is not None:
        pytest.skip(f"a RAR backend ({archive.rar_backend_available()}) is installed; "
                    "this test covers machines without one")
    # Method 0x33 ("normal" compression): rarfile must hand this entry to an external tool.
    path = rar_writer.write_rar4(tmp_path / "packed.rar",
                                 [("stored.txt", b"s"), RarEntry("packed.avi", b"\x00" * 16, method=0x33)])
    target = tmp_path / "out"

    with pytest.raises(archive.ArchiveError) as excinfo:
        archive.extract_rar(str(path), str(target))

    message = str(excinfo.value)
    for needle in ("packed.rar", "packed.avi", "apt-get install unar",
                   "apt-get install libarchive-tools", "without any RAR tool"):
        assert needle in message
    assert _all_files(tmp_path) == {"packed.rar"}


def test_extraction_through_external_backend(tmp_path, monkeypatch):
    tool = archive.rar_backend_available()
    if tool is None:
        pytest.skip("no RAR backend installed (`apt-get install unar` or `libarchive-tools` "
                    "to run this test); STORED entries are covered by the other tests")
    assert shutil.which(tool) is not None
    # Make rarfile pipe even STORED entries through the tool, so the tool really runs.
    monkeypatch.setattr(rarfile, "FORCE_TOOL", True)
    entries = {"a.txt": b"through the tool", "d/b.bin": _payload(8, 200_000)}
    path = rar_writer.write_rar4(tmp_path / "tool.rar", entries.items())

    files = archive.extract_rar(str(path), str(tmp_path / "out"))

    assert files == sorted(entries)
    for name, data in entries.items():
        assert (tmp_path / "out" / name).read_bytes() == data
