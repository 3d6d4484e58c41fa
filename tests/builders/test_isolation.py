"""Example functions in a child the worker can lose: a real OpenCV segfault is one skip naming the signal and the
file; items, skips, errors and log lines come back as they would in the worker; a dead child is replaced."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import time

import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import dataset_builder
from vidvol.builders import decoding_child
from vidvol.builders import example_io
from vidvol.builders import isolation
from vidvol.builders.writer import skip_report
from vidvol.testing import samples

from decoding_cases import LATIN1, Rec, behaving, gone as _gone, hangs, opencv_directly
from toy_features import ToyFeatures

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(fn, rec: Rec):
    return list(example_io.run_example_fn(isolation.InChild(fn), (rec.path, rec), "train"))


def test_items_skips_errors_and_logs_come_back_from_the_child(caplog):
    caplog.set_level(logging.WARNING, logger="vidvol.test_isolation")
    items = run(behaving, Rec("a.avi"))
    assert [type(i).__name__ for i in items] == ["Skip", "tuple", "tuple"]
    assert items[0].reason == "frame 3 unreadable" and items[0].split == "train"
    child = items[1][1]["pid"]
    assert child != os.getpid()  # made in a child ...
    assert any("working on a.avi" in r.getMessage() and f"pid {child}" in r.getMessage() for r in caplog.records)  # ... whose log lines reach here
    assert run(behaving, Rec("b.avi"))[1][1]["pid"] == child  # the same child serves the next source

    (skip,) = run(behaving, Rec("bad.avi", "bad"))
    assert skip.source == "bad.avi" and skip.reason == "VideoDecodeError: bad.avi: not a video"
    (skip,) = run(behaving, Rec("big.avi", "memory"))
    assert skip.reason.startswith("MemoryError: big.avi: Unable to allocate 1.00 EiB")
    (skip,) = run(behaving, Rec("odd.avi", "cv2"))
    assert skip.reason.startswith("error: OpenCV") and "resize" in skip.reason
    with pytest.raises(KeyError, match="a bug") as raised:
        run(behaving, Rec("bug.avi", "bug"))
    assert any("raised in the decoding child process" in note for note in raised.value.__notes__)
    assert run(behaving, Rec("c.avi"))[1][1]["pid"] == child  # errors leave the child in step


def test_a_child_that_dies_is_a_skip_naming_the_signal_and_the_file_and_is_replaced(caplog):
    caplog.set_level(logging.WARNING, logger="vidvol.test_isolation")
    first = run(behaving, Rec("before.avi"))[1][1]["pid"]
    (skip,) = run(behaving, Rec(LATIN1, "crash"))
    # The child's log line names the file as vidvol writes names (no lone surrogate reaches a handler).
    assert any(r.getMessage().startswith("working on caf\\xe9.avi") for r in caplog.records)
    assert skip.as_dict()["reason"].startswith("DecoderCrash: caf\\xe9.avi: the decoder crashed")
    assert "died of SIGSEGV (signal 11, a segmentation fault)" in skip.reason
    after = run(behaving, Rec("after.avi"))[1][1]["pid"]
    assert after not in (first, os.getpid())  # a new child


def test_a_child_sees_the_environment_of_the_source_it_serves(monkeypatch):
    first = run(behaving, Rec("a.avi"))[1][1]
    monkeypatch.setenv("VIDVOL_TEST_MARK", "credentials set after the first build")  # as a notebook sets AWS_*
    second = run(behaving, Rec("b.avi"))[1][1]
    assert second["mark"] == "credentials set after the first build" and second["pid"] != first["pid"]
    third = run(behaving, Rec("c.avi"))[1][1]
    assert third["pid"] == second["pid"]  # unchanged surroundings: the same child serves on


def test_a_consumer_that_stops_early_leaves_no_child_out_of_step():
    gen = example_io.run_example_fn(isolation.InChild(behaving), ("a.avi", Rec("a.avi")), "train")
    next(gen)
    gen.close()  # the child was still sending: it is ended, not reused out of step
    assert [type(i).__name__ for i in run(behaving, Rec("b.avi"))] == ["Skip", "tuple", "tuple"]


def test_a_child_killed_while_idle_is_not_blamed_on_the_next_source():
    run(behaving, Rec("a.avi"))
    for child in list(isolation._idle):
        child.process.kill()  # from outside, between two sources
        child.process.wait()
    assert [type(i).__name__ for i in run(behaving, Rec("b.avi"))] == ["Skip", "tuple", "tuple"]


def test_a_worker_that_cannot_start_a_child_decodes_itself_and_says_so(monkeypatch, caplog):
    isolation._end_all()  # no idle child to reuse
    monkeypatch.setattr(decoding_child.sys, "executable", "/bin/false")  # a real process that exits at once
    monkeypatch.setattr(isolation, "_start_failed", False)
    items = run(behaving, Rec("a.avi"))
    assert items[1][1]["pid"] == os.getpid()
    assert "cannot start a decoding child process (the decoding child process exited with code 1" in caplog.text


def test_off_switch_runs_in_the_worker(monkeypatch):
    monkeypatch.setenv(isolation.ENV, "0")
    assert run(behaving, Rec("a.avi"))[1][1]["pid"] == os.getpid()


# ----------------------------------------------------------------------------------------------
# A real crash in a real build


class CrashingBuilder(ToyFeatures, dataset_builder.StreamingBeamBuilder, skip_registration=True):
    """Probes each video with OpenCV given its raw path, in a child (`InChild`): the Latin-1 name segfaults OpenCV."""

    name = "vidvol_toy_crash"
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = 2
    FOLDER = ""

    def _split_generators(self, dl_manager):
        names = sorted(os.listdir(self.FOLDER))
        return {"train": self._generate_examples([(n, Rec(os.path.join(self.FOLDER, n))) for n in names])}

    def _generate_examples(self, sources):
        return dataset_builder.ExamplesFromSources(sources, isolation.InChild(opencv_directly))


@pytest.mark.parametrize("mode", [
    "in_memory",
    # Beam's SDK workers are processes of their own here: the decoding child is the worker's, the worker survives.
    pytest.param("multi_processing", marks=[pytest.mark.slow, pytest.mark.long]),
])
def test_a_real_opencv_segfault_is_one_skip_and_the_build_goes_on(tmp_path, monkeypatch, mode):
    folder = tmp_path / "videos"
    for name in ("a.avi", "b.avi", "latin1.avi"):
        samples.write_video(str(folder / name), 5, height=48, width=64, fourcc="MJPG")
    os.rename(folder / "latin1.avi", os.path.join(str(folder), LATIN1))
    CrashingBuilder.FOLDER = str(folder)
    builder = CrashingBuilder(data_dir=str(tmp_path / "out"))
    workers = 1 if mode == "in_memory" else 2
    if mode == "multi_processing":  # the workers unpickle decoding_cases.opencv_directly by reference
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    opts = PipelineOptions([f"--direct_num_workers={workers}", f"--direct_running_mode={mode}"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts))
    names = sorted(ex["name"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train")))
    assert names == ["a.avi", "b.avi"]
    (skip,) = skip_report.read_skip_report(builder.data_dir)["skipped"]
    assert skip["source"] == "caf\\xe9.avi"
    assert "died of SIGSEGV" in skip["reason"] and f"{folder}/caf\\xe9.avi: the decoder crashed" in skip["reason"]


def test_in_child_pickles_for_the_workers():
    import pickle

    wrapped = pickle.loads(pickle.dumps(isolation.InChild(functools.partial(behaving))))
    assert run(wrapped.example_fn, Rec("a.avi"))[1][0] == "a.avi"


def _hung_child(tmp_path, name: str) -> tuple[str, Rec]:
    fifo = str(tmp_path / name)
    os.mkfifo(fifo)
    return fifo, Rec(fifo, "hang")


def _wait_for(what, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, f"timed out waiting for {what.__doc__ or what}"
        time.sleep(0.05)


def test_a_hung_decoder_is_killed_at_its_deadline_and_is_one_skip(tmp_path):
    fifo, rec = _hung_child(tmp_path, "stuck.avi")
    began = time.monotonic()
    (skip,) = list(example_io.run_example_fn(isolation.InChild(hangs, timeout_s=1.5), (rec.path, rec), "train"))
    took = time.monotonic() - began
    pid, scratch = open(fifo + ".pid").read().split()
    assert skip.reason.startswith(f"DecoderTimeout: {fifo}: the decoder gave no answer within 1.5 s"), skip.reason
    assert isolation.TIMEOUT_ENV in skip.reason and 1.5 <= took < 30, took
    assert _gone(int(pid)) and not os.path.exists(scratch)  # killed, and its scratch folder gone
    assert run(behaving, Rec("next.avi"))[1][1]["pid"] != int(pid)  # the next source gets a fresh child


def test_the_deadline_is_sized_from_the_source_and_configurable(tmp_path, monkeypatch):
    big = tmp_path / "big.avi"
    with open(big, "wb") as f:
        f.truncate(2**30)  # sparse: 1 GiB by size
    assert isolation.decode_timeout_s(str(big)) == isolation.TIMEOUT_S + isolation.TIMEOUT_S_PER_GIB
    assert isolation.decode_timeout_s("s3://b/k.avi") == isolation.decode_timeout_s("") == isolation.TIMEOUT_S
    monkeypatch.setenv(isolation.TIMEOUT_ENV, "0")
    assert isolation.decode_timeout_s(str(big)) is None  # no limit
    assert isolation.decode_timeout_s(str(big), 7) == 7
    monkeypatch.setenv(isolation.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="VIDVOL_DECODE_TIMEOUT_S='soon'"):
        isolation.decode_timeout_s("")


# A worker that loads no TensorFlow: the `vidvol` package entered without its facade, as the decoding child does.
_WORKER = """
import importlib.util, sys
sys.path.insert(0, sys.argv[2])
spec = importlib.util.find_spec("vidvol")
sys.modules["vidvol"] = importlib.util.module_from_spec(spec)
from vidvol.builders import example_io, isolation
from decoding_cases import Rec, hangs
list(example_io.run_example_fn(isolation.InChild(hangs), (sys.argv[1], Rec(sys.argv[1], "hang")), "train"))
"""


def test_a_worker_killed_while_its_child_is_busy_leaves_no_process_and_no_folder(tmp_path):
    """The worker SIGKILLed mid-source: its child (hung in the kernel) ends too, and its scratch folder goes."""
    fifo, _ = _hung_child(tmp_path, "busy.avi")
    fetch = tmp_path / "fetch"
    env = dict(os.environ, VIDVOL_FETCH_DIR=str(fetch))
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, fifo, TESTS], env=env)
    try:
        _wait_for(lambda: os.path.exists(fifo + ".pid"), 120)
        pid, scratch = open(fifo + ".pid").read().split()
        assert os.path.dirname(scratch) == str(fetch) and os.path.isdir(scratch)
        worker.kill()
        worker.wait()
        _wait_for(lambda: _gone(int(pid)))
        _wait_for(lambda: not os.path.exists(scratch))
        assert os.listdir(fetch) == []
    finally:
        worker.kill()
        worker.wait()


def test_a_scratch_folder_a_dead_worker_left_is_swept_by_the_next_child(tmp_path, monkeypatch):
    fetch = tmp_path / "fetch"
    fetch.mkdir(mode=0o700)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    ns = decoding_child._pid_namespace()
    orphan = fetch / f"vidvol-decoder-{int(dead.stdout)}-{ns}-abc"
    (orphan / "fetch-1").mkdir(parents=True)
    mine = fetch / f"vidvol-decoder-{os.getpid()}-{ns}-live"
    mine.mkdir()
    elsewhere = fetch / f"vidvol-decoder-{int(dead.stdout)}-{ns + 1}-other"  # a container's: its pids are not ours
    elsewhere.mkdir()
    monkeypatch.setenv("VIDVOL_FETCH_DIR", str(fetch))
    isolation._end_all()  # no idle child: the next source starts one, which sweeps
    assert run(behaving, Rec("a.avi"))[1][1]["pid"] != os.getpid()
    assert not orphan.exists() and mine.exists() and elsewhere.exists()
