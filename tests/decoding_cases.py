"""Example functions for tests/builders/test_isolation.py, in a module of their own: a decoding child imports
the module of the function it runs, and this one imports only OpenCV, NumPy and vidvol's build side (quick)."""

from __future__ import annotations

import dataclasses
import logging
import os

import cv2
import numpy as np

from vidvol.builders import example_io
from vidvol.builders.transforms import video

LATIN1 = os.fsdecode(b"caf\xe9.avi")


@dataclasses.dataclass(frozen=True)
class Rec:
    """A source record naming its file (as the real ones do: `path`)."""

    path: str
    what: str = "ok"


def opencv_directly(rec: Rec):
    """Probes with OpenCV given the path as it is: a name that is not UTF-8 segfaults OpenCV (a real crash)."""
    cap = cv2.VideoCapture(rec.path, cv2.CAP_FFMPEG)  # no safe name here, on purpose
    frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    cap.release()
    yield os.path.basename(rec.path), {"x": np.full((4,), frames, np.int64), "name": os.path.basename(rec.path)}


def behaving(rec: Rec):
    """Items, a masked part, an input error, a bug, a log line or MemoryError, as `rec.what` says."""
    logging.getLogger("vidvol.test_isolation").warning("working on %s (pid %d)", rec.path, os.getpid())
    if rec.what == "bad":
        raise video.VideoDecodeError(f"{rec.path}: not a video")
    if rec.what == "bug":
        raise KeyError("a bug, not an input")
    if rec.what == "memory":
        np.zeros((2**40, 2**20), np.uint8)  # a real MemoryError: numpy cannot allocate an exbibyte
    if rec.what == "cv2":
        cv2.resize(np.zeros((0, 0), np.uint8), (4, 4))  # cv2.error: a decoding library's own error
    if rec.what == "crash":
        os.kill(os.getpid(), 11)  # a segfault, as a decoder would die of one
    yield example_io.Skip(source=f"{rec.path}#3", reason="frame 3 unreadable", example=rec.path)
    yield rec.path, {"pid": os.getpid(), "mark": os.environ.get("VIDVOL_TEST_MARK")}
    yield rec.path + "/2", {"pid": os.getpid()}


def hangs(rec: Rec):
    """Writes `<pid> <scratch folder>` to `rec.path + ".pid"`, then reads the FIFO `rec.path`, which nobody ever
    writes: a real hang (the open blocks in the kernel, as a decoder stuck on a bad stream does)."""
    with open(rec.path + ".pid.tmp", "w") as f:
        f.write(f"{os.getpid()} {os.environ.get('TMPDIR', '')}")
    os.replace(rec.path + ".pid.tmp", rec.path + ".pid")
    with open(rec.path, "rb") as fifo:
        fifo.read()
    yield rec.path, {"x": np.zeros((4,), np.int64), "name": "never"}


def stall_volume_reads() -> None:
    """A decoder hook (an `InChild` setup: it runs in the child): a volume file `F` read while a FIFO `F.fifo` exists
    stalls. Its open writes `<pid> <scratch folder>` to `F.pid`, then reads the FIFO, which nobody writes: the read
    blocks in the kernel, as one from a hung NFS mount does. Other files are read as usual."""
    import builtins

    from vidvol.builders.transforms import volume_io

    def stalling_open(path, *args, **kwargs):
        name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if name and os.path.exists(name + ".fifo"):
            with builtins.open(name + ".pid.tmp", "w") as f:
                f.write(f"{os.getpid()} {os.environ.get('TMPDIR', '')}")
            os.replace(name + ".pid.tmp", name + ".pid")
            with builtins.open(name + ".fifo", "rb") as fifo:
                fifo.read()
        return builtins.open(path, *args, **kwargs)

    volume_io.open = stalling_open  # the module's own name for the builtin: only its reads are hooked


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"

