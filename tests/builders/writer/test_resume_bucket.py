"""A bucket build that died is resumed by the next build on the same driver: its shards in the bucket kept, the rest
decoded, the published dataset byte for byte an uninterrupted bucket build's (a real S3 server, SeaweedFS).

One uninterrupted toy build into the bucket copies, at its gate between shards, the build's local staging folder and
its incomplete prefix in the bucket (what a SIGKILL there leaves). Put back beside a fresh staging folder and
prefix, the same build resumes from them.
"""

from __future__ import annotations

import logging
import os
import shutil

import pytest

import resume_toy
from resume_toy import GATE, NAME
from services import SeaweedS3
from vidvol.core import store

pytestmark = pytest.mark.slow  # a SeaweedFS server and three toy builds

BUCKET = "vidvol-resume"
POINT, GATE_NAME = "between_shards", "source:11"
SNAP = "incomplete.SNAP00_1.0.0"


def _published(url: str) -> dict[str, bytes]:
    """Every object of a published version prefix, by name (build.json without its timestamps and runner)."""
    out = {}
    for obj in store.find(url):
        name = obj[len(url) + 1:]
        out[name] = store.read_bytes(obj)
        if name == "build.json":
            import json

            doc = json.loads(out[name])
            out[name] = json.dumps({k: v for k, v in doc.items() if k not in resume_toy.TIMES}, sort_keys=True).encode()
    return out


def test_a_dead_bucket_build_is_resumed_on_the_same_driver(tmp_path, monkeypatch, caplog):
    manual = str(tmp_path / "manual")
    resume_toy.write_inputs(manual)
    with SeaweedS3(buckets=(BUCKET,)) as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        ref_url = f"s3://{BUCKET}/ref"
        GATE["snapshots"] = {GATE_NAME: str(tmp_path / "snap_local")}
        GATE["remote_snapshots"] = {GATE_NAME: f"s3://{BUCKET}/snap"}
        try:
            resume_toy.build(str(tmp_path / "stage_ref"), manual, bucket_url=ref_url)
        finally:
            GATE["snapshots"], GATE["remote_snapshots"] = {}, {}
        reference = _published(f"{ref_url}/{NAME}/1.0.0")
        decoded_whole = GATE["count"]
        assert "dataset_info.json" in reference and any(".tfrecord-" in n for n in reference)
        shards = [n for n in store.find(f"s3://{BUCKET}/snap") if n.endswith(".partial")]
        sidecars = [n for n in store.find(f"s3://{BUCKET}/snap") if n.endswith(".partial.info.json")]
        assert len(sidecars) == 2 and len(shards) >= 2  # two shards whole when it "died", one being written

        # The dead build's state, as a SIGKILL at that gate leaves it: the staging folder and the bucket prefix.
        url, stage = f"s3://{BUCKET}/run", str(tmp_path / "stage_run")
        shutil.copytree(tmp_path / "snap_local", os.path.join(stage, NAME, SNAP))
        for obj in store.find(f"s3://{BUCKET}/snap"):
            store.copy(obj, f"{url}/{NAME}/{SNAP}{obj[len(f's3://{BUCKET}/snap'):]}")
        with caplog.at_level(logging.INFO):
            builder = resume_toy.build(stage, manual, bucket_url=url)
        assert (builder.resumed.kept, builder.resumed.total) == (2, resume_toy.SHARDS)
        assert f"resuming: 2 of {resume_toy.SHARDS} shards kept, {resume_toy.SHARDS - 2} to build" in caplog.text
        assert GATE["count"] == decoded_whole - 10  # the two kept shards' inputs (5 each) were not decoded again
        assert _published(f"{url}/{NAME}/1.0.0") == reference
        # Nothing of the dead build is left: not its prefix in the bucket, not its staging folder.
        assert not [o for o in store.find(url) if "/incomplete." in o]
        assert not os.path.exists(os.path.join(stage, NAME, SNAP))
