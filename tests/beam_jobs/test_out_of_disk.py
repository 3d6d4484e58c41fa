"""A build whose writes really fail (a file size limit on the build process: EFBIG on the shard being
written): one clear error naming the data_dir and the shard, nothing left that TFDS would read, and the
next run with room completes."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.beam_jobs import build
from vidvol.testing import samples

pytestmark = pytest.mark.slow  # a build in a subprocess, then a build in-process

DATASET = "mri_volumes/small_32"
LIMIT = 600_000  # bytes per file: the build log and metadata fit, a 9-example shard (~1.2 MB) does not


def _file_size_limit():
    """In the build process only: files stop growing at LIMIT; writes past it fail with EFBIG, not a signal."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_a_build_that_cannot_write_stops_with_one_error_and_leaves_nothing(tmp_path):
    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    samples.write_mri_volumes(str(manual), num_subjects=11, shape=(12, 12, 12))
    cmd = [sys.executable, "-m", "vidvol.beam_jobs.build", DATASET, "--manual_dir", str(manual),
           "--data_dir", str(data_dir), "--num_shards", "1"]
    proc = subprocess.run(cmd, preexec_fn=_file_size_limit, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 1, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert errors[0].startswith(f"error: {DATASET}: the build could not write to data_dir {data_dir} while writing "
                                "shard mri_volumes-train.tfrecord-00000-of-00001 (")
    assert "File too large" in errors[0] and "a file size limit was reached" in errors[0].lower()
    assert "nothing of this build was kept and the dataset is not prepared" in errors[0]
    assert errors[0] == proc.stderr.rstrip().splitlines()[-1]  # the last thing the user sees
    left = [os.path.join(d, f) for d, dirs, fs in os.walk(data_dir) for f in fs + dirs]
    assert not [p for p in left if "incomplete." in p or ".tfrecord" in p or p.endswith((".tmp", ".partial", ".json"))
                and not p.endswith(os.path.join(".config", "metadata.json"))], left
    assert not tfds.builder(DATASET, data_dir=str(data_dir)).is_prepared()

    # With room: the same command completes and TFDS reads it.
    result = build.build(DATASET, manual_dir=str(manual), data_dir=str(data_dir), num_shards=1)
    assert result.built and result.splits["train"]["examples"] == 9
    ds = tfds.load(DATASET, split="train", data_dir=str(data_dir), download=False)
    assert len(list(ds)) == 9
