"""Volume augmentation (`ReadSpec(augment=VolumeAugment(...))`): its rules, draws and host-side transforms.

The draws' statistics (flips, rotations, patch corners within binomial bounds), the box a mask
becomes against the array transforms of the dense mask, the two host-side implementations (the
batch writer `VolumePlan.write`, the random-access `example_np`) against each other and against
plain NumPy, and the direct reader's patch reads (bytes read, equal to a whole read then cut) on a
real build. End-to-end reads: test_augment_volume_reads.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vidvol import Output, ReadSpec, VolumeAugment
from vidvol.readers import augment_volume as av
from vidvol.readers.tfdata import direct_volumes
from vidvol.readers import records
from vidvol.readers import rng

EVERYTHING = VolumeAugment(patch_size=(20, 20, 24), samples_per_volume=2, flip_prob=0.3, rotate_prob=0.5, max_k=3,
                           scale_prob=0.7, scale_factors=0.2, shift_prob=0.6, shift_offsets=(5.0, 9.0))


def _plan(augment=EVERYTHING, shape=(32, 32, 32), training=True) -> av.VolumePlan:
    return av.VolumePlan(augment, "volume", shape, augment.patch_of(shape), training, "mask", None)


def _within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """Whether `count` successes of `n` draws fit probability `p` within `sigmas` binomial standard deviations."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


def test_bad_parameters_name_the_field_and_the_fix():
    with pytest.raises(ValueError, match="patch_size must be"):
        VolumeAugment(patch_size=(8, 8))
    with pytest.raises(ValueError, match="flip_prob must be a probability"):
        VolumeAugment(flip_prob=1.5)
    with pytest.raises(ValueError, match="rotate_axes must be 2 distinct"):
        VolumeAugment(rotate_axes=(1, 1))
    with pytest.raises(ValueError, match="scale_prob > 0 needs scale_factors"):
        VolumeAugment(scale_prob=0.5)
    with pytest.raises(ValueError, match="shift_offsets is set but shift_prob is 0"):
        VolumeAugment(shift_offsets=0.1)
    with pytest.raises(ValueError, match="larger than the stored volumes"):
        VolumeAugment(patch_size=(40, 8, 8)).patch_of((32, 32, 32))
    with pytest.raises(ValueError, match="sides are 16 and 8 .* equal sides"):
        VolumeAugment(patch_size=(16, 8, 8), rotate_prob=0.5).patch_of((32, 32, 32))
    assert VolumeAugment(patch_size=(16, 8, 8), rotate_prob=0.5, rotate_axes=(1, 2)).patch_of((32, 32, 32)) == (16, 8, 8)
    assert VolumeAugment(patch_size=(None, 8, None)).patch_of((32, 30, 28)) == (32, 8, 28)
    assert VolumeAugment(scale_prob=1, scale_factors=0.1).scale_factors == (-0.1, 0.1)  # MONAI: f -> (-f, f)
    with pytest.raises(ValueError, match="Output.dtype='int16' cannot hold"):
        ReadSpec(output=Output(dtype="int16"), augment=VolumeAugment(scale_prob=1, scale_factors=0.1))
    ReadSpec(output=Output(dtype="int16"), augment=VolumeAugment(patch_size=(8, 8, 8), flip_prob=0.5))  # spatial: fine
    with pytest.raises(ValueError, match="ReadSpec.augment must be"):
        ReadSpec(augment="flip")


def test_draws_are_a_pure_function_of_seed_epoch_and_index():
    plan = _plan()
    draws = lambda seed, epoch, index: plan.draws(rng.example_rng(seed, epoch, index, rng.VOLUME_AUGMENT))
    assert draws(4, 1, 7) == draws(4, 1, 7)
    assert sum(draws(4, 0, i) != draws(4, 1, i) for i in range(50)) >= 48  # each epoch differs
    assert sum(draws(4, 0, i) != draws(5, 0, i) for i in range(50)) >= 48
    assert plan.draws(None) is not None if not plan.training else True
    # Enabling a transform moves no other draw: the patch corners are the same with or without flips.
    corners = [s.start for s in draws(4, 0, 3)]
    plain = _plan(VolumeAugment(patch_size=(20, 20, 24), samples_per_volume=2))
    assert [s.start for s in plain.draws(rng.example_rng(4, 0, 3, rng.VOLUME_AUGMENT))] == corners


