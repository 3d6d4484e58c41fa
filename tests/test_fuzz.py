"""The fuzz lane: seeded mutations of real inputs (tests/fuzz_targets.py) end as an example, a skip or a clear error.

Hypothesis drives the mutations (derandomized: the same inputs every run; no example database), a short budget per
target in `make test` (VIDVOL_FUZZ_EXAMPLES raises it); `make bench`'s fuzz section runs the long one. Decoding goes
through the decoding child, as in a build, so a native crash is a skip and a hang is a finding.
"""

from __future__ import annotations

import datetime
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_targets as fz

EXAMPLES = int(os.environ.get("VIDVOL_FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(fz.TARGETS))
def test_mutated_inputs_end_as_an_example_a_skip_or_a_clear_error(name, workdir):
    target = fz.make(name, workdir)
    seen: dict[str, int] = {}

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=datetime.timedelta(seconds=60),
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(seed=st.integers(0, len(target.seeds) - 1), ops=fz.ops_strategy())
    def one(seed, ops):
        outcome = target.check(fz.mutate(target.seeds[seed], ops, target.region))
        seen[outcome] = seen.get(outcome, 0) + 1

    try:
        for data in target.seeds:  # every seed, unmutated, is an example: the target reaches the real path
            assert target.check(data) == "example", f"{name}: a seed input is not an example"
        one()
    finally:
        target.close()
    assert sum(seen.values()) >= min(EXAMPLES, 10), seen


def test_mutations_are_deterministic_and_stay_in_their_region():
    data = bytes(range(256)) * 4
    ops = [("flip", 5, 1), ("set", 700, 3), ("insert", 9, 2), ("delete", 1000, 4), ("duplicate", 3, 7)]
    assert fz.mutate(data, ops) == fz.mutate(data, ops) != data
    header = fz.mutate(data, [("flip", 10**6 + 7, 0), ("set", 2**30, 1)], region=16)
    assert header[16:] == data[16:] and header[:16] != data[:16]
    assert fz.mutate(data, [("truncate", 100, 0)]) == data[:100]
    import random

    a, b = random.Random(3), random.Random(3)
    assert fz.random_ops(a) == fz.random_ops(b)


# -- what the lane found, each fixed, kept as a plain test -------------------------------------


def test_a_rar_whose_damaged_header_breaks_rarfiles_parser_is_an_archive_error(tmp_path):
    """rarfile let a ValueError out of a damaged RAR3 time field ("microsecond must be in 0..999999")."""
    import rar_samples
    from vidvol.builders.sources import archive

    data = fz.mutate((rar_samples.samples_dir() / "rar3-subdirs.rar").read_bytes(), [("delete", 1375470614, 50422)])
    path = str(tmp_path / "damaged.rar")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(archive.ArchiveError, match="damaged.rar") as caught:
        archive.extract_rar(path, str(tmp_path / "out"))
    assert "damaged headers" in str(caught.value) and not (tmp_path / "out").exists()


def _edited(path: str, change):
    """A context: the JSON file at `path` changed by `change(doc)` while it lasts, restored after."""
    import contextlib
    import json

    @contextlib.contextmanager
    def edit():
        original = open(path, "rb").read()
        doc = change(json.loads(original))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        try:
            yield
        finally:
            with open(path, "wb") as f:
                f.write(original)
    return edit()


@pytest.mark.slow  # one small build (shared with the fuzz targets)
def test_verify_fails_where_the_lane_found_it_passing_or_crashing(workdir):
    from vidvol.cli import verify as verify_cli

    data_dir, data_path = fz._built(workdir)

    def run():
        report = verify_cli.verify(data_path, dataset="mri_volumes/small_32", data_dir=data_dir)
        return report.exit_code, "\n".join(report.lines())

    assert run()[0] == 0
    shards, info = os.path.join(data_path, "shards.json"), os.path.join(data_path, "dataset_info.json")
    with _edited(shards, lambda d: {**d, "shards": [{**d["shards"][0], "split": "trai}n"}] + d["shards"][1:]}):
        code, out = run()  # passed: the entry's split was never compared with dataset_info.json's
        assert code == 1 and "shards.json files it under split 'trai}n', dataset_info.json under 'train'" in out, out
    with _edited(shards, lambda d: {**d, "shards": [{**d["shards"][0], "file": ["x"]}] + d["shards"][1:]}):
        code, out = run()  # crashed: TypeError: unhashable type: 'list'
        assert code == 1 and "`file` is an array, expected a shard file name" in out, out
    with _edited(info, lambda d: {**d, "configName": "other"}):
        code, out = run()  # passed
        assert code == 1 and "describes mri_volumes/other 2.0.0, but this folder holds mri_volumes/small_32" in out, out
    with _edited(info, lambda d: {k: v for k, v in d.items() if k != "name"}):
        code, out = run()  # crashed: ValueError: Could not format template {DATASET}-...
        assert code == 1 and "dataset_info.json" in out, out
    assert run()[0] == 0


@pytest.mark.slow  # one small build (shared with the fuzz targets)
def test_a_malformed_grain_state_is_a_value_error_at_the_restore(workdir):
    import vidvol

    data_dir, _ = fz._built(workdir)
    ds = vidvol.grain_dataset("mri_volumes/small_32", "train", 2, data_dir=data_dir, seed=3)
    it = iter(ds)
    next(it)
    state = it.get_state()
    for bad, said in (({k: v for k, v in state.items() if k != "data"}, "no `data`"),  # was KeyError: 'data'
                      ({**state, "iterator": {"next_index": 1.5}}, "`iterator.next_index` is 1.5"),  # failed next()
                      ({**state, "seed": 2**63}, "`seed` is 9223372036854775808"),  # OverflowError at next()
                      ({**state, "start": "x"}, "`start` is 'x'"), ([1], "it is a list")):
        fresh = iter(ds)
        with pytest.raises(ValueError, match="grain_dataset: this iterator state is malformed") as caught:
            fresh.set_state(bad)
        assert said in str(caught.value), caught.value
        next(fresh)  # a failed restore changes nothing
    fresh = iter(ds)
    fresh.set_state(state)
    assert [b[1].tolist() for b in fresh] == [b[1].tolist() for b in it]


def test_a_nifti_whose_affine_has_no_orientation_is_a_skip_naming_it(tmp_path):
    """A header whose sform sends two voxel axes along one world axis: nibabel finds no orientation; the ValueError
    ("cannot determine orientation of affine") did not name the file."""
    import functools

    import numpy as np

    from vidvol.builders import example_io
    from vidvol.builders.transforms import volume_examples as ve
    from vidvol.datasets.mri_volumes import make_dummy_data as dummy

    affine = np.diag([1.0, 1.2, 1.5, 1.0])
    affine[1, 2] = 1.5e23  # as the fuzz lane's input had it: voxel axes 1 and 2 both along world y
    path = dummy.write_nifti(str(tmp_path / "skew.nii"), np.ones((8, 9, 10), np.int16), affine)
    source = ve.VolumeSource(path=path, key="skew", features={"label": 0}, origin="labels.csv:2")
    fn = functools.partial(ve.volume_example, spec=ve.VolumeSpec(spatial_size=(8, 8, 8)))
    (skip,) = list(example_io.run_example_fn(fn, ("skew", source), "train"))
    assert path in skip.reason and "cannot determine the orientation" in skip.reason, skip.reason
