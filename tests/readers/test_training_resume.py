"""The real training case: a custom Keras loop on `vidvol.load`, SIGKILLed mid-epoch, restarted from its checkpoint.

`tests/training_run.py` trains two epochs (random 4-frame clips, seeded, `repeat=True`) saving model,
optimizer and iterator with `tf.train.CheckpointManager` every 3 steps. One run goes through
uninterrupted; another is killed with SIGKILL after step 5 (its last checkpoint is step 3), and
restarted: from step 4 on it must read exactly the batches of the uninterrupted run, so over the
two epochs it sees each example exactly as many times (twice), in the same order. The same with two hosts
(input pipelines) killed and one restarted in their place (#34, long lane).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import pytest

from in_process_build import build
from vidvol.datasets.hmdb51 import hmdb51_dataset_builder as hmdb
from vidvol.testing import samples

pytestmark = pytest.mark.slow  # three training processes

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "training_run.py")
EVERY, KILL_AFTER = 3, 5


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    samples.write_hmdb51_layout(str(root / "manual"), videos_per_class=12, num_frames=(8, 16), height=24, width=32,
                                splits=(1,), seed=9)
    builder = build(hmdb.Builder, "split1_20x64x64", root / "manual", root / "data")
    return os.fspath(builder.data_path), builder.info.splits["train"].num_examples


def _run(args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SCRIPT, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})), **kw)


def _steps(log) -> list[tuple[int, tuple[str, ...]]]:
    rows = [line.split() for line in open(log, encoding="utf-8").read().splitlines()]
    return [(int(r[0]), tuple(r[1:])) for r in rows]


def test_a_killed_training_run_resumes_and_sees_every_example_as_often(data, tmp_path):
    data_path, examples = data
    steps = examples  # batches of 2 over two epochs
    assert steps > KILL_AFTER + EVERY
    whole = _run([data_path, tmp_path / "ckpt_whole", tmp_path / "whole.log", steps, EVERY])
    out, err = whole.communicate(timeout=600)
    assert whole.returncode == 0 and "done" in out, err[-4000:]

    killed = _run([data_path, tmp_path / "ckpt", tmp_path / "killed.log", steps, EVERY, KILL_AFTER])
    deadline = time.monotonic() + 600
    while "waiting" not in killed.stdout.readline():  # past step 5: steps 4 and 5 are not in any checkpoint
        assert killed.poll() is None and time.monotonic() < deadline, killed.stderr.read()[-4000:]
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    before = _steps(tmp_path / "killed.log")
    assert [s for s, _ in before] == list(range(1, KILL_AFTER + 1))

    again = _run([data_path, tmp_path / "ckpt", tmp_path / "resumed.log", steps, EVERY])
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "done" in out, err[-4000:]
    after = _steps(tmp_path / "resumed.log")
    last_saved = (KILL_AFTER // EVERY) * EVERY
    assert after[0][0] == last_saved + 1  # restarted from its last checkpoint

    reference = _steps(tmp_path / "whole.log")
    resumed = [row for row in before if row[0] <= last_saved] + after
    assert resumed == reference  # the same batches, step for step
    seen = collections.Counter(i for _, ids in resumed for i in ids)
    assert set(seen.values()) == {2} and len(seen) == examples  # each example twice over the two epochs


@pytest.mark.long
def test_two_killed_hosts_restart_as_one_and_see_every_example_as_often(data, tmp_path):
    """#34, the fleet shrinks: two hosts (input pipelines 0 and 1 of 2, global batch 4) are SIGKILLed after step 5
    (their last checkpoints: step 3); one host restarts from host 0's checkpoint with batch 4 and trains on. Over
    the two epochs every example is seen exactly twice, as in an uninterrupted run (an even split: none left out)."""
    data_path, examples = data
    steps = examples // 2  # global batches of 4 over two epochs
    hosts = [_run([data_path, tmp_path / f"ckpt{p}", tmp_path / f"host{p}.log", steps, EVERY, KILL_AFTER],
                  env={"PIPELINES": f"2,{p}", "GLOBAL_BATCH": "4"}) for p in range(2)]
    deadline = time.monotonic() + 600
    for host in hosts:
        while "waiting" not in host.stdout.readline():
            assert host.poll() is None and time.monotonic() < deadline, host.stderr.read()[-4000:]
    for host in hosts:
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=60)
    last_saved = (KILL_AFTER // EVERY) * EVERY
    before = [row for p in range(2) for row in _steps(tmp_path / f"host{p}.log") if row[0] <= last_saved]
    again = _run([data_path, tmp_path / "ckpt0", tmp_path / "one.log", steps, EVERY], env={"GLOBAL_BATCH": "4"})
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "done" in out, err[-4000:]
    after = _steps(tmp_path / "one.log")
    assert after[0][0] == last_saved + 1 and after[-1][0] == steps and all(len(ids) == 4 for _, ids in after)
    seen = collections.Counter(i for _, ids in before + after for i in ids)
    assert len(seen) == examples and set(seen.values()) == {2}
