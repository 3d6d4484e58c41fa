"""Volume augmentation end to end: `vidvol.load` (direct patch reads and TensorFlow's reader), the random-access
readers, evaluation, resuming. Real builds of int16 scans padded along two axes (`mri_padded`, tests/readers/conftest.py).

Every augmented batch is held against the stored volume of the same example, cut, flipped, turned and
scaled/shifted by plain NumPy with the draws of its (key, epoch, index): the patch and the mask must be
exactly those, and padding must stay 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import resume_cases  # tests/resume_cases.py (tests/ on sys.path)
from batch_checks import assert_same_batches
import vidvol
from vidvol import Output, ReadSpec, Tuning, VolumeAugment
from vidvol.readers import order
from vidvol.readers import rng

AUGMENT = VolumeAugment(patch_size=(20, 20, 24), flip_prob=0.5, rotate_prob=0.5, scale_prob=0.8, scale_factors=0.2,
                        shift_prob=0.8, shift_offsets=(5.0, 9.0))
SPEC = ReadSpec(augment=AUGMENT)


def _batches(builder, spec=SPEC, count=4, batch=2, **kwargs):
    kwargs = {"seed": 3, "repeat": True, **kwargs}
    return resume_cases.take(iter(vidvol.load(builder, "train", batch, spec=spec, **kwargs)), count)


def _draws(builder, seed: int, batch: int, count: int) -> list[dict]:
    """The draws (index, epoch, key) of the first `count` batches of `vidvol.load(..., seed=seed, repeat=True)`."""
    layout = order.Layout(builder.info.splits["train"].num_examples)
    ds = order.index_batches(layout, batch, drop_remainder=True, repeat=True, seed=seed, fingerprint="")
    return [{k: v.numpy() for k, v in d.items()} for d in ds.take(count)]


def _stored(builder, split="train") -> tuple[np.ndarray, np.ndarray]:
    """Every volume and mask of a split, by storage index (vidvol.load's evaluation order), unaugmented."""
    ds = vidvol.load(builder, split, 1, training=False, spec=ReadSpec(output=Output(features=("volume", "mask"))))
    rows = [(b["volume"].numpy()[0], b["mask"].numpy()[0]) for b in ds]
    return np.stack([v for v, _ in rows]), np.stack([m for _, m in rows])


def _expected(plan_augment, volume, mask, key, epoch, index):
    """Plain NumPy: each sample cut at its corner, flipped, turned, then x * (1 + factor) + offset where mask is 1."""
    plan = vidvol.readers.augment_volume.VolumePlan(plan_augment, "volume", volume.shape,
                                                    plan_augment.patch_of(volume.shape), True)
    out = []
    for s in plan.draws(rng.example_rng(int(key), int(epoch), int(index), rng.VOLUME_AUGMENT)):
        cut = tuple(slice(a, a + p) for a, p in zip(s.start, plan.patch))
        orient = lambda x: np.rot90(np.flip(x[cut], s.flips), s.turns, plan.plane)
        m = orient(mask)
        out.append((orient(volume) * np.float32(s.scale) + np.float32(s.shift) * m, m))
    return out


def test_load_gives_each_examples_transformed_patch_and_the_mask_follows(mri_padded):
    builder = mri_padded["tfrecord"]
    volumes, masks = _stored(builder)
    assert (volumes[masks == 0] == 0).all() and (masks == 0).any()  # padded, padding 0
    batches, draws = _batches(builder, count=6), _draws(builder, 3, 2, 6)  # 4 examples: 3 epochs of 2 batches
    padded = 0
    for (x, mask, _), d in zip(batches, draws):
        assert x.shape == mask.shape == (2, 20, 20, 24) and x.dtype == mask.dtype == np.float32
        for i in range(2):
            (want, want_mask), = _expected(AUGMENT, volumes[d["index"][i]], masks[d["index"][i]], d["seed"][i],
                                           d["epoch"][i], d["index"][i])
            np.testing.assert_array_equal(mask[i], want_mask)
            np.testing.assert_allclose(x[i], want, rtol=1e-6)
            assert not (x[i] * (1 - mask[i])).any()  # padding stays 0 through the scale and the shift
            padded += int((mask[i] == 0).any())
    assert padded > 0
    epochs = {int(e): [] for d in draws for e in d["epoch"]}
    for (x, _, _), d in zip(batches, draws):
        for i in range(2):
            epochs[int(d["epoch"][i])].append((int(d["index"][i]), x[i]))
    first, second = (dict(epochs[e]) for e in (0, 1))
    assert all(not np.array_equal(first[k], second[k]) for k in first)  # every example differs between epochs


@pytest.mark.slow
def test_equal_seeds_give_equal_batches_and_every_read_path_agrees(mri_padded):
    builder = mri_padded["tfrecord"]
    want = _batches(builder)
    assert_same_batches(_batches(builder), want)
    assert not np.array_equal(_batches(builder, seed=4)[0][0], want[0][0])
    for tuning in (Tuning(direct_reads=False), Tuning(parse_per_batch=False)):  # TensorFlow's reader, per example
        assert_same_batches(_batches(builder, tuning=tuning), want)
    # Spatial transforms alone: int16 volumes and uint8 masks, the float32 read's values exactly.
    spatial = VolumeAugment(patch_size=(20, 20, 24), samples_per_volume=2, flip_prob=0.5, rotate_prob=0.5)
    floats = _batches(builder, ReadSpec(augment=spatial))
    ints = _batches(builder, ReadSpec(augment=spatial, output=Output(dtype="int16", mask_dtype="uint8")))
    assert floats[0][0].shape == (2, 2, 20, 20, 24) and floats[0][2].shape == (2,)  # (batch, samples, ...), one label
    for f, n in zip(floats, ints):
        assert n[0].dtype == np.int16 and n[1].dtype == np.uint8
        np.testing.assert_array_equal(n[0].astype(np.float32), f[0])
        np.testing.assert_array_equal(n[1], f[1])
    half = _batches(builder, ReadSpec(augment=AUGMENT, output=Output(dtype="bfloat16")))
    np.testing.assert_array_equal(half[0][0], want[0][0].astype(half[0][0].dtype))
    dicts = _batches(builder, ReadSpec(augment=AUGMENT, output=Output(features=("volume", "mask", "label"))))
    for d, w in zip(dicts, want):  # dicts: the same patches, the mask as stored (uint8)
        assert d[1].dtype == np.uint8
        np.testing.assert_array_equal(d[1], w[1].astype(np.uint8))
        np.testing.assert_array_equal(d[2], w[0])


def test_random_access_readers_give_loads_patches(mri_padded):
    builder, arrays = mri_padded["tfrecord"], mri_padded["array_record"]
    want, draws = _batches(builder, count=4), _draws(builder, 3, 2, 4)
    key = int(draws[0]["seed"][0])  # vidvol.load's iteration key: the random-access readers' seed
    ds = vidvol.torch_dataset(arrays, "train", seed=key, spec=SPEC)
    for batch, d in zip(want, draws):
        ds.set_epoch(int(d["epoch"][0]))
        got = [ds[int(i)] for i in d["index"]]
        for i, ((x, mask), y) in enumerate(got):
            np.testing.assert_array_equal(x, batch[0][i])
            np.testing.assert_array_equal(mask, batch[1][i])
            assert y == batch[2][i]
    grain = vidvol.grain_dataset(arrays, "train", 2, seed=key, spec=SPEC, num_epochs=2)
    got = [resume_cases.flat(b) for b in grain]
    assert_same_batches(got, want)
    source = vidvol.data_source(arrays, "train", seed=key, spec=SPEC)  # tfds.load's types: the mask uint8
    for batch, d in zip(want, draws):
        source.set_epoch(int(d["epoch"][0]))
        for i, example in enumerate(source.__getitems__([int(i) for i in d["index"]])):
            np.testing.assert_array_equal(example["volume"], batch[0][i])
            assert example["mask"].dtype == np.uint8
            np.testing.assert_array_equal(example["mask"], batch[1][i].astype(np.uint8))
    uint8 = vidvol.torch_dataset(arrays, "train", seed=key, spec=ReadSpec(augment=AUGMENT,
                                                                          output=Output(mask_dtype="uint8")))
    uint8.set_epoch(int(draws[0]["epoch"][0]))
    (x, mask), _ = uint8[int(draws[0]["index"][0])]
    assert x.dtype == np.float32 and mask.dtype == np.uint8  # the volume stays float32 whatever the mask's dtype
    np.testing.assert_array_equal(x, want[0][0][0])


def test_evaluation_reads_the_centre_patch_deterministically(mri_padded):
    builder = mri_padded["tfrecord"]
    volumes, masks = _stored(builder, "test")
    spec = ReadSpec(augment=VolumeAugment(patch_size=(20, 20, 24), samples_per_volume=3, flip_prob=1.0,
                                          scale_prob=1.0, scale_factors=0.5))
    read = lambda: resume_cases.take(iter(vidvol.load(builder, "test", 2, spec=spec)), 5)
    first = read()
    assert_same_batches(read(), first)
    (x, mask, _), = first  # one batch: the 2 test examples, one centre patch each, no samples axis
    np.testing.assert_array_equal(x, volumes[:, 6:26, 6:26, 4:28])
    np.testing.assert_array_equal(mask, masks[:, 6:26, 6:26, 4:28])
    ds = vidvol.torch_dataset(mri_padded["array_record"], "test", spec=spec)
    np.testing.assert_array_equal(ds[1][0][0], x[1])
    source = vidvol.data_source(mri_padded["array_record"], "test", spec=spec)
    np.testing.assert_array_equal(source[1]["volume"], x[1])


@pytest.mark.slow
def test_an_augmented_read_resumes_exactly(mri_padded, tmp_path):
    case = dict(data_path=mri_padded["tfrecord"].data_path, split="train", batch=2, checkpoint=str(tmp_path / "c" / "k"),
                kwargs={"seed": 3, "repeat": True, "spec": f"ReadSpec(augment={AUGMENT!r})"}, restore_seed=77)
    after, _ = resume_cases.save(case, 3, 3)  # the next batches cross into the next epoch
    assert_same_batches(resume_cases.restore(case, 3), after)
    with_none = dict(case, kwargs={**case["kwargs"], "seed": None}, checkpoint=str(tmp_path / "u" / "k"))
    after, _ = resume_cases.save(with_none, 1, 3)
    assert_same_batches(resume_cases.restore(with_none, 3), after)


def test_what_cannot_apply_is_an_error_naming_the_fix(mri_padded, hmdb_small):
    builder = mri_padded["tfrecord"]
    with pytest.raises(ValueError, match="VolumeAugment transforms one volume feature.*Video datasets take"):
        vidvol.load(hmdb_small, "train", 2, spec=ReadSpec(augment=VolumeAugment(flip_prob=0.5)))
    with pytest.raises(ValueError, match="shift is applied where the mask is 1.*keep 'mask'"):
        vidvol.load(builder, "train", 2, spec=ReadSpec(augment=AUGMENT, output=Output(inputs=("volume",))))
    with pytest.raises(tf.errors.InvalidArgumentError, match="mask cannot be left out"):  # padded patches
        _batches(builder, ReadSpec(augment=AUGMENT, output=Output(mask_dtype=None)))
