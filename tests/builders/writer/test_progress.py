"""Progress records written by the workers, read by the driver, shown per split; errors naming their source."""

from __future__ import annotations

import glob
import json
import os
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import dataset_builder
from vidvol.builders import example_io
from vidvol.builders.writer import build_log
from vidvol.builders.writer import json_files
from vidvol.builders.writer import plan
from vidvol.builders.writer import progress
from vidvol.builders.writer import results
from vidvol.builders.writer import skip_report

IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


class _Clock:
    """A settable clock for the throttling tests."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_recorder_rewrites_its_record_whole_and_the_monitor_sums_per_split(tmp_path):
    clock = _Clock()
    a = progress.ProgressRecorder(str(tmp_path / "a.progress"), 3, interval=0.5, clock=clock)
    a.source_done(1, 0)
    assert progress.read_progress(a.path) is None  # not yet: less than `interval` since the start
    clock.now = 0.6
    a.source_done(1, 1)
    assert progress.read_progress(a.path) == {"done": 2, "sources": 3, "examples": 1, "skips": 1}
    b = progress.ProgressRecorder(str(tmp_path / "b.progress"), 2, interval=0.5, clock=clock)
    b.source_done(1, 0)
    b.source_done(2, 0)
    b.write()
    assert not glob.glob(str(tmp_path / "*.tmp"))  # written whole: temporary file renamed into place
    monitor = progress.ProgressMonitor({
        "train": [(a.path, 3), (b.path, 2), (str(tmp_path / "not-started.progress"), 4)],
        "test": [(str(tmp_path / "c.progress"), 1)],
    })
    train, test = monitor.poll()
    assert (train.split, train.total, train.done, train.examples, train.skips) == ("train", 9, 4, 3, 1)
    assert (test.total, test.done, test.finished) == (1, 0, False)
    os.remove(b.path)  # a complete record is not read again
    assert monitor.poll()[0].done == 4


def test_line_display_at_most_every_interval_and_a_final_line():
    clock, lines = _Clock(), []
    display = progress.LineDisplay("toy/cfg", lines.append, interval=10, clock=clock)
    state = progress.SplitProgress("train", 10, done=0)
    for t, done in [(1, 1), (5, 3), (11, 4), (15, 6), (22, 9)]:
        clock.now, state.done = t, done
        display.update([state])
    assert [line.split(":")[1].split(",")[0].strip() for line in lines] == ["4/10 inputs (40%)", "9/10 inputs (90%)"]
    assert "ETA" in lines[0]
    clock.now, state.done, state.examples, state.skips = 24, 10, 9, 1
    display.update([state])
    display.close([state])  # the final line is not repeated
    assert lines[-1].startswith("toy/cfg train: 10/10 inputs (100%), 9 examples, 1 skipped") and "done in" in lines[-1]
    assert len(lines) == 3


def slow_example_fn(record):
    """One example per record after a short decode-like pause; a skip for 'bad' records."""
    name, value, pause = record
    time.sleep(pause)
    if name.startswith("bad"):
        raise ValueError(f"{name}: unreadable")
    if name == "boom":
        raise KeyError("lookup table has no entry")
    yield name, {"x": np.full((4,), value, np.int64)}


class ProgressToy(dataset_builder.StreamingBeamBuilder, skip_registration=True):
    """12 + 2 inputs (one skipped per split), 3 train shards; `pause` seconds per input."""

    name = "vidvol_progress_toy"
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = 3
    pause = 0.0
    extra_train: tuple = ()

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.FeaturesDict({"x": tfds.features.Tensor(shape=(4,), dtype=np.int64)})
        )

    def _split_generators(self, dl_manager):
        train = [(f"ok{i}", (f"ok{i}", i, self.pause)) for i in range(11)] + [("bad0", ("bad0", 0, self.pause))]
        train += [(name, (name, 0, 0.0)) for name in self.extra_train]
        test = [("t0", ("t0", 100, 0.0)), ("bad1", ("bad1", 0, 0.0))]
        return {"train": self._generate_examples(train), "test": self._generate_examples(test)}

    def _generate_examples(self, sources):
        return dataset_builder.ExamplesFromSources(sources, slow_example_fn)


def _prepare(builder, flags=IN_MEMORY):
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=PipelineOptions(flags)))


def _watch_records(data_dir: str, stop: threading.Event, seen: list) -> None:
    """Collects every progress record that shows up in the build's incomplete folder."""
    while not stop.is_set():
        for path in glob.glob(os.path.join(data_dir, "**", "*.partial.progress"), recursive=True):
            record = progress.read_progress(path)
            if record:
                seen.append(record)
        time.sleep(0.02)