def test_flip_rotation_and_intensity_statistics_within_binomial_bounds():
    plan = _plan()
    samples_ = [s for i in range(2000) for s in plan.draws(rng.example_rng(11, 0, i, rng.VOLUME_AUGMENT))]
    n = len(samples_)
    for axis in range(3):
        assert _within(sum(axis in s.flips for s in samples_), n, 0.3), axis
    turns = [s.turns for s in samples_]
    assert _within(sum(t > 0 for t in turns), n, 0.5)
    rotated = sum(t > 0 for t in turns)
    for k in (1, 2, 3):  # MONAI: k uniform in 1..max_k
        assert _within(turns.count(k), rotated, 1 / 3), k
    scales = np.array([s.scale for s in samples_])
    assert _within(int((scales != 1).sum()), n, 0.7)
    drawn = scales[scales != 1] - 1
    assert drawn.min() >= -0.2 and drawn.max() <= 0.2 and abs(drawn.mean()) < 0.02
    shifts = np.array([s.shift for s in samples_])
    assert _within(int((shifts != 0).sum()), n, 0.6)
    assert shifts[shifts != 0].min() >= 5 and shifts[shifts != 0].max() <= 9


def test_patch_corners_are_uniform_over_every_position():
    plan = _plan(VolumeAugment(patch_size=(20, 32, 24)))  # 13, 1 and 9 positions per axis
    corners = np.array([plan.draws(rng.example_rng(2, 3, i, rng.VOLUME_AUGMENT))[0].start for i in range(3000)])
    for axis, positions in enumerate((13, 1, 9)):
        counts = np.bincount(corners[:, axis], minlength=positions)
        assert len(counts) == positions and corners[:, axis].min() == 0  # covers the first and the last position
        assert all(_within(int(c), len(corners), 1 / positions) for c in counts), (axis, counts)
    assert _plan(training=False).draws(None)[0].start == (16 - 10, 16 - 10, 16 - 12)  # MONAI CenterSpatialCrop


def _dense(box, shape) -> np.ndarray:
    out = np.zeros(shape, np.uint8)
    out[tuple(slice(lo, hi) for lo, hi in box)] = 1
    return out


def test_the_mask_box_follows_every_spatial_transform():
    """box_of (what vidvol.load does with a BoxMask) against np.flip/np.rot90 of the dense mask, every combination."""
    gen = np.random.default_rng(0)
    for plane in ((0, 1), (1, 2), (0, 2)):
        augment = VolumeAugment(patch_size=(12, 12, 12), flip_prob=0.5, rotate_prob=0.8, rotate_axes=plane)
        plan = _plan(augment, shape=(20, 18, 16))
        for i in range(200):
            lo = gen.integers(0, 10, 3)
            box = np.stack([lo, lo + gen.integers(0, 12, 3)], 1).clip(0, (20, 18, 16)[0])
            mask = _dense(box, plan.shape)
            for sample in plan.draws(rng.example_rng(1, 0, i, rng.VOLUME_AUGMENT)):
                view = mask[tuple(slice(s, s + p) for s, p in zip(sample.start, plan.patch))]
                if sample.flips:
                    view = np.flip(view, sample.flips)
                view = np.rot90(view, sample.turns, plane)
                np.testing.assert_array_equal(_dense(av.box_of(box.tolist(), sample, plan.patch, plane), plan.patch),
                                              view, err_msg=f"{plane} {sample}")


def _volume(gen, shape=(32, 32, 32), pad=((2, 30), (0, 32), (4, 28))):
    """A float32 volume of whole numbers, zero outside `pad` (its box mask), like a padded mri_volumes example."""
    vol = np.zeros(shape, np.float32)
    inner = tuple(slice(a, b) for a, b in pad)
    vol[inner] = gen.integers(1, 2000, vol[inner].shape)
    return vol, np.asarray(pad, np.int64)


