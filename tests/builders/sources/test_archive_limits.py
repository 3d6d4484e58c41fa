"""RAR extraction within bounds: declared sizes against a cap and the free space before anything is written, bytes
counted while they stream (a header that lies stops there), and a finished identical extraction reused, never
replaced. Archives written byte by byte (tests/rar_writer.py) and rarfile's real sample archives."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import threading

import pytest
import rar_writer  # tests/rar_writer.py, on sys.path through tests/conftest.py
import rarfile
from rar_writer import RarEntry
import rar_samples  # tests/rar_samples.py

from vidvol.builders.sources import archive
from vidvol.builders.sources import archive_entries


def _payload(seed: int, size: int) -> bytes:
    """Deterministic, non-repeating bytes."""
    return bytes((i * 31 + seed * 7 + (i >> 8)) % 251 for i in range(size))


def _all_files(root: pathlib.Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    monkeypatch.delenv(archive.BACKEND_ENV, raising=False)
    monkeypatch.delenv(archive.MAX_BYTES_ENV, raising=False)


@pytest.fixture(params=archive.BACKENDS)
def backend(request):
    if request.param == "libarchive" and archive.libarchive_version() is None:
        pytest.skip("the libarchive backend cannot load here (`pip install libarchive-c`)")
    return request.param


@pytest.mark.parametrize("setting,expected", [("64G", 64 << 30), ("500m", 500 << 20), ("1.5GiB", 3 << 29),
                                              ("123", 123), ("none", None), (2048, 2048)])
def test_the_cap_setting(setting, expected):
    assert archive.max_bytes_setting(setting)[0] == expected


def test_the_cap_defaults_to_64_gib_and_a_bad_setting_is_refused(monkeypatch):
    assert archive.max_bytes_setting()[0] == archive.DEFAULT_MAX_BYTES == 64 << 30
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match="VIDVOL_ARCHIVE_MAX_BYTES='lots': expected a size"):
        archive.max_bytes_setting()


def test_declared_sizes_over_the_cap_are_refused_before_writing(tmp_path, backend, monkeypatch):
    path = rar_writer.write_rar4(tmp_path / "big.rar", [("a.bin", _payload(1, 700_000)), ("b.bin", _payload(2, 700_000))])
    with pytest.raises(archive.ArchiveError) as e:
        archive.extract_rar(path, str(tmp_path / "out"), backend=backend, max_bytes="1M")
    message = str(e.value)
    assert message.startswith(f"{path}: its entries declare 1.3 MiB (1400000 bytes), over the extraction cap of "
                              "1.0 MiB (1048576 bytes); nothing of it was written"), message
    assert "VIDVOL_ARCHIVE_MAX_BYTES" in message
    assert _all_files(tmp_path) == {"big.rar"}
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "2M")  # the environment raises it
    assert archive.extract_rar(path, str(tmp_path / "out"), backend=backend) == ["a.bin", "b.bin"]


def test_declared_sizes_over_the_free_space_are_refused_before_writing(tmp_path, backend):
    """A header claiming a petabyte (64-bit sizes) with no cap: the free space refuses it."""
    path = rar_writer.write_rar4(tmp_path / "claims.rar", [("ok.txt", b"ok"),
                                                           RarEntry("huge.bin", b"small", declared_size=1 << 50)])
    with pytest.raises(archive.ArchiveError, match=r"declare 1\.0 PiB .* but the file system of .* has only .* free; "
                                                   r"nothing of it was written"):
        archive.extract_rar(path, str(tmp_path / "out"), backend=backend, max_bytes="none")
    assert _all_files(tmp_path) == {"claims.rar"}


def test_an_entry_holding_more_than_its_header_declares_stops_there(tmp_path):
    """libarchive streams a STORED entry's packed bytes whatever its header says: counting stops the entry at the
    declared size, before writing past it, and everything is removed."""
    if archive.libarchive_version() is None:
        pytest.skip("needs the libarchive backend (`pip install libarchive-c`)")
    path = rar_writer.write_rar4(tmp_path / "lies.rar", [("first.txt", b"fine"),
                                                         RarEntry("bomb.bin", _payload(3, 3_000_000), declared_size=1000)])
    for choice in ("libarchive", "auto"):  # auto: rarfile reads only 1000 bytes and fails the CRC, then libarchive
        with pytest.raises(archive.ArchiveError, match=r"entry 'bomb\.bin' holds more than the 1000 bytes its header "
                                                       r"declares; stopped before writing past that"):
            archive.extract_rar(path, str(tmp_path / "out"), backend=choice)
        assert _all_files(tmp_path) == {"lies.rar"}


def test_streaming_stops_at_the_cap_whatever_was_declared(tmp_path):
    """The count itself: bytes past the cap are never written, and an undone attempt gives its bytes back."""
    budget = archive_entries.Budget(1000, "raise it")
    out = archive_entries.Output(str(tmp_path / "dest"), "x.rar", budget)
    out.mkdir("")
    with out.create("a.bin", "a.bin") as f:  # no declared size (as for a backend that gives none)
        f.write(b"a" * 600)
        with pytest.raises(archive.ArchiveError, match=r"x\.rar: extraction stopped in entry 'a\.bin' at the cap of 1000 bytes"):
            f.write(b"a" * 600)
    assert (tmp_path / "dest" / "a.bin").stat().st_size == 600 and budget.written == 600
    out.rollback()
    assert budget.written == 0 and not (tmp_path / "dest").exists()


def test_nested_archives_count_against_one_cap(tmp_path):
    """The outer archive's inner .rar files and what they hold share the cap: an inner archive whose declared size
    passes what is left is refused before it is written, and nothing stays."""
    inner = rar_writer.write_rar4(tmp_path / "inner" / "kick.rar", [("clip.avi", _payload(4, 600_000))])
    outer = rar_writer.write_rar4(tmp_path / "outer.rar", [("kick.rar", pathlib.Path(inner).read_bytes())])
    shutil.rmtree(tmp_path / "inner")
    with pytest.raises(archive.ArchiveError, match=r"outer\.rar!kick\.rar: its entries declare .* after the .* already "
                                                   r"extracted"):
        archive.extract_rar(outer, str(tmp_path / "out"), nested=True, max_bytes=1_000_000)
    assert _all_files(tmp_path) == {"outer.rar"}
    assert archive.extract_rar(outer, str(tmp_path / "out"), nested=True, max_bytes=1_300_000) == ["kick/clip.avi"]


@pytest.mark.parametrize("sample,total", [("rar3-subdirs.rar", 25), ("rar5-crc.rar", 4096)])
def test_real_archives_are_held_to_the_cap(tmp_path, sample, total):
    rar = rar_samples.samples_dir() / sample
    if sample == "rar5-crc.rar" and archive.rar_backend_available() is None and archive.libarchive_version() is None:
        pytest.skip("its compressed entry needs unar/unrar or libarchive")
    with pytest.raises(archive.ArchiveError, match=rf"declare (.* \()?{total} bytes\)?, over the extraction cap of (.* \()?{total - 1} bytes"):
        archive.extract_rar(str(rar), str(tmp_path / "out"), max_bytes=total - 1)
    assert not (tmp_path / "out").exists()
    files = archive.extract_rar(str(rar), str(tmp_path / "out"), max_bytes=total)
    assert sum((tmp_path / "out" / f).stat().st_size for f in files) == total


def test_a_copied_archive_with_a_new_mtime_reuses_the_extraction(tmp_path):
    path = rar_writer.write_rar4(tmp_path / "in.rar", [("a.txt", b"first"), ("b.txt", b"b")])
    target = tmp_path / "out"
    archive.extract_rar(path, str(target))
    inode = (target / "a.txt").stat().st_ino
    os.remove(path)
    rar_writer.write_rar4(path, [("a.txt", b"first"), ("b.txt", b"b")])  # the same bytes, written again
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert archive.extract_rar(path, str(target)) == ["a.txt", "b.txt"]
    assert (target / "a.txt").stat().st_ino == inode  # reused, not extracted again
    marker = json.loads((target / archive.MARKER_NAME).read_text())
    assert marker["fingerprint"]["mtime_ns"] == 1_000_000_000  # next time the fast check matches
    rar_writer.write_rar4(path, [("a.txt", b"FIRST"), ("b.txt", b"b")])  # same size, other bytes: extracted again
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    archive.extract_rar(path, str(target))
    assert (target / "a.txt").read_bytes() == b"FIRST"


def test_a_finished_identical_extraction_is_kept_not_replaced(tmp_path):
    """What a second process does when it finishes extracting after a first one did: it keeps the first one's folder
    (a build may be reading from it) and drops its own."""
    path = rar_writer.write_rar4(tmp_path / "in.rar", [("a.txt", b"a"), ("d/b.txt", b"b")])
    target, late = tmp_path / "out", tmp_path / "late"
    archive.extract_rar(path, str(target))
    archive.extract_rar(path, str(late))  # the second process's finished temporary folder
    inode = (target / "a.txt").stat().st_ino
    marker = json.loads((late / archive.MARKER_NAME).read_text())
    kept = archive._move_into_place(str(late), str(target), marker["fingerprint"], marker["sha256"])
    assert kept == ["a.txt", "d/b.txt"]
    assert (target / "a.txt").stat().st_ino == inode and not late.exists()


def test_two_threads_extracting_one_archive_share_one_result(tmp_path):
    path = rar_writer.write_rar4(tmp_path / "in.rar", [(f"f{i}.bin", _payload(i, 400_000)) for i in range(12)])
    target = tmp_path / "out"
    start = threading.Barrier(2)
    seen: list[tuple[list[str], int]] = []

    def extract() -> None:
        start.wait()
        files = archive.extract_rar(path, str(target))
        seen.append((files, (target / "f0.bin").stat().st_ino))

    threads = [threading.Thread(target=extract) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(seen) == 2 and seen[0] == seen[1], seen  # the same files, and the first result was never replaced
    assert sorted(os.listdir(tmp_path)) == ["in.rar", "out"]  # no temporary or stale folder left
    assert rarfile.RarFile(path).read("f3.bin") == (target / "f3.bin").read_bytes()
