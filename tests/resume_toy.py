"""A toy file-based dataset for the resume tests, with gates that snapshot or stop a build at a chosen point.

    RESUME_TOY_STOP_AT=POINT RESUME_TOY_MARKER=FILE python tests/resume_toy.py DATA_DIR MANUAL_DIR

builds the toy dataset in this process (one in-memory worker) and, at POINT (`planning`, `source:N`: the
Nth input decoded, or `published`: every shard written, before the driver collects them), writes FILE
and waits to be killed (or for FILE.go to appear). In the test process, `GATE["snapshots"]` copies the build's incomplete folder
at such points instead, so that one build leaves the folder states a SIGKILL there would.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from toy_features import ToyFeatures
from vidvol.builders import dataset_builder

NAME = "vidvol_resume_toy"
NUM_INPUTS = 29  # and one bad file: 30 inputs
SHARDS = 6  # 5 inputs each, so that the Nth input decoded is at the same place of a shard in every order

# count: inputs decoded so far in this process; snapshots: point -> folder the incomplete folder is copied to.
GATE: dict = {"count": 0, "snapshots": {}, "data_dir": None}


def write_inputs(manual_dir: str, n: int = NUM_INPUTS) -> list[str]:
    """`n` small text files (each holding its number) and one bad one; their paths."""
    os.makedirs(manual_dir, exist_ok=True)
    paths = []
    for i in range(n):
        path = os.path.join(manual_dir, f"in{i:03d}.txt")
        with open(path, "w", encoding="ascii") as f:
            f.write(str(i * 7))
        paths.append(path)
    bad = os.path.join(manual_dir, "bad.txt")
    with open(bad, "w", encoding="ascii") as f:
        f.write("not a number")
    return paths + [bad]


def incomplete_folder(data_dir: str) -> str:
    """The one incomplete folder of the toy build running in `data_dir`."""
    (folder,) = [f for f in glob.glob(os.path.join(data_dir, NAME, "incomplete.*_1.0.0")) if "SNAP" not in f]
    return folder


def _at(point: str) -> None:
    """A gate: copy the running build's folder (in the test process), or stop here (`RESUME_TOY_STOP_AT`)."""
    if os.environ.get("RESUME_TOY_STOP_AT") == point:
        with open(os.environ["RESUME_TOY_MARKER"], "w", encoding="ascii") as f:
            f.write(point)
        go = os.environ["RESUME_TOY_MARKER"] + ".go"
        while not os.path.exists(go):  # until the test kills this process, or lets it go on (FILE.go)
            time.sleep(0.2)
    dest = GATE["snapshots"].get(point)
    if dest:
        local = incomplete_folder(GATE["data_dir"])
        shutil.copytree(local, dest)
        target = GATE.get("target")
        if target is not None:  # a bucket build: its workers' files are under the incomplete prefix in the bucket
            from vidvol.core import store

            remote = target.remote(local)
            for obj in store.find(remote):
                store.copy(obj, f"{GATE['remote_snapshots'][point]}{obj[len(remote):]}")


def toy_example(record):
    """One example per input file: its number, four times; a file that is not a number is a skip."""
    name, path = record
    GATE["count"] += 1
    _at(f"source:{GATE['count']}")
    with open(path, encoding="ascii") as f:
        value = int(f.read())  # ValueError: a skip
    yield name, {"x": np.full((4,), value, np.int64), "name": name}


class ResumeToy(ToyFeatures, dataset_builder.StreamingBeamBuilder, skip_registration=True):
    """A dataset of one example per text file of the manual_dir."""

    name = NAME
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = SHARDS
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Text files, one number each."

    def _split_generators(self, dl_manager):
        _at("planning")
        manual = os.fspath(dl_manager.manual_dir)
        sources = [(n, (n, os.path.join(manual, n))) for n in sorted(os.listdir(manual))]
        return {"train": dataset_builder.ExamplesFromSources(sources, toy_example)}

    def _generate_examples(self):
        raise NotImplementedError  # _split_generators builds the splits

    def _run_pipeline(self, *args, **kwargs):
        super()._run_pipeline(*args, **kwargs)
        _at("published")


def build(data_dir: str, manual_dir: str, *, resume: bool | None = None, num_shards: int | None = None,
          bucket_url: str | None = None) -> ResumeToy:
    """Builds the toy dataset in this process (one in-memory worker); the prepared builder.

    `bucket_url`: build into that bucket data_dir as `python -m vidvol build` does (the builder rooted at the
    local staging folder `data_dir`, the shards written to the bucket, the dataset published there).
    """
    from vidvol.builders.writer import bucket

    target = bucket.BucketTarget(bucket_url.rstrip("/"), data_dir) if bucket_url else None
    GATE["count"], GATE["data_dir"], GATE["target"] = 0, data_dir, target
    builder = ResumeToy(data_dir=data_dir)
    if target is not None:
        bucket.clear_staging(os.fspath(builder.data_path))
        builder = ResumeToy(data_dir=data_dir)
        builder.bucket = target
    builder.resume = resume
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=manual_dir, beam_options=opts, num_shards=num_shards))
    return builder


# build.json's timestamps and duration, and the runner (and its workers) of the run that finished the build
# (a resumed build may run on another, or run no pipeline at all): the only bytes that may differ.
TIMES = ("started", "finished", "seconds", "runner", "workers")


def files(version_dir: str, *, ignore: tuple[str, ...] = TIMES) -> dict[str, bytes]:
    """Every file of a prepared version folder, by name (build.json without its `ignore` fields)."""
    out = {}
    for name in sorted(os.listdir(version_dir)):
        with open(os.path.join(version_dir, name), "rb") as f:
            out[name] = f.read()
        if name == "build.json":
            doc = json.loads(out[name])
            out[name] = json.dumps({k: v for k, v in doc.items() if k not in ignore}, sort_keys=True).encode()
    return out


if __name__ == "__main__":
    import resume_toy  # by its module name, so that Beam pickles the example function by reference

    resume_toy.build(sys.argv[1], sys.argv[2])