def test_batch_writer_equals_the_random_access_transform_and_plain_numpy():
    gen = np.random.default_rng(1)
    plan = _plan()
    for i in range(40):
        vol, box = _volume(gen)
        draws = plan.draws(rng.example_rng(9, 2, i, rng.VOLUME_AUGMENT))
        for source in (vol, vol.astype(np.int16)):  # decoded float32 (TensorFlow's reader), stored int16 (direct)
            out = np.empty((plan.samples,) + plan.patch, np.float32)
            boxes = plan.write(out, source, box, draws)
            want, want_mask = plan.example_np(vol, _dense(box, plan.shape),
                                              rng.example_rng(9, 2, i, rng.VOLUME_AUGMENT))
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(np.stack([_dense(b, plan.patch) for b in boxes]), want_mask)
        for j, s in enumerate(draws):  # plain NumPy: cut, flip, turn, then x * (1 + factor) + offset where mask is 1
            x = np.rot90(np.flip(vol[s.start[0]:s.start[0] + 20, s.start[1]:s.start[1] + 20, s.start[2]:s.start[2] + 24],
                                 s.flips), s.turns, (0, 1))
            m = np.rot90(np.flip(_dense(box, plan.shape)[s.start[0]:s.start[0] + 20, s.start[1]:s.start[1] + 20,
                                                         s.start[2]:s.start[2] + 24], s.flips), s.turns, (0, 1))
            np.testing.assert_allclose(out[j], x * np.float32(s.scale) + np.float32(s.shift) * m, rtol=1e-6)
            assert not out[j][m == 0].any()  # padding stays 0 through the scale and the shift


def test_evaluation_takes_the_centre_patch_and_nothing_random():
    plan = _plan(training=False)
    vol, box = _volume(np.random.default_rng(2))
    got, mask = plan.example_np(vol, _dense(box, plan.shape), None)
    np.testing.assert_array_equal(got, vol[6:26, 6:26, 4:28])
    np.testing.assert_array_equal(mask, _dense(box, plan.shape)[6:26, 6:26, 4:28])
    assert plan.samples == 1 and plan.out_shape == (20, 20, 24)


# (patch, samples, call_bytes, mode, voxels read per patch) on 32^3 volumes: one run for the whole patch, one per
# slice (whole rows: the patch's bytes), one per (D, H) row (the patch's bytes alone), whichever costs least counting a
# call as `call_bytes`; patches
# that would together read as much as the volume: the whole volume once.
READS = [((20, 20, 24), 1, 16 << 10, "block", 19 * 32 * 32 + 19 * 32 + 24),
         ((20, 20, 24), 1, 100, "slab", 20 * (19 * 32 + 24)), ((20, 12, 32), 1, 0, "slab", 20 * 12 * 32),
         ((8, 20, 24), 2, 0, "row", 8 * 20 * 24), ((20, 20, 24), 2, 16 << 10, "block", 32 ** 3 / 2)]


@pytest.mark.parametrize("patch, samples, call, mode, voxels", READS)
def test_direct_patch_reads_read_the_patch_rows_only(mri_padded, patch, samples, call, mode, voxels):
    builder = mri_padded["tfrecord"]
    source = records.open_split(builder, "train")
    _, indexes = direct_volumes.plan_direct(builder, source, ["volume", "mask"])
    augment = VolumeAugment(patch_size=patch, samples_per_volume=samples, flip_prob=0.5,
                            rotate_prob=0.5 if patch[0] == patch[1] else 0.0)
    plan = av.plan_for(builder.info, ["volume", "mask"], augment, True)
    reads = direct_volumes.PatchReads(indexes, plan.shape, "check", plan, "float32")
    reads.call_bytes = call
    reads.mode = reads.layout()
    reads.whole = reads.reads_whole
    assert reads.mode == mode
    n = len(source.file_of)
    files, rows = source.file_of.astype(np.int64), source.row_of.astype(np.int64)
    boxes = np.tile(np.array([[0, 32]] * 3, np.int64), (n, 1, 1))
    args = lambda epoch: (files, rows, boxes, np.full(n, 5), np.full(n, epoch), np.arange(n))
    reads.run(*args(0))  # a record's first read in the process reads it whole (its CRC32C)
    reads.bytes_read = 0
    got, _ = reads.run(*args(1))
    whole = direct_volumes.VolumeReads(indexes, plan.shape, "check").run(files, rows).copy()
    want = np.stack([np.stack([av.oriented(av.cut(whole[i].astype(np.float32), s.start, plan.patch), s, plan.plane)
                               for s in d]) for i, d in enumerate(plan.batch_draws(*args(1)[3:]))])
    np.testing.assert_array_equal(got, want)
    assert reads.bytes_read == n * samples * 2 * voxels  # n volumes, `samples` patches each, 2 bytes a voxel
    if call == 0:  # reads that cost nothing but their bytes: the patch's bytes and nothing else
        assert voxels == int(np.prod(patch))
    assert reads.bytes_read <= n * 2 * 32 ** 3  # never more than the volumes
