"""Hostile MRI inputs: header bombs, gzip bombs, truncated and corrupt files, odd names, NaN and 4-D/5-D scans.

Each file becomes an example or a skip whose reason says why (with the claimed and the actual
numbers where a header lies), a build over all of them beside good scans succeeds, and a worker's
memory follows what the example needs, not what a header claims (measured in a child process).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import decoding_cases
import hostile_mri
from vidvol.builders import example_io, isolation
from vidvol.builders.transforms import volume
from vidvol.builders.transforms import volume_examples as ve
from vidvol.builders.transforms import volume_io
from vidvol.datasets.mri_volumes import make_dummy_data as dummy
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri

MIB = 2**20
LIMIT = 512 * MIB  # max_source_bytes of these tests: the 2 GiB gzip bomb is over it, the 256 MiB scan under
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(path: str, key: str, **spec):
    """What volume_example yields for one file, through the writer's error handling."""
    source = ve.VolumeSource(path=path, key=key, features={"label": 0}, origin="labels.csv:2")
    fn = functools.partial(ve.volume_example, spec=ve.VolumeSpec(spatial_size=(16, 16, 16), max_source_bytes=LIMIT, **spec))
    return list(example_io.run_example_fn(fn, (key, source), "train"))


def _check_case(case: hostile_mri.Case, examples: set[str], skips: dict[str, list[dict]]) -> None:
    """The case's file became what it must: an example (with its NaN report), or one skip naming why."""
    reasons = skips.get(case.name, [])
    if case.example:
        assert case.name in examples, (case.name, reasons)
        whole = [r for r in reasons if not r.get("example")]
        assert not whole, (case.name, whole)
        if case.nonfinite:
            assert [r["reason"] for r in reasons] == [f"{case.nonfinite} non-finite voxels set to 0"]
    else:
        assert case.name not in examples, case.name
        assert len(reasons) == 1 and not reasons[0].get("example"), (case.name, reasons)
        for phrase in case.phrases:
            assert phrase in reasons[0]["reason"], (case.name, phrase, reasons[0]["reason"])


def test_every_hostile_file_is_an_example_or_a_skip_naming_the_numbers(tmp_path):
    cases = hostile_mri.write_corpus(str(tmp_path), max_source_bytes=LIMIT, big_shape=(96, 96, 72))
    examples, skips = set(), {}
    for case in cases:
        for item in _run(str(tmp_path / case.name), case.name):
            if isinstance(item, example_io.Skip):
                assert item.source == case.name
                skips.setdefault(case.name, []).append(item.as_dict())
                assert str(tmp_path / case.name) in item.reason or item.example, item
            else:
                key, example = item
                assert example["volume"].shape == (16, 16, 16) and np.isfinite(example["volume"]).all()
                examples.add(key)
    for case in cases:
        _check_case(case, examples, skips)
    assert {c.name for c in cases} == examples | set(skips)


def test_a_gzip_stream_is_never_inflated_past_its_claim(tmp_path):
    cases = {c.name: c for c in hostile_mri.write_corpus(str(tmp_path), max_source_bytes=LIMIT, big_shape=(16, 16, 16))}
    assert cases["long_stream.nii.gz"].example
    claim = 352 + 16**3 * 4
    with volume_io.open_image(str(tmp_path / "long_stream.nii.gz")) as opened:
        reader = opened.dataobj.file_like
        assert reader.limit == claim and reader.consumed <= 540  # the header only, so far
        data = volume_io.read_float32(opened.dataobj, (...,))
        assert reader.consumed == claim  # the voxels, and not one byte of the 512 MiB after them
    np.testing.assert_array_equal(data, dummy.head_like((16, 16, 16), 3).astype(np.float32))
    # The lowered limit turns the same claim into a skip before a voxel is read.
    with pytest.raises(volume.VolumeError, match=rf"{16**3 * 4} bytes, over max_source_bytes 1000"):
        with volume_io.open_image(str(tmp_path / "long_stream.nii.gz"), max_source_bytes=1000):
            pass


def test_4d_claims_count_the_volumes_up_to_the_one_read(tmp_path):
    data = np.arange(6 * 5 * 4 * 3, dtype=np.float32).reshape(6, 5, 4, 3)
    path = dummy.write_nifti(str(tmp_path / "four.nii"), data, np.eye(4), dtype=np.float32)
    one = 6 * 5 * 4 * 4
    with pytest.raises(volume.VolumeError, match=rf"\({3 * one} bytes up to volume 2\), {3 * one} bytes, over "
                                                 rf"max_source_bytes {2 * one}"):
        volume.load_volume(path, volume_index=2, max_source_bytes=2 * one)
    np.testing.assert_array_equal(volume.load_volume(path, volume_index=1, max_source_bytes=2 * one).data, data[..., 1])


def test_a_file_name_that_is_not_utf8_builds(tmp_path):
    name = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.nii.gz")
    try:
        open(name, "wb").close()
    except OSError as e:  # a filesystem that only holds UTF-8 names
        pytest.skip(f"this filesystem refuses a Latin-1 file name: {e}")
    data = dummy.head_like((20, 18, 16), 4)
    dummy.write_nifti(str(tmp_path / "plain.nii.gz"), data, np.eye(4), dtype=np.float32)
    os.replace(str(tmp_path / "plain.nii.gz"), name)
    path = os.fsdecode(name)  # 'caf\udce9.nii.gz', as os.listdir gives it
    (key, example), = _run(path, "caf.nii.gz")
    np.testing.assert_array_equal(example["mask"].sum(), 16**3)
    np.testing.assert_array_equal(volume.load_volume(name).data, data.astype(np.float32))  # bytes work too
    broken = os.path.join(os.fsencode(str(tmp_path)), b"\xff\xfe.nii")
    with open(broken, "w", encoding="utf-8") as f:
        f.write("not an image\n" * 30)
    (skip,) = _run(os.fsdecode(broken), "broken")
    assert isinstance(skip, example_io.Skip) and "not a readable NIfTI" in skip.reason
    assert "\\xff\\xfe.nii" in skip.reason and "volume.nii" not in skip.reason  # the real name, not the link's
    skip.reason.encode("utf-8")  # a report can be written


