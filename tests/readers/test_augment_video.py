"""Read-time video augmentation (`vidvol.VideoAugment`): draws, statistics, evaluation crops, and all four readers.

The draws and crops are checked directly (`augment_video.Geometry`) on synthetic frames of known
content and over thousands of keys (flip rate, crop area, aspect and placement within binomial
bounds); the readers on hmdb51's dummy data built twice by the real Beam pipeline (TFRecord for
`vidvol.load`, ArrayRecord for `data_source` / `grain_dataset` / `torch_dataset`), which must give
the same crops for the same (key, epoch, index).
"""

from __future__ import annotations

import math
import pickle

import cv2
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol
from vidvol import Clips, Normalize, Output, ReadSpec, VideoAugment
from vidvol.readers import order
from vidvol.readers import rng

HMDB = "hmdb51/split1_20x64x64"


def _keys(seed: int, epoch: int, count: int) -> np.ndarray:
    return rng.seed_np(seed, epoch, np.arange(count), rng.VIDEO_AUGMENT)


def _within_binomial(hits: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


# -- the spec ------------------------------------------------------------------------------------


def test_defaults_follow_the_peers_and_values_are_canonical():
    a = VideoAugment(56)
    assert a.crop_size == (56, 56) and a.training_crop == "random_resized_crop"
    assert a.scale == (0.08, 1.0) and a.aspect_ratio == (3 / 4, 4 / 3)  # pytorchvideo's RandomResizedCrop defaults
    assert a.horizontal_flip_prob == 0.5 and not a.multi_crop and a.min_size is None and a.max_size is None
    assert VideoAugment((48, np.int64(40))).crop_size == (48, 40)
    spec = ReadSpec(augment=a)
    assert spec.changed() == ("augment",) and ReadSpec().augment is None
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(ReadSpec(augment=VideoAugment(56)))
    with pytest.raises(AttributeError):
        a.crop_size = 4  # frozen


@pytest.mark.parametrize("make,message", [
    (lambda: VideoAugment(0), r"VideoAugment.crop_size must be an integer >= 1 or \(height, width\), got \(0, 0\)"),
    (lambda: VideoAugment((32, 32, 3)), r"VideoAugment.crop_size must be"),
    (lambda: VideoAugment(32, training_crop="inception"), r"training_crop must be one of \['random_resized_crop'"),
    (lambda: VideoAugment(32, scale=(0.5, 0.2)), r"VideoAugment.scale must be \(low, high\) with 0 < low <= high"),
    (lambda: VideoAugment(32, scale=(0.5, 2.0)), r"VideoAugment.scale is a fraction of the frame's area"),
    (lambda: VideoAugment(32, aspect_ratio=(0, 1)), r"VideoAugment.aspect_ratio must be"),
    (lambda: VideoAugment(32, min_size=0), r"VideoAugment.min_size must be None or an integer >= 1, got 0"),
    (lambda: VideoAugment(32, training_crop="random_short_side_scale", min_size=40, max_size=36),
     r"VideoAugment.max_size needs min_size <= max_size"),
    (lambda: VideoAugment(32, horizontal_flip_prob=1.5), r"horizontal_flip_prob must be a probability in \[0, 1\]"),
    (lambda: VideoAugment(32, multi_crop=1), r"VideoAugment.multi_crop must be True or False, got 1"),
    (lambda: VideoAugment(32, min_size=32, max_size=40), r"max_size is the short side's jitter"),
    (lambda: VideoAugment(32, training_crop="random_short_side_scale", scale=(0.5, 1.0)), r"take.* min_size and max_size"),
    (lambda: ReadSpec(augment=Clips()), r"ReadSpec.augment must be None, a vidvol.VideoAugment or a vidvol.VolumeAugment"),
    (lambda: VideoAugment(72).geometry((64, 64, 3), training=False), r"does not fit 'video'.s frames of 64x64 at "
                                                                     r"evaluation.*set min_size >= 72"),
    (lambda: VideoAugment(32, min_size=16).geometry((64, 64, 3), training=False), r"does not fit.*short side at 16"),
    (lambda: VideoAugment(32).geometry((None, 64, 3), training=True), r"needs frames of a fixed size"),
])
def test_bad_values_are_value_errors_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# -- the draws -----------------------------------------------------------------------------------


def test_same_key_same_crops_and_every_epoch_differs():
    g = VideoAugment(48).geometry((64, 80, 3), training=True)
    boxes, flips = g.training_boxes(_keys(7, 0, 64))
    again, flips_again = g.training_boxes(_keys(7, 0, 64))
    np.testing.assert_array_equal(boxes, again)
    np.testing.assert_array_equal(flips, flips_again)
    for other in (_keys(7, 1, 64), _keys(8, 0, 64)):  # the next epoch, another seed: other crops
        changed, _ = g.training_boxes(other)
        assert (changed != boxes).any(axis=-1).mean() > 0.9
    one = rng.seed_np(7, 0, 5, rng.VIDEO_AUGMENT)  # one example alone draws what it draws in a batch
    np.testing.assert_array_equal(g.training_boxes(one[None])[0][0], boxes[5])
    tf_keys = rng.example_seed(7, 0, tf.range(64, dtype=tf.int64), rng.VIDEO_AUGMENT)  # vidvol.load's keys
    np.testing.assert_array_equal(tf_keys.numpy(), _keys(7, 0, 64))


def test_random_resized_crop_statistics():
    n = 6000
    g = VideoAugment(32).geometry((64, 64, 3), training=True)
    boxes, flips = g.training_boxes(_keys(1, 0, n))
    y, x, h, w = boxes[:, 0].T
    assert ((y >= 0) & (x >= 0) & (y + h <= 64) & (x + w <= 64) & (h >= 1) & (w >= 1)).all()
    assert _within_binomial(int(flips.sum()), n, 0.5)
    area = h * w / 64**2
    ratio = w / h
    slack = 1 / h + 1 / w  # whole pixels move a box's area and aspect by up to about this much
    assert (area >= 0.08 * (1 - slack) - 1e-9).all() and (area <= 1.0).all()
    assert ((ratio >= 0.75 * (1 - slack)) & (ratio <= 4 / 3 * (1 + slack))).all()
    # Below 3/4 of the area no aspect in range is refused, so there the area is uniform in [0.08, 0.75] and the aspect
    # log-uniform in [3/4, 4/3]: half below the middle of each.
    small = area <= 0.75
    assert small.sum() > n * 0.6
    assert _within_binomial(int((area[small] <= (0.08 + 0.75) / 2).sum()), int(small.sum()), 0.5)
    assert _within_binomial(int((ratio[small] > 1).sum()), int((small & (ratio != 1)).sum()), 0.5)
    # Placement uniform: a box's offset in [0, 64 - size] lands in the lower half of that range half of the time.
    free = (64 - h) >= 8
    assert _within_binomial(int((y[free] * 2 < 64 - h[free] + 1).sum()), int(free.sum()), 0.5, sigmas=5)
    assert _within_binomial(int((x[free] * 2 < 64 - w[free] + 1).sum()), int(free.sum()), 0.5, sigmas=5)
    # No try fits: the central crop (pytorchvideo's fallback), here with a frame far wider than any aspect allowed.
    wide = VideoAugment(32, scale=(1.0, 1.0)).geometry((20, 100, 3), training=True)
    (fallback,), _ = wide.training_boxes(_keys(1, 0, 1))
    np.testing.assert_array_equal(fallback, [[0, 36, 20, 27]])  # h = 20, w = round(20 * 4/3), x = (100 - 27) // 2


def test_short_side_scale_statistics():
    n = 4000
    a = VideoAugment((40, 48), training_crop="random_short_side_scale", min_size=48, max_size=64,
                      horizontal_flip_prob=0.25)
    g = a.geometry((60, 80, 3), training=True)
    boxes, flips = g.training_boxes(_keys(3, 2, n))
    y, x, h, w = boxes[:, 0].T
    assert _within_binomial(int(flips.sum()), n, 0.25)
    sizes = np.arange(48, 65)  # pytorchvideo's RandomShortSideScale: an integer in [min_size, max_size]
    expected = {(round(40 * 60 / s), round(48 * 60 / s)) for s in sizes}
    assert set(zip(h.tolist(), w.tolist())) <= expected
    largest, smallest = (h == 50) & (w == 60), (h == round(40 * 60 / 64)) & (w == 45)
    assert _within_binomial(int(largest.sum()), n, 1 / len(sizes)) and _within_binomial(int(smallest.sum()), n, 1 / len(sizes))
    assert ((y >= 0) & (y + h <= 60) & (x >= 0) & (x + w <= 80)).all()
    assert _within_binomial(int((x * 2 < 80 - w + 1).sum()), n, 0.5, sigmas=5)
    unscaled = VideoAugment(40, training_crop="random_short_side_scale").geometry((64, 64, 3), training=True)
    fixed, _ = unscaled.training_boxes(_keys(3, 2, 500))
    assert (fixed[:, 0, 2:] == 40).all() and not unscaled.needs_resize(fixed)  # DMVR's min_resize met: copies only
    assert len(set(map(tuple, fixed[:, 0, :2].tolist()))) > 100


def _coordinates(height: int, width: int, steps: int = 2) -> np.ndarray:
    """uint8 frames (1, steps, H, W, 3) whose pixel holds its own column, row and frame number."""
    yy, xx = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    frame = np.stack([xx, yy, np.zeros_like(xx)], -1).astype(np.uint8)
    frames = np.stack([frame] * steps)
    frames[..., 2] = np.arange(steps)[:, None, None]
    return frames[None]


def test_evaluation_crops_are_the_centre_or_three_along_the_long_side():
    wide = _coordinates(48, 80)
    centre = VideoAugment(40).geometry((48, 80, 3), training=False).crop(wide, (2,), None)
    assert centre.shape == (1, 2, 40, 40, 3)
    assert (centre[0, 0, 0, 0, :2] == [20, 4]).all()  # DMVR's central crop: offset (80 - 40) // 2, (48 - 40) // 2
    three = VideoAugment(40, multi_crop=True).geometry((48, 80, 3), training=False)
    out = three.crop(wide, (2,), None)
    assert out.shape == (1, 3, 2, 40, 40, 3)
    assert [tuple(out[0, k, 0, 0, 0, :2]) for k in range(3)] == [(0, 4), (20, 4), (40, 4)]  # left, centre, right
    np.testing.assert_array_equal(out[0, 2, :, -1, -1, :2], [[79, 43]] * 2)
    np.testing.assert_array_equal(out[0, :, :, 0, 0, 2], [[0, 1]] * 3)  # every frame, in order
    tall = _coordinates(80, 48)
    out = VideoAugment(40, multi_crop=True).geometry((80, 48, 3), training=False).crop(tall, (2,), None)
    assert [tuple(out[0, k, 0, 0, 0, :2]) for k in range(3)] == [(4, 0), (4, 20), (4, 40)]  # top, centre, bottom
    clips = np.concatenate([wide, wide + np.array([0, 0, 10], np.uint8)], axis=1).reshape(1, 2, 2, 48, 80, 3)
    out = three.crop(clips, (2, 2), None)  # eval clips: (N, T) lead dims, the second clip's frames numbered 10, 11
    assert out.shape == (1, 6, 2, 40, 40, 3)  # N * 3 views, clip-major: view v is clip v // 3, crop v % 3
    assert [tuple(out[0, v, 1, 0, 0, [0, 2]]) for v in range(6)] == [(0, 1), (20, 1), (40, 1), (0, 11), (20, 11), (40, 11)]
    scaled = VideoAugment(32, min_size=40).geometry((48, 80, 3), training=False)  # short side 48 -> 40: a 38.4 box
    np.testing.assert_array_equal(scaled.eval_boxes(), [[5, 21, 38, 38]])
    want = cv2.resize(wide[0, 1, 5:43, 21:59], (32, 32), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(scaled.crop(wide, (2,), None)[0, 1], want)


def test_crops_are_the_box_resized_and_flips_are_mirrors():
    rs = np.random.default_rng(0)
    frames = rs.integers(0, 256, (2, 3, 40, 50, 3), dtype=np.uint8)
    g = VideoAugment((24, 30)).geometry((40, 50, 3), training=True)
    keys = _keys(5, 0, 2)
    (boxes, flips), out = g.training_boxes(keys), g.crop(frames, (3,), keys)
    for b in range(2):
        y, x, h, w = boxes[b, 0]
        for t in range(3):
            want = cv2.resize(frames[b, t, y:y + h, x:x + w], (30, 24), interpolation=cv2.INTER_LINEAR)
            np.testing.assert_array_equal(out[b, t], want[:, ::-1] if flips[b] else want)
    whole = VideoAugment(40, scale=(1.0, 1.0), aspect_ratio=(1.0, 1.0), horizontal_flip_prob=1.0)
    square = frames[:, :, :, :40]
    flipped = whole.geometry((40, 40, 3), training=True).crop(np.ascontiguousarray(square), (3,), keys)
    np.testing.assert_array_equal(flipped, square[:, :, :, ::-1])  # the whole frame, mirrored, no resize
    kept = VideoAugment(40, scale=(1.0, 1.0), aspect_ratio=(1.0, 1.0), horizontal_flip_prob=0.0)
    np.testing.assert_array_equal(kept.geometry((40, 40, 3), training=True).crop(np.ascontiguousarray(square), (3,), keys),
                                  square)
    grey = frames[..., :1]
    out = VideoAugment((24, 30)).geometry((40, 50, 1), training=True).crop(np.ascontiguousarray(grey), (3,), keys)
    assert out.shape == (2, 3, 24, 30, 1)
    y, x, h, w = boxes[0, 0]
    want = cv2.resize(np.ascontiguousarray(grey[0, 1, y:y + h, x:x + w, 0]), (30, 24), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(out[0, 1, :, :, 0], want[:, ::-1] if flips[0] else want)


def _frame_by_frame(frames: np.ndarray, boxes: np.ndarray, flips: np.ndarray | None, size: tuple) -> np.ndarray:
    """The crops spelled out one frame at a time: (B, N, T, H, W, C) -> (B, N, K, T, h, w, C), OpenCV's resize per frame."""
    batch, clips, steps = frames.shape[:3]
    out = np.zeros((batch, clips, boxes.shape[1], steps) + tuple(size) + frames.shape[-1:], np.uint8)
    for b, m, k, t in np.ndindex(out.shape[:4]):
        y, x, h, w = boxes[b, k]
        crop = np.ascontiguousarray(frames[b, m, t, y:y + h, x:x + w])
        if (h, w) != tuple(size):
            crop = cv2.resize(crop, size[::-1], interpolation=cv2.INTER_LINEAR).reshape(size + crop.shape[-1:])
        out[b, m, k, t] = crop[:, ::-1] if flips is not None and flips[b] else crop
    return out


@pytest.mark.parametrize("channels", [3, 1])
def test_every_crop_path_equals_a_frame_by_frame_crop(channels):
    """The batch loops (views of the output, resizes into it, flips in place or while copying) give what frame-by-frame
    slicing, `cv2.resize` and a mirror give, bit for bit: resized and copied boxes, flipped or not, clips x views."""
    rs = np.random.default_rng(7)
    frames = rs.integers(0, 256, (6, 2, 3, 45, 61, channels), dtype=np.uint8)  # (B, N clips, T, H, W, C)
    keys = _keys(9, 1, 6)
    cases = [(VideoAugment((20, 26), scale=(0.2, 1.0)), True),  # random resized crops: every box resized
             (VideoAugment((20, 26), training_crop="random_short_side_scale"), True),  # copies only
             (VideoAugment((20, 26), training_crop="random_short_side_scale", min_size=30, max_size=50), True),
             (VideoAugment((20, 26), multi_crop=True), False),  # 3 copies per clip
             (VideoAugment((20, 26), min_size=36, multi_crop=True), False)]  # 3 resized boxes per clip
    flipped = set()
    for augment, training in cases:
        g = augment.geometry(frames.shape[-3:], training)
        if training:
            boxes, flips = g.training_boxes(keys)
            flipped |= set(flips.tolist())
        else:
            boxes, flips = np.broadcast_to(g.eval_boxes(), (6, g.views, 4)), None
        out = g.crop(frames, (2, 3), keys if training else None)
        want = _frame_by_frame(frames, boxes, flips, (20, 26)).reshape(out.shape)
        np.testing.assert_array_equal(out, want, err_msg=repr(augment))
        single = g.crop(frames[:, 1], (3,), keys if training else None)  # (T,) lead: the second clip alone
        np.testing.assert_array_equal(single, want.reshape((6, 2, g.views, 3) + want.shape[-3:])[:, 1].reshape(single.shape))
    assert flipped == {True, False}  # both kinds of clip were compared


# -- the readers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hmdb_dirs(hmdb_dummy_builds):
    """hmdb51's default config from its dummy data, as TFRecord and ArrayRecord (tests/readers/conftest.py)."""
    return hmdb_dummy_builds


def _load(dirs, split, batch, **kwargs):
    return vidvol.load(HMDB, split, batch, data_dir=dirs["tfrecord"], **kwargs)


def _iteration_key(seed: int, examples: int) -> int:
    """The key of the first pass of `vidvol.load(seed=seed)` over one pipeline (what its draws carry: readers.order)."""
    draws = order.index_batches(order.Layout(examples), 1, drop_remainder=True, repeat=False, seed=seed, fingerprint="")
    return int(next(iter(draws))["seed"][0])


def _by_id(batches, epochs: int, per_epoch: int) -> dict:
    """{(epoch, video_id): video} of dict batches read in order over `epochs` epochs of `per_epoch` examples."""
    out, seen = {}, 0
    for batch in batches:
        for video, vid in zip(batch["video"], batch["video_id"]):
            out[(seen // per_epoch, vid)] = video
            seen += 1
    assert seen == epochs * per_epoch
    return out


@pytest.mark.slow  # three repeating pipelines (make test); the fast lane keeps test_all_four_readers_give_the_same_training_crops
def test_load_crops_are_seeded_static_and_new_every_epoch(hmdb_dirs):
    spec = ReadSpec(augment=VideoAugment(48), output=Output(features=["video", "video_id"], dtype="uint8"))
    read = lambda seed: list(tfds.as_numpy(_load(hmdb_dirs, "train", 2, seed=seed, repeat=True, spec=spec).take(6)))
    a, b, c = read(1), read(1), read(2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["video"], y["video"])
    assert any(not np.array_equal(x["video"], y["video"]) for x, y in zip(a, c))
    crops = _by_id(a, 2, 6)
    assert sum(not np.array_equal(crops[(0, vid)], crops[(1, vid)]) for e, vid in crops if e == 0) >= 5
    ds = _load(hmdb_dirs, "train", 2, seed=1, spec=ReadSpec(augment=VideoAugment((48, 40))))
    (x, mask), y = ds.element_spec
    assert x.shape == (2, 20, 48, 40, 3) and x.dtype == tf.float32 and mask.shape == (2, 20)  # static: batches stack


def test_all_four_readers_give_the_same_training_crops(hmdb_dirs):
    augment = VideoAugment(48, scale=(0.3, 1.0))  # random resized crops (resized by OpenCV) and flips
    seed, key = 11, _iteration_key(11, 6)
    loaded = _by_id(tfds.as_numpy(_load(hmdb_dirs, "train", 2, seed=seed, repeat=True, spec=ReadSpec(
        augment=augment, output=Output(features=["video", "video_id"], dtype="uint8"))).take(6)), 2, 6)
    source = vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=key,
                                spec=ReadSpec(augment=augment))
    for epoch in (0, 1):
        source.set_epoch(epoch)
        for example in source.__getitems__(range(len(source))):
            assert example["video"].shape == (20, 48, 48, 3) and example["video"].dtype == np.uint8
            np.testing.assert_array_equal(example["video"], loaded[(epoch, example["video_id"])])
    copy = pickle.loads(pickle.dumps(source))  # a worker process's copy: the same epoch, the same crops
    np.testing.assert_array_equal(copy[2]["video"], source[2]["video"])
    # Grain and PyTorch under the key read vidvol.load's order, and the same crops: float32 batches alike.
    floats = list(tfds.as_numpy(_load(hmdb_dirs, "train", 2, seed=seed, repeat=True, spec=ReadSpec(augment=augment)).take(6)))
    grain = list(vidvol.grain_dataset(HMDB, "train", 2, data_dir=hmdb_dirs["array_record"], seed=key, num_epochs=2,
                                      spec=ReadSpec(augment=augment)))
    assert len(grain) == len(floats) == 6
    for ((gx, gm), gy), ((lx, lm), ly) in zip(grain, floats):
        np.testing.assert_array_equal(gy, ly)
        np.testing.assert_array_equal(gm, lm)
        assert gx.shape == lx.shape == (2, 20, 48, 48, 3) and np.abs(gx - lx).max() <= 1e-6
    ds = vidvol.torch_dataset(HMDB, "train", data_dir=hmdb_dirs["array_record"], seed=key, spec=ReadSpec(augment=augment))
    sampler = ds.sampler()
    sampler.set_epoch(1)
    fetched = ds.__getitems__(list(sampler))
    for i, ((x, _), y) in enumerate(fetched):
        (lx, _), ly = floats[3 + i // 2]
        assert y == ly[i % 2] and np.abs(x - lx[i % 2]).max() <= 1e-6


@pytest.mark.slow  # several pipelines over a real build (> 5 s)
def test_evaluation_crops_are_fixed_and_the_same_in_every_reader(hmdb_dirs):
    clips = Clips(length=8, stride=2, eval_clips=2)
    as_u8 = Output(features=["video", "mask", "label"], dtype="uint8")
    plain = list(tfds.as_numpy(_load(hmdb_dirs, "test", 2, spec=ReadSpec(clips=clips, output=as_u8))))
    three = ReadSpec(clips=clips, output=as_u8, augment=VideoAugment(48, multi_crop=True))
    first, second = (list(tfds.as_numpy(_load(hmdb_dirs, "test", 2, spec=three))) for _ in range(2))
    for p, a, b in zip(plain, first, second):
        np.testing.assert_array_equal(a["video"], b["video"])  # no seed, no randomness: the same every time
        assert a["video"].shape == (len(p["label"]), 6, 8, 48, 48, 3) and a["mask"].shape == (len(p["label"]), 6, 8)
        for v, x0 in enumerate([0, 8, 16] * 2):  # 2 clips x (left, centre, right) of 64x64 frames, 8 rows down
            np.testing.assert_array_equal(a["video"][:, v], p["video"][:, v // 3, :, 8:56, x0:x0 + 48])
            np.testing.assert_array_equal(a["mask"][:, v], p["mask"][:, v // 3])
    scaled = VideoAugment(40, min_size=56, multi_crop=True)  # short side 64 -> 56: 46x46 boxes, resized to 40
    resized = list(tfds.as_numpy(_load(hmdb_dirs, "test", 2, spec=ReadSpec(clips=clips, output=as_u8, augment=scaled))))
    geometry = scaled.geometry((64, 64, 3), training=False)
    for p, r in zip(plain, resized):
        np.testing.assert_array_equal(r["video"], geometry.crop(p["video"], (2, 8), None))
    grain = list(vidvol.grain_dataset(HMDB, "test", 3, data_dir=hmdb_dirs["array_record"],
                                      spec=ReadSpec(clips=clips, augment=scaled)))
    floats = list(tfds.as_numpy(_load(hmdb_dirs, "test", 3, spec=ReadSpec(clips=clips, augment=scaled))))
    for ((gx, gm), gy), ((lx, lm), ly) in zip(grain, floats):
        np.testing.assert_array_equal(gy, ly)
        np.testing.assert_array_equal(gm, lm)
        assert gx.shape == (len(gy), 6, 8, 40, 40, 3) and np.abs(gx - lx).max() <= 1e-6
    source = vidvol.data_source(HMDB, "test", data_dir=hmdb_dirs["array_record"], spec=ReadSpec(augment=scaled))
    whole = ReadSpec(augment=scaled, output=Output(features=["video", "mask", "video_id"], dtype="uint8"))
    loaded = _by_id(tfds.as_numpy(_load(hmdb_dirs, "test", 1, spec=whole)), 1, len(source))
    for i in range(len(source)):
        example = source[i]
        assert example["video"].shape == (3, 20, 40, 40, 3) and example["mask"].shape == (3, 20)
        np.testing.assert_array_equal(example["video"], loaded[(0, example["video_id"])])
        np.testing.assert_array_equal(example["video"], source[i]["video"])


@pytest.mark.slow  # several pipelines over a real build (> 5 s)
def test_float_uint8_and_normalize_outputs_hold_the_same_crops(hmdb_dirs):
    augment = VideoAugment(48, training_crop="random_short_side_scale", min_size=56, max_size=72)
    read = lambda **spec: next(iter(tfds.as_numpy(_load(hmdb_dirs, "train", 3, seed=4, spec=ReadSpec(
        augment=augment, **spec)))))
    (u8, _), y8 = read(output=Output(dtype="uint8"))
    (f32, _), y32 = read()
    (norm, _), _ = read(normalize=Normalize(mean=(0.4, 0.5, 0.6), std=0.25))
    (small, _), _ = read(normalize=Normalize(resize=(32, 32)))
    np.testing.assert_array_equal(y8, y32)
    assert u8.dtype == np.uint8 and u8.shape == f32.shape == norm.shape == (3, 20, 48, 48, 3)
    assert np.abs(f32 - u8 / 255.0).max() <= 1e-6
    assert np.abs(norm - (u8 / 255.0 - np.array([0.4, 0.5, 0.6])) / 0.25).max() <= 1e-5
    assert small.shape == (3, 20, 32, 32, 3)


def test_grain_state_resumes_augmented_batches(hmdb_dirs):
    make = lambda: vidvol.grain_dataset(HMDB, "train", 2, data_dir=hmdb_dirs["array_record"], seed=None,
                                        num_epochs=2, spec=ReadSpec(augment=VideoAugment(40)))
    it = iter(make())
    head = [next(it) for _ in range(2)]
    state = it.get_state()
    rest = list(it)
    again = iter(make())  # another drawn seed: the state's is taken up, and with it the crops
    again.set_state(state)
    resumed = list(again)
    assert len(head) + len(rest) == 6 and len(resumed) == len(rest)
    for ((a, _), ya), ((b, _), yb) in zip(resumed, rest):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ya, yb)


def test_readers_refuse_augmenting_what_is_not_a_video(hmdb_dirs):
    with pytest.raises(ValueError, match=r"VideoAugment crops video frames, and none of \['label'\]"):
        _load(hmdb_dirs, "train", 2, spec=ReadSpec(augment=VideoAugment(32), output=Output(features=["label"])))
    with pytest.raises(ValueError, match=r"VideoAugment crops decoded video frames, and none of \['label'\]"):
        vidvol.data_source(HMDB, "train", data_dir=hmdb_dirs["array_record"],
                           spec=ReadSpec(augment=VideoAugment(32), output=Output(features=["label"])))
    with pytest.raises(ValueError, match=r"does not fit 'video'.s frames of 64x64 at evaluation"):
        _load(hmdb_dirs, "test", 2, spec=ReadSpec(augment=VideoAugment(72)))
