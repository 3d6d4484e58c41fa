"""Safe RAR extraction on every backend, over archives written byte by byte (tests/rar_writer.py)
and over real RAR 3.x/RAR5 archives that rarfile's authors made with WinRAR (`make venv` fetches
them from rarfile's source distribution on PyPI; the tests never reach the network)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys
import zlib

import pytest
import rar_samples  # tests/rar_samples.py, on sys.path through tests/conftest.py
import rar_writer  # tests/rar_writer.py, on sys.path through tests/conftest.py
import rarfile
from rar_writer import RarEntry

from vidvol.builders.sources import archive
from vidvol.builders.sources import archive_backends
from vidvol.builders.sources import archive_entries



@pytest.fixture(autouse=True)
def _auto_backend(monkeypatch):
    """Tests choose their backend themselves; a VIDVOL_RAR_BACKEND in the caller's shell must not."""
    monkeypatch.delenv(archive.BACKEND_ENV, raising=False)


@pytest.fixture(params=archive.BACKENDS)
def backend(request, monkeypatch):
    """Each backend in turn, chosen the way a user would: through VIDVOL_RAR_BACKEND."""
    if request.param == "libarchive" and archive.libarchive_version() is None:
        pytest.skip("the libarchive backend cannot load here: `pip install libarchive-c` and the "
                    "libarchive13 system library (`apt-get install libarchive13`) run these tests")
    monkeypatch.setenv(archive.BACKEND_ENV, request.param)
    return request.param


def _set_rar_tools(monkeypatch, **tools: str) -> None:
    """Make rarfile see only `tools` ({"unar": path} etc.) as its external programs, none else."""
    for variable in ("UNRAR_TOOL", "UNAR_TOOL", "SEVENZIP_TOOL", "SEVENZIP2_TOOL", "BSDTAR_TOOL"):
        monkeypatch.setattr(rarfile, variable, "vidvol-test-no-such-tool")
    for name, path in tools.items():
        monkeypatch.setattr(rarfile, f"{name.upper()}_TOOL", path)
    monkeypatch.setattr(rarfile, "CURRENT_SETUP", None)  # rarfile's cache of its chosen tool


@pytest.fixture
def no_rar_tool(monkeypatch):
    """rarfile finds no external tool, whatever this machine has installed."""
    _set_rar_tools(monkeypatch)
    assert archive.rar_backend_available() is None


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


def test_extracts_files_and_folders_with_contents(tmp_path, backend):
    entries = {"top.txt": b"top", "videos/a.avi": _payload(2, 3_000_000), "videos/deep/b.avi": b"b",
               "empty.txt": b""}
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


def test_nested_hmdb_style_archive(tmp_path, backend):
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
    "char_device": RarEntry("evil.txt", mode=rar_writer.S_IFCHR | 0o644),
    "fifo": RarEntry("evil.txt", mode=rar_writer.S_IFIFO | 0o644),
}


@pytest.mark.parametrize("kind", sorted(_UNSAFE_ENTRIES))
def test_refuses_unsafe_entry_and_writes_nothing(tmp_path, kind, backend):
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
    if kind in ("char_device", "fifo"):
        assert "special file" in message
    assert not target.exists()
    assert os.listdir(tmp_path / "work") == []
    assert _all_files(tmp_path) == {"bad.rar"}


def test_refuses_unsafe_entry_in_nested_archive(tmp_path, backend):
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
    assert archive_entries.safe_entry_path("x.rar", name) == expected


@pytest.mark.parametrize("name", ["", "/", "a\\b.txt", "D:evil", "a/../../b", "..", "x\x00y"])
def test_safe_entry_path_refuses(name):
    with pytest.raises(archive.UnsafeArchiveError, match=r"x\.rar"):
        archive_entries.safe_entry_path("x.rar", name)


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


def test_non_rar_and_truncated_files_raise_archive_error(tmp_path, backend):
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


def test_corrupt_data_fails_crc_and_leaves_nothing(tmp_path, backend):
    # libarchive does not check the CRC of STORED RAR 3.x entries: the libarchive backend must.
    data = _payload(7, 2000)
    raw = bytearray(rar_writer.rar4_bytes([("ok.txt", b"ok"), ("video.avi", data)]))
    raw[raw.index(data) + 1000] ^= 0xFF  # flip one byte of the stored data
    path = tmp_path / "crc.rar"
    path.write_bytes(bytes(raw))

    with pytest.raises(archive.ArchiveError, match=r"(?s)crc\.rar.*video\.avi.*CRC"):
        archive.extract_rar(str(path), str(tmp_path / "out"))

    assert _all_files(tmp_path) == {"crc.rar"}


