"""A hostile video corpus, written at test time: the files real collections (Kinetics-size, scraped) hold.

`write_corpus(folder)` writes one file per case into `folder` and returns `{file name: Case}`. The
OpenCV cases need nothing else; the ffmpeg cases (10-bit HEVC, rotation metadata, VP9/WebM, VFR,
audio-only, a truncated MP4) use the encoder named by `write_corpus(..., ffmpeg=)`: `ENCODERS` has the
`ffmpeg` on PATH (a distribution's, such as Debian 12's 5.1) and the static binary of the `imageio-ffmpeg`
wheel (the `test` extra), and `FFMPEG` is the first of them. What a file holds is read back from the file
(`ffmpeg_autorotated_frame`), never assumed from the flags that wrote it. Names are `os.fsdecode`d.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import subprocess

import cv2
import numpy as np

from vidvol.testing import samples


def imageio_ffmpeg_exe() -> str | None:
    """imageio-ffmpeg's bundled static binary (libx264, libx265, libvpx-vp9, aac); None without the wheel or a binary."""
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError:  # the wheel has no binary for this platform
        return None


# Each encoder the corpus can be written with: "system" (`ffmpeg` on PATH) and "imageio" (the wheel's); None if absent.
ENCODERS: dict[str, str | None] = {"system": shutil.which("ffmpeg"), "imageio": imageio_ffmpeg_exe()}


def find_ffmpeg() -> str | None:
    """`ffmpeg` on PATH, else imageio-ffmpeg's bundled static binary; None if neither."""
    return ENCODERS["system"] or ENCODERS["imageio"]


FFMPEG = find_ffmpeg()
LATIN1_NAME = os.fsdecode(b"caf\xe9.avi")  # bytes that are not UTF-8, as old archives and Windows shares give
LONG_FRAMES = 1500  # real frames of the video whose header claims CLAIMED_FRAMES
CLAIMED_FRAMES = 1_000_000


@dataclasses.dataclass(frozen=True)
class Case:
    """What a corpus file should become: "example" or "skip" (with a word its skip reason contains)."""

    outcome: str
    reason: str = ""  # for a skip: a fragment of the reason, lower case
    frames: int | None = None  # for an example: the real frame count the example must report


def _opencv_video(path: str, num_frames: int, *, size=(160, 120), fourcc="MJPG", fps=25.0, gray=False) -> str:
    """Footage-like frames through cv2.VideoWriter (gray: single-channel frames, isColor=False)."""
    width, height = size
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*fourcc), fps, (width, height), not gray)
    assert writer.isOpened(), f"cv2.VideoWriter cannot write {path} ({fourcc})"
    try:
        for i in range(num_frames):
            bgr = cv2.cvtColor(samples.make_frame(i % 50, height=height, width=width, content="footage"), cv2.COLOR_RGB2BGR)
            writer.write(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY) if gray else bgr)
    finally:
        writer.release()
    return path


def claim_frames(path: str, claimed: int) -> None:
    """Patches an AVI's headers to claim `claimed` frames: `avih` dwTotalFrames, each `strh` dwLength, `dmlh`."""
    data = bytearray(open(path, "rb").read())
    patched = 0
    for tag, offset in ((b"avih", 16), (b"strh", 32), (b"dmlh", 0)):
        at = data.find(tag)
        while at >= 0:
            struct.pack_into("<I", data, at + 8 + offset, claimed)
            patched += 1
            at = data.find(tag, at + 4)
    assert patched >= 2, f"{path}: no AVI header to patch"
    with open(path, "wb") as f:
        f.write(data)


def _run_ffmpeg(exe: str, *args: str) -> bytes:
    return subprocess.run([exe, "-hide_banner", "-loglevel", "error", "-y", *args], check=True, timeout=120,
                          capture_output=True).stdout


def ffmpeg_version(exe: str) -> str:
    """The first line of `exe -version` (say, "ffmpeg version 5.1.6-0+deb12u1 ...")."""
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30, check=True).stdout
    return out.splitlines()[0] if out else exe


