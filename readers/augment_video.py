"""Read-time video augmentation: `VideoAugment`, the crops and flips of uint8 frames before they become floats.

Training draws one crop (and flip) per clip, the same on every frame; evaluation takes a centre
crop, or three along the long side (`multi_crop`). Crops run on the stored uint8 frames, before
`Normalize`, and are the same, bit for bit, in every reader (docs/reading.md, "Augmentation").
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np
import tensorflow as tf

from vidvol.readers import host_calls
from vidvol.readers import rng

TRAINING_CROPS = ("random_resized_crop", "random_short_side_scale")
MULTI_CROP_VIEWS = 3
TRIES = 10  # pytorchvideo's and torchvision's `num_tries` of a random resized crop before the central fallback

# Uniform slots of one example's draws (append new uses; never renumber: it would change the crops).
_FLIP, _Y, _X, _SIZE = 0, 1, 2, 3
_AREA = 4  # TRIES area fractions, then TRIES aspect ratios
_DRAWS = _AREA + 2 * TRIES

_LINEAR = cv2.INTER_LINEAR


def _pair(owner: str, name: str, value: Any, *, positive_int: bool) -> tuple:
    """A (low, high) pair (ints >= 1, or finite floats > 0 with low <= high), else a ValueError naming the field."""
    try:
        pair = tuple(value) if not isinstance(value, (str, bytes)) else ()
    except TypeError:
        pair = ()
    if positive_int:
        if len(pair) == 2 and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in pair):
            return int(pair[0]), int(pair[1])
        raise ValueError(f"{owner}.{name} must be an integer >= 1 or (height, width), got {value!r}")
    ok = len(pair) == 2 and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                                for v in pair)
    if not ok or pair[0] > pair[1]:
        raise ValueError(f"{owner}.{name} must be (low, high) with 0 < low <= high, got {value!r}")
    return float(pair[0]), float(pair[1])


@dataclasses.dataclass(frozen=True)
class VideoAugment:
    """Crops and flips of the uint8 frames at read time: random in training, fixed at evaluation.

    Training draws one crop (and flip) per clip, the same on every frame; evaluation takes a centre
    crop, or three crops along the long side (`multi_crop`). The crop is resized to `crop_size`, so
    every batch has the same static shape. Everything runs on the stored uint8 frames, before the
    float conversion (`Normalize`), so `Output(dtype="uint8")` gets augmented frames too, and masks
    (one value per frame) are untouched by spatial crops. The same (key, epoch, index) gives the same
    crop in every reader (`Geometry.training_boxes`; docs/reading.md, "Augmentation").

    Whose conventions (DMVR's `modalities.add_image`/`processors`, pytorchvideo's `transforms`):
    - `crop_size`: both (an int: square; `(h, w)` as pytorchvideo). No default: DMVR's 200 and
      pytorchvideo's 224 disagree, and vidvol's stored frames are often smaller than either.
    - `training_crop="random_resized_crop"`: pytorchvideo's `RandomResizedCrop` (torchvision's rule):
      up to 10 tries of an area fraction uniform in `scale` (0.08, 1.0) and an aspect ratio (w/h)
      log-uniform in `aspect_ratio` (3/4, 4/3), the box placed uniformly, else the central crop.
    - `training_crop="random_short_side_scale"`: pytorchvideo's `RandomShortSideScale(min_size,
      max_size)` + `RandomCrop(crop_size)`, DMVR's `resize_smallest(min_resize)` + random `crop_image`
      (`min_size` = `max_size` is DMVR's fixed `min_resize`; `min_size=None` crops the stored frames
      unscaled, as DMVR does when they already have `min_resize`).
    - `horizontal_flip_prob=0.5`: pytorchvideo's name, DMVR's `random_flip=True` (probability 0.5).
    - evaluation: the short side scaled to `min_size` (None: as stored), then DMVR's central crop
      (offset `(H - h) // 2`) or, with `multi_crop` (DMVR-based readers' name, pytorchvideo's
      `UniformCropVideo`), the left/centre/right (top/centre/bottom when taller than wide) crops along
      the long side; the 3 views are stacked after the batch axis, `eval_clips * 3` with eval clips
      (clip-major).

    Args:
      crop_size: output (height, width) of every frame (an int: square); every batch keeps it. No default.
      training_crop: "random_resized_crop" (default; `scale`, `aspect_ratio`) or "random_short_side_scale"
        (`min_size`..`max_size`, then a random `crop_size` crop).
      scale: area fraction range of a random resized crop (pytorchvideo/torchvision default (0.08, 1.0)).
      aspect_ratio: width/height range of a random resized crop, log-uniform (default (3/4, 4/3)).
      min_size: the short side's scaled length: the least in training (random_short_side_scale), the
        one used at evaluation; None (default): the stored frames' short side (no scaling).
      max_size: the greatest scaled short side in training (random_short_side_scale only); None: `min_size`.
      horizontal_flip_prob: probability that a training clip is flipped left-right (default 0.5; 0 turns
        flips off).
      multi_crop: evaluation takes 3 crops along the long side instead of the centre crop (default False);
        the views are stacked after the batch axis.

    Raises:
      ValueError: a field out of range, or one that does not apply to `training_crop` (`max_size` with
        "random_resized_crop"; `scale`/`aspect_ratio` with "random_short_side_scale").
    """

    crop_size: int | tuple[int, int]
    training_crop: str = "random_resized_crop"
    scale: tuple[float, float] = (0.08, 1.0)
    aspect_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    min_size: int | None = None
    max_size: int | None = None
    horizontal_flip_prob: float = 0.5
    multi_crop: bool = False

    def __post_init__(self):
        size = (self.crop_size, self.crop_size) if isinstance(self.crop_size, numbers.Integral) else self.crop_size
        object.__setattr__(self, "crop_size", _pair("VideoAugment", "crop_size", size, positive_int=True))
        if self.training_crop not in TRAINING_CROPS:
            raise ValueError(f"VideoAugment.training_crop must be one of {list(TRAINING_CROPS)}, got {self.training_crop!r}")
        scale = _pair("VideoAugment", "scale", self.scale, positive_int=False)
        if scale[1] > 1.0:
            raise ValueError(f"VideoAugment.scale is a fraction of the frame's area, at most 1.0, got {self.scale!r}")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "aspect_ratio", _pair("VideoAugment", "aspect_ratio", self.aspect_ratio,
                                                       positive_int=False))
        for name in ("min_size", "max_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1):
                raise ValueError(f"VideoAugment.{name} must be None or an integer >= 1, got {value!r}")
            object.__setattr__(self, name, None if value is None else int(value))
        if self.max_size is not None and (self.min_size is None or self.max_size < self.min_size):
            raise ValueError(f"VideoAugment.max_size needs min_size <= max_size, got min_size={self.min_size!r}, "
                             f"max_size={self.max_size!r}")
        p = self.horizontal_flip_prob
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise ValueError(f"VideoAugment.horizontal_flip_prob must be a probability in [0, 1], got {p!r}")
        object.__setattr__(self, "horizontal_flip_prob", float(p))
        if not isinstance(self.multi_crop, bool):
            raise ValueError(f"VideoAugment.multi_crop must be True or False, got {self.multi_crop!r}")
        if self.training_crop == "random_resized_crop" and self.max_size is not None:
            raise ValueError("VideoAugment.max_size is the short side's jitter of training_crop="
                             "'random_short_side_scale'; a random resized crop draws `scale` and `aspect_ratio` instead")
        if self.training_crop == "random_short_side_scale" and (self.scale, self.aspect_ratio) != (
                VideoAugment.scale, VideoAugment.aspect_ratio):
            raise ValueError("VideoAugment.scale and aspect_ratio shape training_crop='random_resized_crop'; "
                             "'random_short_side_scale' takes min_size and max_size")

    def geometry(self, frame_shape: Sequence[int | None], training: bool, name: str = "video") -> Geometry:
        """The crops of frames of `frame_shape` (H, W, C) in training or evaluation; a ValueError when they do not fit."""
        height, width, channels = (tuple(frame_shape) + (None, None, None))[:3]
        if height is None or width is None or channels is None:
            raise ValueError(f"VideoAugment needs frames of a fixed size; {name!r} stores frames of shape {tuple(frame_shape)}")
        return Geometry(self, int(height), int(width), int(channels), bool(training), name)


def _uniforms(keys: np.ndarray, count: int) -> np.ndarray:
    """(B, count) float64 uniforms in [0, 1), a pure function of each example's `[2]` int64 key (B, 2)."""
    words = np.ascontiguousarray(np.asarray(keys, np.int64).reshape(-1, 2)).view(np.uint64)
    slots = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = rng.mix_np(rng.mix_np(words[:, :1] + slots * np.uint64(rng.GOLDEN)) ^ words[:, 1:])
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _uniform_int(u: np.ndarray, count: np.ndarray) -> np.ndarray:
    """An integer uniform in [0, count) from a uniform in [0, 1)."""
    return np.minimum(np.floor(u * count).astype(np.int64), np.asarray(count, np.int64) - 1)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """`VideoAugment` on frames of one size: the boxes (y, x, h, w) of the stored frame each example's crops take."""

    augment: VideoAugment
    height: int
    width: int
    channels: int
    training: bool
    name: str = "video"

    def __post_init__(self):
        if not self.training or self.augment.training_crop == "random_short_side_scale":
            box = self._scaled_box(self.augment.min_size, clip=False)
            if box[0] > self.height or box[1] > self.width:
                where = "at evaluation" if not self.training else "in training (random_short_side_scale)"
                raise ValueError(
                    f"VideoAugment(crop_size={self.augment.crop_size}) does not fit {self.name!r}'s frames of "
                    f"{self.height}x{self.width} {where} with their short side at {self.augment.min_size or 'its stored size'}; "
                    f"set min_size >= {self._least_min_size()} (frames scaled up) or a smaller crop_size")

    @property
    def out_size(self) -> tuple[int, int]:
        return self.augment.crop_size

    @property
    def views(self) -> int:
        """Crops per clip: 3 at evaluation with multi_crop, else 1."""
        return MULTI_CROP_VIEWS if (self.augment.multi_crop and not self.training) else 1

    def out_lead(self, lead: Sequence[int]) -> tuple[int, ...]:
        """Leading (view, time) dims of an augmented example whose decoded frames lead with `lead` ((T,) or (N, T))."""
        lead = tuple(lead)
        if self.views == 1:
            return lead
        return (self.views,) + lead if len(lead) == 1 else (lead[0] * self.views,) + lead[1:]

    def _least_min_size(self) -> int:
        short = min(self.height, self.width)
        ch, cw = self.augment.crop_size
        return max(math.ceil(ch * short / self.height), math.ceil(cw * short / self.width))

    def _scaled_box(self, size: Any, clip: bool = True) -> tuple[Any, Any]:
        """Box (h, w) in stored pixels of a crop_size crop of the frames scaled to short side `size` (None: unscaled).

        `size` an int (-> ints) or an array of them (-> arrays); `clip` keeps the box inside the frame.
        """
        ch, cw = self.augment.crop_size
        if size is None:
            return ch, cw
        scale = min(self.height, self.width) / np.asarray(size, np.float64)
        h, w = np.round(ch * scale).astype(np.int64), np.round(cw * scale).astype(np.int64)
        if clip:
            h, w = np.clip(h, 1, self.height), np.clip(w, 1, self.width)
        return (int(h), int(w)) if np.ndim(h) == 0 else (h, w)

    def eval_boxes(self) -> np.ndarray:
        """(views, 4) int64 boxes of evaluation: the centre crop, or 3 along the long side."""
        h, w = self._scaled_box(self.augment.min_size)
        y, x = (self.height - h) // 2, (self.width - w) // 2
        if self.views == 1:
            return np.array([[y, x, h, w]], np.int64)
        if self.height > self.width:  # pytorchvideo's uniform_crop: top/centre/bottom when taller, else left/centre/right
            return np.array([[0, x, h, w], [y, x, h, w], [self.height - h, x, h, w]], np.int64)
        return np.array([[y, 0, h, w], [y, x, h, w], [y, self.width - w, h, w]], np.int64)

    def training_boxes(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, 1, 4) int64 boxes and (B,) bool flips drawn from each example's `[2]` key (B, 2).

        The draws are a pure function of the example's `[2]` key from `rng.example_seed(key, epoch,
        index, rng.VIDEO_AUGMENT)` (`vidvol.load`: its draw's iteration key; the random-access readers:
        `rng.seed_np` of their seed, the same integers), turned into uniforms by splitmix64 in NumPy
        (`_uniforms`) and into boxes by NumPy in every reader: the same (key, epoch, index) gives the
        same crop, bit for bit, in `vidvol.load`, `data_source`, `grain_dataset` and `torch_dataset`,
        and a restored iterator continues with the crops of the uninterrupted run.

        Args:
          keys: (B, 2) int64, each example's key.

        Returns:
          The boxes (y, x, h, w) in stored pixels, and whether each clip is flipped.
        """
        u = _uniforms(keys, _DRAWS)
        if self.augment.training_crop == "random_resized_crop":
            h, w, found = self._random_resized(u)
        else:
            a = self.augment
            low = a.min_size or min(self.height, self.width)
            high = a.max_size or low
            h, w = self._scaled_box(low + _uniform_int(u[:, _SIZE], high - low + 1))
            found = np.ones(len(u), bool)
        y = np.where(found, _uniform_int(u[:, _Y], self.height - h + 1), (self.height - h) // 2)
        x = np.where(found, _uniform_int(u[:, _X], self.width - w + 1), (self.width - w) // 2)
        flips = u[:, _FLIP] < self.augment.horizontal_flip_prob
        return np.stack([y, x, h, w], axis=-1).astype(np.int64)[:, None, :], flips

    def _random_resized(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """pytorchvideo's `_get_param_spatial_crop` (log-uniform ratio, TRIES tries, central fallback), vectorized."""
        (s0, s1), (r0, r1) = self.augment.scale, self.augment.aspect_ratio
        area = float(self.height * self.width)
        target = area * (s0 + u[:, _AREA:_AREA + TRIES] * (s1 - s0))
        log0, log1 = math.log(r0), math.log(r1)
        ratio = np.exp(log0 + u[:, _AREA + TRIES:_AREA + 2 * TRIES] * (log1 - log0))
        w = np.round(np.sqrt(target * ratio)).astype(np.int64)
        h = np.round(np.sqrt(target / ratio)).astype(np.int64)
        ok = (w > 0) & (w <= self.width) & (h > 0) & (h <= self.height)
        first = np.argmax(ok, axis=1)
        rows = np.arange(len(u))
        found = ok[rows, first]
        in_ratio = self.width / self.height
        if in_ratio < r0:
            fw, fh = self.width, int(round(self.width / r0))
        elif in_ratio > r1:
            fw, fh = int(round(self.height * r1)), self.height
        else:
            fw, fh = self.width, self.height
        return np.where(found, h[rows, first], fh), np.where(found, w[rows, first], fw), found

    def needs_resize(self, boxes: np.ndarray) -> bool:
        """Whether any of `boxes` differs in size from the output (else the crops are copies)."""
        return bool(np.any((boxes[..., 2] != self.out_size[0]) | (boxes[..., 3] != self.out_size[1])))

    def crop(self, frames: np.ndarray, lead: Sequence[int], keys: np.ndarray | None, out: np.ndarray | None = None
             ) -> np.ndarray:
        """uint8 frames (B, *lead, H, W, C) -> (B, *out_lead(lead), h, w, C): training crops from `keys` (B, 2), or evaluation's."""
        frames = np.asarray(frames)
        batch, lead = len(frames), tuple(lead)
        if self.training:
            boxes, flips = self.training_boxes(keys)
        else:
            boxes, flips = np.broadcast_to(self.eval_boxes(), (batch, self.views, 4)), None
        clips, steps = (lead[0], lead[1]) if len(lead) == 2 else (1, lead[0])
        ch, cw = self.out_size
        shape = (batch, clips, self.views, steps, ch, cw, self.channels)
        if out is None:
            out = np.empty(shape, np.uint8)
        crop_boxes(frames.reshape((batch, clips, steps) + frames.shape[-3:]), boxes, flips, out.reshape(shape))
        return out.reshape((batch,) + self.out_lead(lead) + (ch, cw, self.channels))


def crop_boxes(frames: np.ndarray, boxes: np.ndarray, flips: np.ndarray | None, out: np.ndarray) -> None:
    """Into C-contiguous `out` (B, M, K, T, h, w, C): box k of example b over frames (B, M, T, H, W, C), resized, flipped.

    Crops come before the resize: a box of the stored frame is resized once (OpenCV's bilinear,
    half-pixel centres, rounded back to uint8) or, where the box already has the output size, only
    copied; the output stays uint8.
    A box of the output's size is copied (a flipped one by `cv2.flip` frame by frame, into `out`);
    another is resized by `cv2.resize` (bilinear, half-pixel centres, rounded to uint8) frame by
    frame straight into `out`, then a flipped clip is mirrored in place by one `cv2.flip` of its rows.
    The loops walk views (no index arithmetic per frame): this runs once per frame of every batch.
    """
    steps = out.shape[3]
    ch, cw, channels = out.shape[-3:]
    if channels == 1:  # OpenCV's 2-D images
        frames, out = frames[..., 0], out[..., 0]
    size, rows = (cw, ch), (steps * ch,) + out.shape[5:]
    flips = [False] * len(out) if flips is None else np.asarray(flips, bool).tolist()
    for example, views, example_boxes, flip in zip(frames, out, np.asarray(boxes).tolist(), flips):
        for clip, clip_views in zip(example, views):  # clips (M), each cropped by every box (K)
            for (y, x, h, w), dst in zip(example_boxes, clip_views):
                src = clip[:, y:y + h, x:x + w]
                if h == ch and w == cw:
                    if flip:
                        for s, d in zip(src, dst):
                            cv2.flip(s, 1, d)
                    else:
                        np.copyto(dst, src)
                    continue
                for s, d in zip(src, dst):
                    cv2.resize(s, size, d, 0, 0, _LINEAR)
                if flip:
                    mirrored = dst.reshape(rows)
                    cv2.flip(mirrored, 1, mirrored)


class AugmentFrames(host_calls.HostCall):
    """Python body (`tf.numpy_function`, stateless): a batch of uint8 frames and its keys -> the crops, in a pooled buffer."""

    def __init__(self, geometry: Geometry, lead: Sequence[int]):
        self.geometry, self.lead = geometry, tuple(lead)
        super().__init__()

    def run(self, frames: np.ndarray, keys: np.ndarray) -> np.ndarray:
        g = self.geometry
        count = len(frames) * g.views * int(np.prod(self.lead)) * g.out_size[0] * g.out_size[1] * g.channels
        return g.crop(frames, self.lead, keys, host_calls.pool.take(count))


def _repeat_views(x: Any, views: int, lead_rank: int, stack, repeat) -> Any:
    """A per-frame value (B, *lead, ...) repeated for `views` crops: (B, views, T, ...) or (B, N * views, T, ...)."""
    if views == 1:
        return x
    return stack([x] * views, 1) if lead_rank == 1 else repeat(x, views, 1)


def augment_batch(batch: Mapping[str, tf.Tensor], geometries: Mapping[str, Geometry], leads: Mapping[str, tuple],
                  per_frame: Sequence[str], keys: tf.Tensor | None) -> dict[str, tf.Tensor]:
    """`vidvol.load`'s stage: each video of a uint8 batch cropped, per-frame values repeated for multi_crop's views.

    The crops of a batch run in one Python call (`AugmentFrames`, a stateless `tf.numpy_function`)
    that writes them straight into a pooled batch buffer (multi_crop's copies too: one copy, where TF
    slices and a stack make two); a centre crop that needs no resize is a plain TF slice.

    Args:
      batch: the decoded batch, uint8 frames under the names of `geometries`.
      geometries: the `Geometry` of each video feature.
      leads: each video's leading frame dims per example ((T,) or (N, T)).
      per_frame: the features with one value per frame (masks, fire_hrr's `hrr`).
      keys: (B, 2) int64, each example's key from its draws (training); None at evaluation.

    Returns:
      The batch with its videos cropped and its per-frame values repeated for the views.
    """
    out = dict(batch)
    for name, g in geometries.items():
        frames, lead = batch[name], leads[name]
        boxes = None if g.training else g.eval_boxes()
        if boxes is not None and len(boxes) == 1 and not g.needs_resize(boxes):  # a centre crop's copy: a TF slice
            (y, x, h, w), = boxes.tolist()
            cropped = frames[..., y:y + h, x:x + w, :]
        else:
            if keys is None:
                keys = tf.zeros([tf.shape(frames)[0], 2], tf.int64)
            cropped = tf.numpy_function(AugmentFrames(g, lead), [frames, keys], tf.uint8, stateful=False,
                                        name="vidvol_augment_frames")
        cropped.set_shape(frames.shape[:1].concatenate(g.out_lead(lead) + g.out_size + (g.channels,)))
        out[name] = cropped
    views = max((g.views for g in geometries.values()), default=1)
    rank = len(next(iter(leads.values()))) if leads else 1
    for name in per_frame:
        out[name] = _repeat_views(batch[name], views, rank, tf.stack, lambda x, n, a: tf.repeat(x, n, axis=a))
    return out


def augment_example(example: Mapping[str, Any], geometries: Mapping[str, Geometry], leads: Mapping[str, tuple],
                    per_frame: Sequence[str], key: np.ndarray | None) -> dict[str, Any]:
    """The random-access readers' step: one example's decoded uint8 videos cropped (training: its `[2]` key), per-frame
    values repeated for multi_crop's views; the same crops as `augment_batch`."""
    out = dict(example)
    keys = None if key is None else np.asarray(key, np.int64).reshape(1, 2)
    for name, g in geometries.items():
        out[name] = g.crop(np.asarray(example[name])[None], leads[name], keys)[0]
    views = max((g.views for g in geometries.values()), default=1)
    rank = len(next(iter(leads.values()))) if leads else 1
    for name in per_frame:
        value = np.asarray(example[name])[None]
        out[name] = _repeat_views(value, views, rank, lambda xs, a: np.stack(xs, a),
                                  lambda x, n, a: np.repeat(x, n, axis=a))[0]
    return out


def example_key(seed: int | None, epoch: int, index: int) -> np.ndarray:
    """The `[2]` key of one example's crops in the random-access readers: `rng.example_seed(seed, epoch, index,
    rng.VIDEO_AUGMENT)`'s integers (`rng.seed_np`), or fresh entropy for an unseeded reader."""
    if seed is None:
        return np.random.default_rng().integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=2, dtype=np.int64)
    return rng.seed_np(int(seed), int(epoch), int(index), rng.VIDEO_AUGMENT).reshape(2)