def test_duplicate_and_clashing_entries_raise(tmp_path, backend):
    path = rar_writer.write_rar4(tmp_path / "dup.rar", [("a", b"file"), ("a/b.txt", b"x")])
    with pytest.raises(archive.ArchiveError, match=r"dup\.rar"):
        archive.extract_rar(str(path), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- choosing a backend

def test_backend_argument_overrides_the_environment(tmp_path, monkeypatch, no_rar_tool):
    path = rar_writer.write_rar4(tmp_path / "in.rar", [("a.txt", b"a")])
    monkeypatch.setenv(archive.BACKEND_ENV, "libarchive")
    monkeypatch.setattr(archive_backends, "_load_libarchive", _libarchive_missing)

    assert archive.extract_rar(str(path), str(tmp_path / "out1"), backend="rarfile") == ["a.txt"]
    with pytest.raises(archive.ArchiveError, match=r"(?s)Only the libarchive backend was tried"):
        archive.extract_rar(str(path), str(tmp_path / "out2"))
    assert _all_files(tmp_path) == {"in.rar", "out1/a.txt", f"out1/{archive.MARKER_NAME}"}


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_unknown_backend_is_refused_before_anything_happens(tmp_path, monkeypatch, where):
    path = rar_writer.write_rar4(tmp_path / "in.rar", [("a.txt", b"a")])
    kwargs = {"backend": "unrar"} if where == "argument" else {}
    if where == "environment":
        monkeypatch.setenv(archive.BACKEND_ENV, "unrar")
    with pytest.raises(ValueError, match=r"unknown RAR backend 'unrar'.*auto, rarfile, libarchive"):
        archive.extract_rar(str(path), str(tmp_path / "out"), **kwargs)
    assert _all_files(tmp_path) == {"in.rar"}


def _libarchive_missing():
    raise archive_entries.BackendFailed("the libarchive-c package is not installed", need="libarchive")


def test_no_backend_at_all_says_what_to_install(tmp_path, monkeypatch, no_rar_tool):
    """Neither an external tool nor libarchive-c: the message names the archive, the entry, what
    each backend said and what to install, and nothing is written."""
    monkeypatch.setattr(archive_backends, "_load_libarchive", _libarchive_missing)
    assert archive.available_backends() == {"rarfile": None, "libarchive": None}
    # Method 0x33 ("normal" compression): rarfile must hand this entry to an external tool.
    path = rar_writer.write_rar4(tmp_path / "packed.rar",
                                 [("stored.txt", b"s"), RarEntry("packed.avi", b"\x00" * 16, method=0x33)])

    with pytest.raises(archive.ArchiveError) as excinfo:
        archive.extract_rar(str(path), str(tmp_path / "out"))

    message = str(excinfo.value)
    for needle in (f"{path}: no RAR backend could extract it", "rarfile (no external tool):",
                   "'packed.avi'", "libarchive: the libarchive-c package is not installed",
                   "apt-get install unar", "apt-get install libarchive-tools",
                   "pip install libarchive-c", "libarchive13", "without any RAR tool"):
        assert needle in message
    assert _all_files(tmp_path) == {"packed.rar"}


def test_compressed_entry_libarchive_cannot_decode_reports_both_backends(tmp_path, no_rar_tool):
    if archive.libarchive_version() is None:
        pytest.skip("needs the libarchive backend (`pip install libarchive-c`)")
    # The "compressed" data is 16 raw zero bytes: no decoder can make sense of them.
    path = rar_writer.write_rar4(tmp_path / "packed.rar",
                                 [("stored.txt", b"s"), RarEntry("packed.avi", b"\x00" * 16, method=0x33)])

    with pytest.raises(archive.ArchiveError) as excinfo:
        archive.extract_rar(str(path), str(tmp_path / "out"))

    message = str(excinfo.value)
    assert f"libarchive {archive.libarchive_version()}: " in message
    assert "packed.avi" in message.split("libarchive ", 1)[1]
    assert "apt-get install unar" in message and "pip install" not in message
    assert _all_files(tmp_path) == {"packed.rar"}


# ---------------------------------------------------------------- rarfile over an external tool
# Machines without unar/bsdtar still run rarfile's tool path: a stand-in for each tool, written
# over libarchive-c, is put where rarfile looks. It takes the tool's command line as rarfile
# builds it (bsdtar's after _BsdtarSetup's repair) and fails, as bsdtar would, on rarfile 4.5's
# own bsdtar command line.

_STUB = '''#!{python}
"""Stand-in for `{tool}` (tests/builders/sources/test_archive.py): prints entries' data through libarchive."""
import os, re, sys
import libarchive
from libarchive import ffi, read

tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["VIDVOL_STUB_LOG"], "a", encoding="utf-8") as log:
    log.write(tool + " " + " ".join(args) + "\\n")
if args in (["-version"], ["--version"]):
    sys.exit(0)
if tool == "unar":  # unar -q -o - -p '' -- ARCHIVE NAME
    path, *names = args[args.index("--") + 1:]
else:  # bsdtar -x --to-stdout -f ARCHIVE -- PATTERN
    path, rest = args[args.index("-f") + 1], args[args.index("-f") + 2:]
    names = [re.sub(r"\\\\(.)", r"\\1", name) for name in rest if name != "--"]
if not os.path.isfile(path):
    sys.exit(f"{tool}: cannot open {{path!r}}")
with read.new_archive_read("rar", "none") as archive_p:
    ffi.get_read_format_function("rar5")(archive_p)
    ffi.read_open_filename_w(archive_p, path, 65536)
    for entry in read.ArchiveRead(archive_p):
        if entry.pathname in names or not names:  # no name: rarfile made a one-entry archive
            for block in entry.get_blocks():
                sys.stdout.buffer.write(block)
'''


@pytest.fixture(params=["unar", "bsdtar"])
def stub_tool(request, tmp_path, monkeypatch):
    """A stand-in `unar` or `bsdtar` as rarfile's only tool; returns the log of its command lines."""
    if archive.libarchive_version() is None:
        pytest.skip("the stand-in tools read archives through libarchive-c")
    tool = tmp_path / "bin" / request.param
    tool.parent.mkdir()
    tool.write_text(_STUB.format(python=sys.executable, tool=request.param))
    tool.chmod(0o755)
    log = tmp_path / "bin" / "calls.log"
    log.touch()
    monkeypatch.setenv("VIDVOL_STUB_LOG", str(log))
    _set_rar_tools(monkeypatch, **{request.param: str(tool)})
    assert archive.rar_backend_available() == str(tool)
    return log


def _tool_calls(log: pathlib.Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "version" not in line]


def test_rarfile_pipes_entries_through_the_external_tool(tmp_path, monkeypatch, stub_tool):
    # Make rarfile pipe even STORED entries through the tool, so the tool really runs.
    monkeypatch.setattr(rarfile, "FORCE_TOOL", True)
    entries = {"a.txt": b"through the tool", "d/b [1]*.bin": _payload(8, 200_000)}
    path = rar_writer.write_rar4(tmp_path / "tool.rar", entries.items())

    files = archive.extract_rar(str(path), str(tmp_path / "out"), backend="rarfile")

    assert files == sorted(entries)
    for name, data in entries.items():
        assert (tmp_path / "out" / name).read_bytes() == data
    assert len(_tool_calls(stub_tool)) == len(entries)


def test_rarfile_checks_the_crc_of_what_the_tool_returns(tmp_path, monkeypatch, stub_tool):
    monkeypatch.setattr(rarfile, "FORCE_TOOL", True)
    data = _payload(9, 3000)
    raw = bytearray(rar_writer.rar4_bytes([("video.avi", data)]))
    raw[raw.index(data) + 10] ^= 0xFF
    path = tmp_path / "crc.rar"
    path.write_bytes(bytes(raw))

    with pytest.raises(archive.ArchiveError, match=r"(?s)crc\.rar.*rarfile \(over .*video\.avi.*CRC"):
        archive.extract_rar(str(path), str(tmp_path / "out"), backend="rarfile")
    assert _tool_calls(stub_tool)
    assert {p for p in _all_files(tmp_path) if not p.startswith("bin/")} == {"crc.rar"}


def test_auto_tries_the_external_tool_before_libarchive(samples, tmp_path, stub_tool, caplog):
    """seektest.rar: non-solid RAR 3.x with one compressed entry; rarfile's tool decodes it."""
    caplog.set_level("INFO", logger=archive.__name__)

    files = archive.extract_rar(str(samples / "seektest.rar"), str(tmp_path / "out"))

    assert files == ["stest1.txt", "stest2.txt"]
    assert "Extracted 2 files from" in caplog.text and "with the rarfile backend" in caplog.text
    assert "libarchive" not in caplog.text
    assert len(_tool_calls(stub_tool)) == 1  # for stest1.txt; rarfile itself reads STORED stest2.txt
    _assert_matches_listing(samples / "seektest.rar", tmp_path / "out")


# ---------------------------------------------------------------- real archives (rarfile's samples)

def _samples_dir() -> pathlib.Path:
    """Folder of rarfile's sample archives (`rar_samples.samples_dir`); missing, every test that needs it FAILS."""
    return rar_samples.samples_dir()


@pytest.fixture
def samples() -> pathlib.Path:
    return _samples_dir()


def _exp_listing(rar: pathlib.Path) -> dict[str, dict[str, object]]:
    """{name: {kind, size, method, crc, blake2sp}} from rarfile's own dump of `rar` (its .exp file)."""
    entries: dict[str, dict[str, object]] = {}
    current: dict[str, object] = {}
    for line in (rar.parent / f"{rar.name}.exp").read_text(encoding="utf-8").splitlines():
        header = re.match(r"(?:R5_)?FILE: .* is=(\S+)", line)
        if header:
            current = {"kind": {"F--": "file", "-D-": "dir"}.get(header.group(1), "link")}
            continue
        for key, pattern, convert in (("size", r"\bdec=(\d+)", int),
                                      ("method", r"\b(?:cmp_)?meth=(\d+)", int),
                                      ("crc", r"\bcrc=0x([0-9a-f]+)", lambda v: int(v, 16)),
                                      ("blake2sp", r"\bblake2sp=([0-9a-f]+)", bytes.fromhex)):
            found = re.search(pattern, line)
            if found and current:
                current[key] = convert(found.group(1))
        name = re.match(r"\s+name=(.*)$", line)
        if name and current:
            entries[name.group(1).rstrip("/")] = current
    return entries


def _assert_matches_listing(rar: pathlib.Path, target: pathlib.Path) -> None:
    """Extracted files are exactly the archive's files, with the sizes and checksums it lists."""
    listing = _exp_listing(rar)
    files = {name for name, entry in listing.items() if entry["kind"] == "file"}
    assert _all_files(target) == files | {archive.MARKER_NAME}
    for name in files:
        data = (target / name).read_bytes()
        entry = listing[name]
        assert len(data) == entry["size"], name
        if entry.get("crc"):
            assert zlib.crc32(data) == entry["crc"], name
        if entry.get("blake2sp"):
            assert rarfile.Blake2SP(data).digest() == entry["blake2sp"], name
    for name, entry in listing.items():
        if entry["kind"] == "dir":
            assert (target / name).is_dir(), name


def _compressed(rar: pathlib.Path) -> bool:
    return any(entry.get("method", 0) not in (0, 48) for entry in _exp_listing(rar).values())


# Text of the sub-folder samples' files, from rarfile's test/test_extract.py (check_subdir).
_SUBDIR_TEXTS = {"sub/dir1/file1.txt": b"file1\n", "sub/dir2/file2.txt": b"file2\n",
                 "sub/with space/long fn.txt": b"long fn\n", "sub/üȵĩöḋè/file.txt": b"file\n"}
_STEST_CRC = 0xC5B7E6A2  # stest1.txt/stest2.txt of rarfile's samples, 2048 bytes each

_READABLE_SAMPLES = {
    "rar3-subdirs.rar": "RAR 3.x, sub-folders, spaces and non-ASCII names (STORED)",
    "rar5-subdirs.rar": "RAR5, the same files",
    "seektest.rar": "RAR 3.x, not solid, one compressed entry",
    "rar5-crc.rar": "RAR5, compressed and STORED entries with CRC32",
    "rar5-blake.rar": "RAR5 with BLAKE2sp checksums instead of CRC32",
    "rar5-solid.rar": "solid RAR5 (libarchive reads it)",
}


@pytest.mark.parametrize("sample", sorted(_READABLE_SAMPLES))
@pytest.mark.parametrize("choice", ["auto", *archive.BACKENDS])
def test_extracts_real_archives(samples, tmp_path, monkeypatch, sample, choice):
    if choice == "libarchive" and archive.libarchive_version() is None:
        pytest.skip("the libarchive backend cannot load here (`pip install libarchive-c`)")
    monkeypatch.setenv(archive.BACKEND_ENV, choice)
    rar = samples / sample
    target = tmp_path / "out"

    if choice == "rarfile" and _compressed(rar) and archive.rar_backend_available() is None:
        # rarfile alone decodes STORED entries only.
        with pytest.raises(archive.ArchiveError, match=r"(?s)no external RAR tool.*apt-get install unar"):
            archive.extract_rar(str(rar), str(target))
        assert not target.exists()
        return

    files = archive.extract_rar(str(rar), str(target))

    assert files == sorted(name for name, e in _exp_listing(rar).items() if e["kind"] == "file")
    _assert_matches_listing(rar, target)
    if "subdirs" in sample:
        assert {name: (target / name).read_bytes() for name in files} == _SUBDIR_TEXTS
        assert (target / "sub" / "empty").is_dir()
    else:
        assert all(zlib.crc32((target / name).read_bytes()) == _STEST_CRC for name in files)


def test_solid_rar3_without_unar_says_to_install_it(samples, tmp_path, no_rar_tool):
    if archive.libarchive_version() is None:
        pytest.skip("needs the libarchive backend (`pip install libarchive-c`)")
    rar = samples / "rar3-solid.rar"

    with pytest.raises(archive.ArchiveError) as excinfo:
        archive.extract_rar(str(rar), str(tmp_path / "out"))

    message = str(excinfo.value)
    assert message.startswith(f"{rar}: no RAR backend could extract it")
    assert "rarfile (no external tool): 2 entries are RAR-compressed" in message
    assert "RAR solid archive support unavailable" in message  # what libarchive said
    assert "cannot decompress solid RAR 3.x archives: install unar (`apt-get install unar`)" in message
    assert "libarchive-tools" not in message  # bsdtar is libarchive: no help for solid RAR 3.x
    assert _all_files(tmp_path) == set()


def test_solid_rar3_with_this_machines_tools(samples, tmp_path):
    """With unar or unrar installed, rarfile extracts solid RAR 3.x; without, the error says so."""
    rar = samples / "rar3-solid.rar"
    tool = archive.rar_backend_available()
    if tool is not None and os.path.basename(tool) != "bsdtar":
        assert archive.extract_rar(str(rar), str(tmp_path / "out")) == ["stest1.txt", "stest2.txt"]
        _assert_matches_listing(rar, tmp_path / "out")
    else:
        with pytest.raises(archive.ArchiveError, match=r"(?s)rar3-solid\.rar.*apt-get install unar"):
            archive.extract_rar(str(rar), str(tmp_path / "out"))
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sample,entry", [
    ("rar5-evil-symlink-traversal.rar", "up"),  # symlink to '..', then 'up/pwned.txt' through it
    ("rar3-symlink-unix.rar", "data_link"),
    ("rar5-symlink-unix.rar", "data_link"),
    ("rar5-symlink-win.rar", "links/bad_link"),
    ("rar5-hlink.rar", "stest2.txt"),  # hard link to stest1.txt
])
def test_refuses_real_archives_with_links(samples, tmp_path, backend, sample, entry):
    rar = samples / sample
    target = tmp_path / "extract" / "out"

    with pytest.raises(archive.UnsafeArchiveError, match=f"{re.escape(str(rar))}: refusing entry '{entry}'"):
        archive.extract_rar(str(rar), str(target))

    assert _all_files(tmp_path) == set()
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize("sample,reason", [("rar5-psw.rar", "is encrypted"),
                                           ("rar5-hpsw.rar", "password-protected"),
                                           ("rar3-comment-hpsw.rar", "password-protected")])
