"""Iterator checkpoints of `vidvol.load` pipelines, restored in a fresh process (`python resume_cases.py CASES.json`).

A case is a JSON dict: `data_path` (a prepared dataset's version folder), `split`, `batch`, `kwargs` for
`vidvol.load` (with `spec` a `vidvol.ReadSpec(...)` expression), `env` (environment set while the
pipeline is made, e.g. `VIDVOL_JPEG_DECODE=host`), `restore_seed` (the seed the restoring process
passes: another one than the saver's, or None), `checkpoint` (the path prefix written) and `out`
(an .npz the restoring process writes its next `batches` batches to).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec, Tuning, VideoAugment, VolumeAugment  # noqa: F401  (names for the spec expressions)


@contextlib.contextmanager
def environment(env: dict | None):
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def make(case: dict, seed="same") -> tf.data.Dataset:
    """The case's pipeline (`seed`: "same" for the case's own, else the one given)."""
    kwargs = dict(case.get("kwargs", {}))
    if "spec" in kwargs:
        kwargs["spec"] = eval(kwargs["spec"])  # test cases written by the test itself
    if "tuning" in kwargs:
        kwargs["tuning"] = eval(kwargs["tuning"])
    if seed != "same":
        kwargs["seed"] = seed
    with environment(case.get("env")):
        builder = tfds.builder_from_directory(case["data_path"])
        return vidvol.load(builder, case["split"], case["batch"], **kwargs)


def flat(batch) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(batch)]


def take(it, n: int) -> list[list[np.ndarray]]:
    out = []
    for _ in range(n):
        try:
            out.append(flat(next(it)))
        except StopIteration:
            break
    return out


def checkpoint_bytes(prefix: str) -> int:
    folder, name = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith(name + "."))


def save(case: dict, skip: int, then: int) -> tuple[list, int]:
    """Reads `skip` batches, writes the iterator checkpoint, returns (the next `then` batches, checkpoint bytes)."""
    it = iter(make(case))
    take(it, skip)
    tf.train.Checkpoint(iterator=it).write(case["checkpoint"])
    return take(it, then), checkpoint_bytes(case["checkpoint"])


def restore(case: dict, batches: int) -> list:
    it = iter(make(case, seed=case.get("restore_seed")))
    tf.train.Checkpoint(iterator=it).read(case["checkpoint"]).assert_consumed()
    return take(it, batches)


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    for case in cases:
        batches = restore(case, case["batches"])
        np.savez(case["out"], count=len(batches), **{f"b{i}_{j}": t for i, b in enumerate(batches) for j, t in enumerate(b)})
    print("restored", len(cases), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