def ffmpeg_autorotated_frame(exe: str, path: str, width: int, height: int) -> np.ndarray:
    """Frame 0 of `path` as ffmpeg itself shows it (display matrix applied, as players do): (height, width, 3) RGB."""
    raw = _run_ffmpeg(exe, "-i", path, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-")
    assert len(raw) == width * height * 3, f"{path}: ffmpeg gave {len(raw)} bytes, not {width}x{height}x3"
    return np.frombuffer(raw, np.uint8).reshape(height, width, 3)


def display_rotation(exe: str, path: str, upright: np.ndarray) -> int:
    """How many times np.rot90 turns `upright` (frame 0 without rotation) into ffmpeg's autorotated frame 0 of `path`.

    Read from the file, whatever wrote it: ffmpeg 5.1's `rotate=270` tag and ffmpeg 7's `-display_rotation 90`
    give display matrices of opposite sign, and both are shown as ffmpeg (and any player) shows them.
    """
    height, width = upright.shape[:2]
    best = None
    for k in range(4):
        turned = np.rot90(upright, k)
        try:
            shown = ffmpeg_autorotated_frame(exe, path, turned.shape[1], turned.shape[0])
        except AssertionError:
            continue
        error = float(np.abs(shown.astype(np.int16) - turned).mean())
        if best is None or error < best[0]:
            best = (error, k)
    assert best is not None and best[0] < 8.0, f"{path}: ffmpeg's autorotated frame 0 is no turn of the upright one ({best})"
    return best[1]


def write_corpus(folder: str, ffmpeg: str | None = FFMPEG) -> dict[str, Case]:
    """Writes every case this machine can make into `folder`, the ffmpeg cases with `ffmpeg`; returns `{file name: Case}`."""
    os.makedirs(folder, exist_ok=True)

    def _ffmpeg(*args: str) -> None:
        _run_ffmpeg(ffmpeg, *args)

    cases: dict[str, Case] = {}

    def at(name: str) -> str:
        return os.path.join(folder, name)

    _opencv_video(at("plain.avi"), 30)
    cases["plain.avi"] = Case("example", frames=30)
    _opencv_video(at("one_frame.avi"), 1)
    cases["one_frame.avi"] = Case("example", frames=1)
    _opencv_video(at("gray.avi"), 24, gray=True)
    cases["gray.avi"] = Case("example", frames=24)
    _opencv_video(at("latin1.avi"), 20)  # cv2.VideoWriter crashes on such a name, too: written, then renamed
    os.rename(at("latin1.avi"), at(LATIN1_NAME))
    cases[LATIN1_NAME] = Case("example", frames=20)
    _opencv_video(at("million.avi"), LONG_FRAMES, size=(64, 48))
    claim_frames(at("million.avi"), CLAIMED_FRAMES)
    cases["million.avi"] = Case("example", frames=LONG_FRAMES)
    open(at("empty.mp4"), "wb").close()
    cases["empty.mp4"] = Case("skip", "empty")
    with open(at("text.mp4"), "w", encoding="utf-8") as f:
        f.write("this is a text file, not a video\n" * 20)
    cases["text.mp4"] = Case("skip", "cannot open")
    if not ffmpeg:
        return cases

    # High quality (CRF 12) both: the HEVC and H.264 twins differ by little more than their decoders would.
    _ffmpeg("-i", at("plain.avi"), "-c:v", "libx264", "-crf", "12", "-pix_fmt", "yuv420p", at("h264.mp4"))
    cases["h264.mp4"] = Case("example", frames=30)
    _ffmpeg("-i", at("plain.avi"), "-c:v", "libx265", "-crf", "12", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error",
            at("hevc_main10.mp4"))
    cases["hevc_main10.mp4"] = Case("example", frames=30)
    # A display matrix turning the picture by a quarter turn. FFmpeg >= 6.1 writes it from -display_rotation (7 and
    # later ignore the old `rotate` tag); older ones (Debian 12's 5.1) from the tag. Which way the file turns is read
    # back from the file (display_rotation), not from these flags: the two spellings give opposite signs.
    try:
        _ffmpeg("-display_rotation:v:0", "90", "-i", at("h264.mp4"), "-c", "copy", at("rotated.mp4"))
    except subprocess.CalledProcessError:
        _ffmpeg("-i", at("h264.mp4"), "-c", "copy", "-metadata:s:v:0", "rotate=270", at("rotated.mp4"))
    cases["rotated.mp4"] = Case("example", frames=30)
    _ffmpeg("-i", at("plain.avi"), "-c:v", "libvpx-vp9", "-b:v", "200k", "-deadline", "realtime", at("vp9.webm"))
    cases["vp9.webm"] = Case("example", frames=30)
    # Variable frame rate: the first 10 frames 40 ms apart, the rest 120 ms.
    _ffmpeg("-i", at("plain.avi"), "-vf", "setpts='if(lt(N,10),N*0.04,0.4+(N-10)*0.12)/TB'", "-fps_mode", "vfr",
            "-c:v", "libx264", at("vfr.mkv"))
    cases["vfr.mkv"] = Case("example", frames=30)
    _ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=2", "-c:a", "aac", at("audio_only.mp4"))
    cases["audio_only.mp4"] = Case("skip", "")
    with open(at("h264.mp4"), "rb") as f:
        data = f.read()
    with open(at("truncated.mp4"), "wb") as f:  # the moov atom comes last: cut in half, the file has none
        f.write(data[: len(data) // 2])
    cases["truncated.mp4"] = Case("skip", "")
    return cases