def test_refuses_encrypted_real_archives(samples, tmp_path, backend, sample, reason):
    with pytest.raises(archive.ArchiveError) as excinfo:
        archive.extract_rar(str(samples / sample), str(tmp_path / "out"))

    message = str(excinfo.value)
    assert sample in message
    assert reason in message or "Password-protected archives are not supported" in message
    assert _all_files(tmp_path) == set()


def test_rar5_file_copies(samples, tmp_path):
    """rar5-dups.rar: eight entries are RAR5 file copies of stest1.txt, which libarchive would
    write as empty files; only rarfile (with a tool) reproduces them."""
    rar = samples / "rar5-dups.rar"
    if archive.libarchive_version() is not None:
        with pytest.raises(archive.ArchiveError,
                           match=r"(?s)stest2\.txt' is a RAR5 file copy.*apt-get install unar"):
            archive.extract_rar(str(rar), str(tmp_path / "out1"), backend="libarchive")
        assert _all_files(tmp_path) == set()
    if archive.rar_backend_available() is not None:
        files = archive.extract_rar(str(rar), str(tmp_path / "out2"))
        assert files == [f"stest{i}.txt" for i in range(1, 10)]
        assert all(zlib.crc32((tmp_path / "out2" / name).read_bytes()) == _STEST_CRC for name in files)
