"""What a user watching `tfds build` / `python -m vidvol.beam_jobs.build` sees: bars, warnings, errors, the summary last.

Real builds of the hmdb51 dummy data (one video made empty, so one input is skipped) in
subprocesses, with their terminal output (stdout + stderr) and their build log compared.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import vidvol  # noqa: F401  (installs the runner resolver, registers the datasets)
from vidvol.beam_jobs import build
from vidvol.beam_jobs import runners
from vidvol.builders.writer import runner as writer_runner
from vidvol.builders.writer import skip_report
from vidvol.datasets.hmdb51 import make_dummy_data

DATASET = "hmdb51/split1_20x64x64"
NAME = "hmdb51/split1_20x64x64"
MULTI = "direct_num_workers=2,direct_running_mode=multi_processing"
# Start-up lines of Beam's SDK workers and of TFDS that belong in the build log, not on the terminal.
CHATTER = ("State channel established", "Data channel established", "Creating insecure control channel",
           "semi_persistent_directory", "Downloading and preparing dataset", "Dataset generation completed",
           "tfds.core.DatasetInfo(")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
ENV.pop("VIDVOL_VERBOSE", None)


@pytest.fixture(scope="module")
def manual_dir(tmp_path_factory) -> str:
    """The hmdb51 dummy data plus one empty video listed in split 1's train set (one skipped input)."""
    manual = tmp_path_factory.mktemp("manual") / "hmdb51"
    shutil.copytree(make_dummy_data.DUMMY_DIR, manual)
    (manual / "hmdb51_org" / "brush_hair" / "empty_clip.avi").write_bytes(b"")
    with open(manual / "testTrainMulti_7030_splits" / "brush_hair_test_split1.txt", "a") as f:
        f.write("empty_clip.avi 1 \n")
    return str(manual)