CHILD = r"""
import json, sys
import tensorflow_datasets as tfds
import in_process_build
from peak_memory import peak_rss_mib
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
config = mri.MriVolumesConfig(name="hostile_16", spatial_size=(16, 16, 16), max_source_bytes=int(sys.argv[4]))
peak = lambda: peak_rss_mib() * 2**20  # VmHWM: this process's own (ru_maxrss carries the pytest worker's)
in_process_build.build(mri.Builder, config, sys.argv[1], sys.argv[3] + "/warm")  # good scans: imports, Beam, TF warm
before = peak()
builder = in_process_build.build(mri.Builder, config, sys.argv[2], sys.argv[3] + "/hostile")
after = peak()
paths = [ex["path"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train"))]
report = json.load(open(builder.data_dir + "/skip_report.json"))
json.dump({"before": before, "after": after, "paths": paths, "skipped": report["skipped"]}, sys.stdout)
"""


def _manual(folder, names) -> str:
    """manual_dir listing `names` (in folder/volumes) in labels.csv, all in train."""
    with open(os.path.join(folder, "labels.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "subject", "split"])
        writer.writerows((f"volumes/{n}", "scan", f"sub-{i}", "train") for i, n in enumerate(names))
    return str(folder)


@pytest.mark.slow  # a child process with TensorFlow and two in-process Beam builds
def test_a_build_over_hostile_scans_succeeds_with_bounded_memory(tmp_path):
    manual = tmp_path / "manual"
    cases = hostile_mri.write_corpus(str(manual / "volumes"), max_source_bytes=LIMIT)  # big.nii.gz: 512^3 int16, 256 MiB
    warm = tmp_path / "warm"
    (warm / "volumes").mkdir(parents=True)
    for name in ("good_ras.nii.gz", "good_lps.nii"):
        os.symlink(manual / "volumes" / name, warm / "volumes" / name)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, _manual(warm, ["good_ras.nii.gz", "good_lps.nii"]),
         _manual(manual, [c.name for c in cases]), str(tmp_path / "data"), str(LIMIT)],
        capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])))
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout)
    examples = {p.removeprefix("volumes/") for p in result["paths"]}
    skips: dict[str, list[dict]] = {}
    for s in result["skipped"]:
        skips.setdefault(s["source"].removeprefix("volumes/"), []).append(s)
    for case in cases:
        _check_case(case, examples, skips)
    assert {c.name for c in cases} == examples | set(skips)
    # A worker holds what the 16^3 example needs: reading the 256 MiB scan whole took >= 768 MiB (int16 + float32).
    grown = (result["after"] - result["before"]) / MIB
    print(f"peak RSS {result['before'] / MIB:.0f} MiB after the warm-up build, {result['after'] / MIB:.0f} MiB after the hostile one")
    assert grown < 256, f"peak RSS grew by {grown:.0f} MiB over the warm-up build"


def test_a_volume_read_stalled_in_the_kernel_meets_its_deadline_and_is_one_skip(tmp_path, monkeypatch):
    """mri_volumes reads each scan in a decoding child (as videos are decoded): a read that never returns is killed
    at VIDVOL_DECODE_TIMEOUT_S and is that scan's skip; the next read of the same file, unstalled, is its example."""
    path = dummy.write_nifti(str(tmp_path / "stalled.nii.gz"), np.arange(8 * 9 * 10, dtype=np.int16).reshape(8, 9, 10),
                             dummy.affine_for((8, 9, 10), (1.0, 1.0, 1.0)))
    os.mkfifo(path + ".fifo")
    monkeypatch.setenv(isolation.TIMEOUT_ENV, "1.5")
    builder = mri.Builder(config="small_32", data_dir=str(tmp_path / "data"))
    generated = builder._generate_examples([], str(tmp_path), ["scan"])
    assert isinstance(generated.example_fn, isolation.InChild) and generated.example_fn.timeout_s is None
    read = isolation.InChild(generated.example_fn.example_fn, setup=[decoding_cases.stall_volume_reads])
    source = ve.VolumeSource(path=path, key="stalled.nii.gz", features={"label": 0, "path": "stalled.nii.gz",
                                                                          "subject": ""}, origin="labels.csv:2")
    began = time.monotonic()
    (skip,) = list(example_io.run_example_fn(read, (source.key, source), "train"))
    took = time.monotonic() - began
    pid, scratch = open(path + ".pid").read().split()
    assert skip.reason.startswith(f"DecoderTimeout: {path}: the decoder gave no answer within 1.5 s"), skip.reason
    assert isolation.TIMEOUT_ENV in skip.reason and 1.5 <= took < 60, took
    assert decoding_cases.gone(int(pid)) and not os.path.exists(scratch)  # killed, its scratch folder gone
    os.remove(path + ".fifo")
    ((key, example),) = list(example_io.run_example_fn(read, (source.key, source), "train"))
    assert key == "stalled.nii.gz" and example["volume"].shape == (32, 32, 32) and example["mask"].sum() == 8 * 9 * 10