@pytest.mark.slow
def test_in_process_build_writes_records_while_running_and_the_bar_reaches_the_total(tmp_path, capsys):
    builder = ProgressToy(data_dir=str(tmp_path))
    builder.pause = 0.3  # 4 inputs per train shard: a record is rewritten mid-shard (every 0.5 s)
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch_records, args=(str(tmp_path), stop, seen))
    watcher.start()
    try:
        _prepare(builder)
    finally:
        stop.set()
        watcher.join()
    assert any(0 < r["done"] < r["sources"] for r in seen), seen  # produced while the shard was being written
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    # Not a TTY here: plain lines, ending with the totals (skips count as done).
    assert "vidvol_progress_toy train: 12/12 inputs (100%), 11 examples, 1 skipped" in err
    assert "vidvol_progress_toy test: 2/2 inputs (100%), 1 examples, 1 skipped" in err
    # Last: the summary lines and where the skip report is.
    report = os.path.join(builder.data_dir, skip_report.SKIP_REPORT_NAME)
    assert lines[-3:] == [
        "vidvol_progress_toy train: 11 examples in 3 shards (0.0 MiB), 1 inputs skipped (1 ValueError)",
        "vidvol_progress_toy test: 1 examples in 1 shards (0.0 MiB), 1 inputs skipped (1 ValueError)",
        f"2 inputs skipped: see {report}",
    ]
    # The build log: next to the version folder, with the per-shard lines and the final progress.
    (log,) = glob.glob(os.path.join(str(tmp_path), "vidvol_progress_toy", "build-1.0.0-*.log"))
    assert lines[0] == f"vidvol_progress_toy: build log {log}"
    text = open(log).read()
    assert "train shard 0:" in text and "train: 12/12 inputs (100%)" in text and "Generating dataset" in text
    assert "Generating dataset" not in err
    leftovers = [f for f in os.listdir(builder.data_dir) if f.endswith((".progress", ".tmp", ".partial", ".info.json"))]
    assert leftovers == []
    assert builder.info.splits["train"].num_examples == 11


def test_a_non_input_error_fails_the_build_naming_its_source(tmp_path, capsys):
    builder = ProgressToy(data_dir=str(tmp_path))
    builder.extra_train = ("boom",)
    streams = (sys.stdout, sys.stderr)
    with pytest.raises(KeyError, match=r"lookup table has no entry \[source 'boom', split 'train'\]"):
        _prepare(builder)
    assert (sys.stdout, sys.stderr) == streams and build_log.current() is None  # all put back before the traceback
    err = capsys.readouterr().err
    assert "vidvol_progress_toy: build failed; full log: " in err


def test_naming_source_keeps_the_type_where_it_can():
    source = ("vid7", type("Rec", (), {"path": "/data/v/vid7.avi"})())
    again = example_io.naming_source(KeyError("x"), source, "test")
    assert type(again) is KeyError and "[source 'vid7' (/data/v/vid7.avi), split 'test']" in str(again)

    class Odd(Exception):
        def __init__(self, code: int):
            super().__init__(code)

    wrapped = example_io.naming_source(Odd(3), ("s", None), "train")
    assert isinstance(wrapped, example_io.SourceError) and str(wrapped) == "Odd: 3 [source 's', split 'train']"


HELPER = '''
"""Example function importable by SDK worker processes (the test puts this folder on PYTHONPATH)."""
import time
import numpy as np

def example_fn(record):
    name, value, pause = record
    time.sleep(pause)
    if name.startswith("bad"):
        raise ValueError(name + ": unreadable")
    if name == "boom":
        raise KeyError("lookup table has no entry")
    yield name, {"x": np.full((4,), value, np.int64)}
'''


@pytest.fixture
def worker_module(tmp_path, monkeypatch):
    """A module that the multi-process SDK workers can import (they inherit PYTHONPATH)."""
    folder = tmp_path / "helper"
    folder.mkdir()
    (folder / "vidvol_progress_helper.py").write_text(textwrap.dedent(HELPER))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    import vidvol_progress_helper

    yield vidvol_progress_helper
    sys.modules.pop("vidvol_progress_helper", None)


@pytest.mark.long
@pytest.mark.slow
def test_multi_process_workers_records_reach_the_driver_and_errors_name_the_source(tmp_path, worker_module, capfd):
    class MultiToy(ProgressToy, skip_registration=True):
        name = "vidvol_progress_toy"

        def _generate_examples(self, sources):
            return dataset_builder.ExamplesFromSources(sources, worker_module.example_fn)

    flags = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    builder = MultiToy(data_dir=str(tmp_path / "ok"))
    builder.pause = 0.2
    _prepare(builder, flags)
    out, err = capfd.readouterr()
    assert "vidvol_progress_toy train: 12/12 inputs (100%), 11 examples, 1 skipped" in err
    assert "vidvol_progress_toy test: 2/2 inputs (100%)" in err
    # The SDK worker processes' own output went to the build log, not to this process's stdout/stderr.
    (log,) = glob.glob(str(tmp_path / "ok" / "vidvol_progress_toy" / "build-*.log"))
    text = open(log).read()
    assert "semi_persistent_directory" in text and "Creating insecure control channel" in text
    for chatter in ("semi_persistent_directory", "control channel", "State channel", "Data channel"):
        assert chatter not in out + err
    assert builder.info.splits["train"].num_examples == 11

    failing = MultiToy(data_dir=str(tmp_path / "fail"))
    failing.extra_train = ("boom",)
    with pytest.raises(Exception, match=r"lookup table has no entry \[source 'boom', split 'train'\]"):
        _prepare(failing, flags)


def test_progress_files_are_removed_with_the_sidecars(tmp_path):
    path = str(tmp_path / "x-train.tfrecord-00000-of-00001.partial")
    open(path, "wb").close()
    task = plan.ShardTask("train", 0, path, (("a", None),))
    json_files.write_json({"split": "train", "index": 0, "path": path, "keys": ["a"], "num_bytes": 1, "skips": []},
                            path + ".info.json")
    progress.ProgressRecorder(progress.progress_path(path), 1, interval=0).write()
    result = results.collect_split("train", [task], lambda i, n: str(tmp_path / "final-00000"))
    assert result.shard_lengths == [1]
    assert sorted(os.listdir(tmp_path)) == ["final-00000"]
    assert json.dumps(result.keys) == '["a"]'