def _tfds_build(manual: str, data_dir: str, *extra: str, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", DATASET, "--imports", "vidvol",
           "--manual_dir", manual, "--data_dir", data_dir, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env or ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def _logs(data_dir: str) -> list[str]:
    return glob.glob(os.path.join(data_dir, "hmdb51", "split1_20x64x64", "build-1.0.0-*.log"))


def _summary_tail(data_dir: str, prefix: str = NAME) -> list[str]:
    report = os.path.join(data_dir, "hmdb51", "split1_20x64x64", "1.0.0", skip_report.SKIP_REPORT_NAME)
    return [
        f"{prefix} train: 6 examples in 4 shards (0.2 MiB), 1 inputs skipped (1 VideoDecodeError)",
        f"{prefix} test: 3 examples in 3 shards (0.1 MiB), 0 inputs skipped",
        f"1 inputs skipped: see {report}",
    ]


@pytest.mark.long
@pytest.mark.slow
def test_tfds_build_multi_process_terminal_is_quiet_and_ends_with_the_summary(manual_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    proc = _tfds_build(manual_dir, data_dir, f"--beam_pipeline_options={MULTI}")
    terminal = proc.stdout + proc.stderr
    (log,) = _logs(data_dir)
    text = open(log).read()
    for chatter in CHATTER:
        assert chatter not in terminal, chatter
        assert chatter in text, chatter  # ... the worker processes' own output and TFDS's prints are in the log
    # What is left: TensorFlow's and TFDS's start-up lines from before the build, progress, the summary.
    assert len(terminal.strip().splitlines()) < 40, terminal
    lines = proc.stderr.strip().splitlines()
    assert f"{NAME}: build log {log}" in lines  # printed once, at the start
    assert sum(1 for line in lines if "build log" in line) == 1
    # Progress from the workers' records: the bars (plain lines off a TTY) reach the totals.
    assert f"{NAME} train: 7/7 inputs (100%), 6 examples, 1 skipped" in proc.stderr
    assert f"{NAME} test: 3/3 inputs (100%), 3 examples, 0 skipped" in proc.stderr
    assert "small build" not in proc.stderr  # the worker count was chosen explicitly: kept
    assert lines[-3:] == _summary_tail(data_dir)


@pytest.mark.long
@pytest.mark.slow
def test_verbose_brings_the_chatter_back(manual_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    proc = _tfds_build(manual_dir, data_dir, f"--beam_pipeline_options={MULTI}", env=dict(ENV, VIDVOL_VERBOSE="1"))
    assert "Creating insecure control channel" in proc.stderr and "semi_persistent_directory" in proc.stderr
    assert "tfds.core.DatasetInfo(" in proc.stdout
    assert _logs(data_dir) == []
    assert proc.stderr.strip().splitlines()[-3:] == _summary_tail(data_dir)  # still last, after TFDS's output


@pytest.mark.slow
def test_small_tfds_build_runs_in_process_says_so_and_is_fast(manual_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    start = time.monotonic()
    proc = _tfds_build(manual_dir, data_dir)
    wall = time.monotonic() - start
    assert "small build (10 sources): one in-process worker" in proc.stderr
    (log,) = _logs(data_dir)
    assert "Creating insecure control channel" not in open(log).read()  # no SDK worker process started
    assert proc.stderr.strip().splitlines()[-3:] == _summary_tail(data_dir)
    assert wall < 60, wall  # about 7 s here (23 s with a worker process per core); generous for loaded CI


@pytest.mark.slow
def test_tty_shows_bars_that_reach_the_total(manual_dir, tmp_path):
    """Under a pseudo-terminal: tqdm bars (carriage returns), ending at the totals, then the summary."""
    import fcntl
    import pty
    import termios

    data_dir = str(tmp_path / "data")
    cmd = [sys.executable, "-m", "tensorflow_datasets.scripts.cli.main", "build", DATASET, "--imports", "vidvol",
           "--manual_dir", manual_dir, "--data_dir", data_dir]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a 120-column terminal, then the build
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            os.execve(sys.executable, cmd, ENV)
        finally:
            os._exit(127)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, out[-4000:]
    assert "\r" in out and "|" in out
    assert f"{NAME} train: 100%|" in out and "7/7 inputs" in out and "3/3 inputs" in out
    assert "State channel established" not in out and "tfds.core.DatasetInfo(" not in out
    assert [line.strip() for line in out.strip().splitlines()[-3:]] == _summary_tail(data_dir)


@pytest.mark.slow
def test_build_command_prints_json_then_the_summary_last(manual_dir, tmp_path):
    data_dir = str(tmp_path / "data")
    cmd = [sys.executable, "-m", "vidvol.beam_jobs.build", DATASET, "--manual_dir", manual_dir, "--data_dir", data_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["built"]
    err = proc.stderr.strip().splitlines()
    assert "small build (10 sources): one in-process worker" in proc.stderr
    assert err[-3:] == _summary_tail(data_dir, prefix=f"{NAME}/1.0.0")[1::-1] + _summary_tail(data_dir)[2:]
    (log,) = _logs(data_dir)
    assert f"{NAME}: build log {log}" in err
    for chatter in CHATTER:
        assert chatter not in proc.stdout + proc.stderr, chatter
    # --verbose: everything on the terminal, no log file.
    cmd += ["--overwrite", "--verbose", "--direct_num_workers=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "Creating insecure control channel" in proc.stderr and "small build" not in proc.stderr
    assert len(_logs(data_dir)) == 1
    assert proc.stderr.strip().splitlines()[-1] == _summary_tail(data_dir)[-1]


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("runner", ["portable", "dask"])
def test_progress_reaches_the_totals_on_the_cluster_runners(runner, manual_dir, tmp_path, capfd):
    """The same worker records drive the display on a portable job service and on Dask."""
    result = build.build(DATASET, manual_dir=manual_dir, data_dir=str(tmp_path / runner), runner=runner,
                         local_services=True)
    _, err = capfd.readouterr()
    assert f"{NAME} train: 7/7 inputs (100%), 6 examples, 1 skipped" in err
    assert f"{NAME} test: 3/3 inputs (100%), 3 examples, 0 skipped" in err
    assert "small build" not in err  # only the direct runner shrinks
    assert result.splits["train"]["skipped_inputs"] == 1
    assert not [f for f in os.listdir(result.data_path) if f.endswith((".progress", ".tmp"))]


def test_in_process_build_logs_the_small_build_choice_once(manual_dir, tmp_path, capfd):
    result = build.build(DATASET, manual_dir=manual_dir, data_dir=str(tmp_path / "a"))
    _, err = capfd.readouterr()
    assert err.count("small build (10 sources): one in-process worker") == 1
    assert result.splits["train"]["skipped_inputs"] == 1
    (log,) = _logs(str(tmp_path / "a"))
    assert "small build (10 sources)" in open(log).read()


def test_small_build_choice_keeps_explicit_options():
    cores = runners.default_num_workers()

    def resolved(flags, num_sources):
        runner, options = runners.resolve(None, PipelineOptions(flags) if flags is not None else None, 4,
                                          num_sources=num_sources)
        values = options.get_all_options()
        return type(runner).__name__, values["direct_num_workers"], values["direct_running_mode"]

    assert resolved(None, 9) == ("FnApiRunner", 1, "in_memory")
    assert resolved(None, runners.SMALL_BUILD_SOURCES) == ("FnApiRunner", 1, "in_memory")
    assert resolved(None, runners.SMALL_BUILD_SOURCES + 1) == ("FnApiRunner", cores, "multi_processing")
    assert resolved(None, None) == ("FnApiRunner", cores, "multi_processing")
    assert resolved(["--runner=DirectRunner"], 9) == ("FnApiRunner", 1, "in_memory")
    assert resolved(["--direct_num_workers=2"], 9) == ("FnApiRunner", 2, "multi_processing")
    assert resolved(["--direct_running_mode=multi_processing"], 9) == ("FnApiRunner", cores, "multi_processing")
    # `python -m vidvol.beam_jobs.build` resolves up front with its default flags; the builder's
    # second call (with the planned sources) may still shrink a runner the user did not size.
    config = build.download_config(manual_dir=None, flags=runners.pipeline_flags("direct"), default_workers=True)
    runner, options = runners.resolve(config.beam_runner, config.beam_options, 4, num_sources=9)
    assert options.get_all_options()["direct_running_mode"] == "in_memory"
    config = build.download_config(manual_dir=None, flags=runners.pipeline_flags("direct", ["--direct_num_workers=2"]))
    runner, options = runners.resolve(config.beam_runner, config.beam_options, 4, num_sources=9)
    assert runner is config.beam_runner and options.get_all_options()["direct_num_workers"] == 2
    # A resolver without `num_sources` (installed by other code) still works.
    previous = writer_runner._runner_resolver
    try:
        writer_runner.set_runner_resolver(lambda runner, options, num_tasks=None: ("R", options))
        assert writer_runner.resolve_runner(None, None, 3, num_sources=5) == ("R", None)
    finally:
        writer_runner.set_runner_resolver(previous)
