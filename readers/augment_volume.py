"""Read-time volume augmentation (`ReadSpec(augment=VolumeAugment(...))`): MONAI's `Rand*` transforms, seeded per example.

Per volume: random patches, flips, a 90-degree rotation, intensity scale and shift, each by MONAI's
rule (`VolumeAugment`, `draw`), the mask following the spatial ones (`VolumePlan`). The numbers are a
pure function of (seed, epoch, index), so every reader gives the same patches, bit for bit
(docs/reading.md, "Volume augmentation").
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from vidvol.core import features as vidvol_features
from vidvol.readers import host_calls
from vidvol.readers import output
from vidvol.readers import rng

AXES = (0, 1, 2)
_CHUNK_VOXELS = 1 << 16  # voxels of a patch written at a time (256 KiB of float32: its scale and shift hit the cache)


def _prob(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"VolumeAugment.{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _range(name: str, value: Any) -> tuple[float, float] | None:
    """MONAI's rule: a number f -> (-|f|, |f|); a pair -> (min, max); None stays None."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        pair = (-abs(float(value)), abs(float(value)))
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
        pair = (float(min(value)), float(max(value)))
    else:
        raise ValueError(f"VolumeAugment.{name} must be a number or a (min, max) pair, got {value!r}")
    if not all(math.isfinite(v) for v in pair):
        raise ValueError(f"VolumeAugment.{name} must be finite, got {value!r}")
    return pair


def _axes(name: str, value: Any, count: int | None) -> tuple[int, ...]:
    axes = (value,) if isinstance(value, numbers.Integral) else tuple(value) if isinstance(value, Sequence) else ()
    if (not axes or (count is not None and len(axes) != count) or len(set(axes)) != len(axes)
            or not all(isinstance(a, numbers.Integral) and not isinstance(a, bool) and a in AXES for a in axes)):
        what = f"{count} distinct" if count else "distinct"
        raise ValueError(f"VolumeAugment.{name} must be {what} spatial axes among 0, 1, 2 (D, H, W), got {value!r}")
    return tuple(int(a) for a in axes)


@dataclasses.dataclass(frozen=True)
class VolumeAugment:
    """Random patches, flips, 90-degree rotations and intensity scale/shift of volumes, as MONAI's `Rand*` transforms.

    Every transform is off until its `*_prob` is above 0 (MONAI's own default prob is 0.1; here the
    prob is the switch), its other parameters keep MONAI's defaults. Evaluation (`training=False`)
    takes one deterministic centre patch per volume and nothing random (`centre`; docs/reading.md,
    "Volume augmentation").

    Per volume (in this order): random spatial patches (MONAI `RandSpatialCropSamples(roi_size,
    num_samples)`, TorchIO `Queue`'s `samples_per_volume`), random flips per axis (a MONAI
    `RandFlip(prob, spatial_axis=a)` for each axis `a`), a random 90-degree rotation in a plane
    (`RandRotate90(prob, max_k, spatial_axes)`), intensity scale `v * (1 + factor)`
    (`RandScaleIntensity(factors, prob)`) and shift `v + offset` (`RandShiftIntensity(offsets,
    prob)`). The mask follows every spatial transform (a `BoxMask` stays a box: its box is cut to the
    patch, flipped and rotated, then made dense at the patch shape). The intensity shift is applied
    where the mask is 1 only, so padding stays 0 (MONAI shifts every voxel); the scale leaves 0 at 0
    anyway.

    Args:
      patch_size: (D, H, W) of the random patch (MONAI `roi_size`); None on an axis (or None for all,
        the default) keeps that axis whole (MONAI: a non-positive size). Evaluation: the centre patch.
      samples_per_volume: patches per volume in training (MONAI `num_samples`; default 1); more than 1
        stacks them after the batch axis: `(batch, samples, D, H, W)`, the label once per volume.
      flip_prob: probability with which each axis of `flip_axes` is flipped, on its own (one MONAI
        `RandFlip(prob, spatial_axis=a)` per axis; MONAI's `spatial_axis=None` flips all at once).
      flip_axes: the spatial axes that may flip (default all: 0, 1, 2 for D, H, W).
      rotate_prob: probability of a MONAI `RandRotate90(prob, max_k, spatial_axes)`: k quarter turns
        in the plane `rotate_axes` (np.rot90's direction).
      max_k: k is uniform in 1..max_k (default 3).
      rotate_axes: the rotation plane (default (0, 1)). Its two sides must be equal (after the patch),
        since a rotation of a non-square plane would change the shape of a batch.
      scale_prob: probability of MONAI `RandScaleIntensity(factors, prob)`: `v * (1 + factor)`.
      scale_factors: factor uniform in `(-f, f)` for a number `f`, or in a `(min, max)` pair; needed
        when `scale_prob` > 0.
      shift_prob: probability of MONAI `RandShiftIntensity(offsets, prob)`: `v + offset`, here only
        where the mask is 1 (padding stays 0).
      shift_offsets: offset uniform like `scale_factors`; needed when `shift_prob` > 0.

    Raises:
      ValueError: a field out of range, a probability above 0 without its factors/offsets, or
        factors/offsets set while their probability is 0.
    """

    patch_size: tuple[int | None, int | None, int | None] | None = None
    samples_per_volume: int = 1
    flip_prob: float = 0.0
    flip_axes: tuple[int, ...] = AXES
    rotate_prob: float = 0.0
    max_k: int = 3
    rotate_axes: tuple[int, int] = (0, 1)
    scale_prob: float = 0.0
    scale_factors: float | tuple[float, float] | None = None
    shift_prob: float = 0.0
    shift_offsets: float | tuple[float, float] | None = None

    def __post_init__(self):
        put = lambda name, value: object.__setattr__(self, name, value)
        if self.patch_size is not None:
            size = tuple(self.patch_size) if isinstance(self.patch_size, Sequence) else ()
            if len(size) != 3 or not all(s is None or (isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                                         and s >= 1) for s in size):
                raise ValueError("VolumeAugment.patch_size must be (D, H, W): integers >= 1, or None for a whole axis, "
                                 f"got {self.patch_size!r}")
            put("patch_size", tuple(None if s is None else int(s) for s in size))
        n = self.samples_per_volume
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"VolumeAugment.samples_per_volume must be an integer >= 1, got {n!r}")
        put("samples_per_volume", int(n))
        for name in ("flip_prob", "rotate_prob", "scale_prob", "shift_prob"):
            put(name, _prob(name, getattr(self, name)))
        put("flip_axes", _axes("flip_axes", self.flip_axes, None))
        put("rotate_axes", _axes("rotate_axes", self.rotate_axes, 2))
        if isinstance(self.max_k, bool) or not isinstance(self.max_k, numbers.Integral) or self.max_k < 1:
            raise ValueError(f"VolumeAugment.max_k must be an integer >= 1 (MONAI: k in 1..max_k), got {self.max_k!r}")
        put("max_k", int(self.max_k))
        for kind, prob, values in (("scale", "scale_prob", "scale_factors"), ("shift", "shift_prob", "shift_offsets")):
            pair = _range(values, getattr(self, values))
            if getattr(self, prob) > 0 and pair is None:
                raise ValueError(f"VolumeAugment.{prob} > 0 needs {values} (MONAI's Rand{kind.title()}Intensity "
                                 f"{'factors' if kind == 'scale' else 'offsets'}: a number f for (-f, f), or (min, max))")
            if getattr(self, prob) == 0 and pair is not None:
                raise ValueError(f"VolumeAugment.{values} is set but {prob} is 0, which leaves the {kind} off; set "
                                 f"{prob} (MONAI's default is 0.1; 1.0 changes every volume)")
            put(values, pair)

    @property
    def changes_values(self) -> bool:
        """Whether intensities change (scale or shift on): needs a float output."""
        return self.scale_prob > 0 or self.shift_prob > 0

    def patch_of(self, shape: Sequence[int]) -> tuple[int, int, int]:
        """The patch shape on a volume of `shape` (whole axes where `patch_size` says None); ValueError if it does not fit."""
        shape = tuple(int(d) for d in shape)
        if len(shape) != 3:
            raise ValueError(f"VolumeAugment applies to 3-D volumes (D, H, W), got shape {shape}")
        patch = shape if self.patch_size is None else tuple(n if p is None else p for p, n in zip(self.patch_size, shape))
        if any(p > n for p, n in zip(patch, shape)):
            raise ValueError(f"VolumeAugment.patch_size {self.patch_size} is larger than the stored volumes {shape} "
                             "along an axis; use a patch within the volume (None keeps an axis whole)")
        a, b = self.rotate_axes
        if self.rotate_prob > 0 and patch[a] != patch[b]:
            raise ValueError(
                f"VolumeAugment rotates in the plane of axes {self.rotate_axes}, whose sides are {patch[a]} and "
                f"{patch[b]} (patch {patch}): a quarter turn would swap them and change the shape of the batch; use "
                "a patch_size with equal sides in that plane, or rotate_axes in a square plane")
        return patch


class Sample(NamedTuple):
    """The transforms of one sample (patch) of a volume: corner, flipped axes, quarter turns, scale (1 + factor), shift."""

    start: tuple[int, int, int]
    flips: tuple[int, ...]  # the axes flipped
    turns: int  # 0..3 quarter turns in the rotation plane
    scale: np.float32  # 1 + factor (1 when not drawn)
    shift: np.float32  # the offset (0 when not drawn)


VolumeSamples = tuple  # tuple[Sample, ...]: one volume's samples


def draw(augment: VolumeAugment, shape: Sequence[int], patch: Sequence[int], gen: np.random.Generator) -> VolumeSamples:
    """A training volume's samples from `gen`: 12 uniforms each, always (so enabling one transform moves no other).

    MONAI's rules: the corner uniform in [0, size - patch] per axis; each flip with `flip_prob`; with
    `rotate_prob`, k uniform in 1..max_k (the np.rot90 direction); with `scale_prob`, factor uniform
    in the factors' range; with `shift_prob`, offset uniform in the offsets' range. The numbers come
    from `rng.example_rng(seed, epoch, index, rng.VOLUME_AUGMENT)`, a pure function of the example's
    draw, so `vidvol.load` and the random-access readers give the same patches for the same (seed,
    epoch, index), a restored iterator continues exactly, and each epoch differs.

    Args:
      augment: the transforms and their probabilities.
      shape: the stored volume's (D, H, W).
      patch: the patch's (D, H, W).
      gen: the example's generator (`rng.example_rng(..., rng.VOLUME_AUGMENT)`).

    Returns:
      `samples_per_volume` `Sample`s: patch corner, flipped axes, quarter turns, scale, shift.
    """
    a = augment
    scale_lo, scale_hi = a.scale_factors or (0.0, 0.0)
    shift_lo, shift_hi = a.shift_offsets or (0.0, 0.0)
    out = []
    for u in gen.random((a.samples_per_volume, 12)).tolist():
        start = tuple(min(int(u[i] * (n - p + 1)), n - p) for i, (n, p) in enumerate(zip(shape, patch)))
        flips = tuple(axis for axis in a.flip_axes if u[3 + axis] < a.flip_prob)
        turns = (1 + min(int(u[7] * a.max_k), a.max_k - 1)) % 4 if u[6] < a.rotate_prob else 0
        scale = np.float32(1.0 + scale_lo + u[9] * (scale_hi - scale_lo)) if u[8] < a.scale_prob else np.float32(1)
        shift = np.float32(shift_lo + u[11] * (shift_hi - shift_lo)) if u[10] < a.shift_prob else np.float32(0)
        out.append(Sample(start, flips, turns, scale, shift))
    return tuple(out)


def centre(shape: Sequence[int], patch: Sequence[int]) -> VolumeSamples:
    """The evaluation draw: one centre patch (MONAI `CenterSpatialCrop`: start `size // 2 - patch // 2`), nothing random."""
    start = tuple(max(n // 2 - p // 2, 0) for n, p in zip(shape, patch))
    return (Sample(start, (), 0, np.float32(1), np.float32(0)),)


def oriented(view: np.ndarray, sample: Sample, plane: tuple[int, int]) -> np.ndarray:
    """A (D, H, W) view flipped on the sample's axes, then turned its quarter turns in `plane` (np.rot90's direction)."""
    if sample.flips:
        view = np.flip(view, sample.flips)
    return np.rot90(view, sample.turns, axes=plane) if sample.turns else view


def cut(volume: np.ndarray, start: Sequence[int], patch: Sequence[int]) -> np.ndarray:
    """The patch of `volume` at `start` (a view)."""
    return volume[tuple(slice(s, s + p) for s, p in zip(start, patch))]


def box_of(box: Sequence[Sequence[int]], sample: Sample, patch: Sequence[int], plane: tuple[int, int]) -> list[list[int]]:
    """A [start, stop) box per axis of the volume -> the box of the sample's patch after its flips and turns (what the
    mask becomes: a box mask stays a box)."""
    out = []
    for (lo, hi), s, p in zip(box, sample.start, patch):
        lo, hi = min(max(int(lo) - s, 0), p), min(max(int(hi) - s, 0), p)
        out.append([lo, max(hi, lo)])
    flip = lambda axis: [patch[axis] - out[axis][1], patch[axis] - out[axis][0]]
    for axis in sample.flips:
        out[axis] = flip(axis)
    a, b = plane
    if sample.turns == 1:  # np.rot90 k=1: flip axis b, then swap a and b
        out[b] = flip(b)
        out[a], out[b] = out[b], out[a]
    elif sample.turns == 2:
        out[a], out[b] = flip(a), flip(b)
    elif sample.turns == 3:  # swap a and b, then flip axis b
        out[a], out[b] = out[b], out[a]
        out[b] = flip(b)
    return out


def intensity_np(values: np.ndarray, mask: np.ndarray | None, scale: float, shift: float) -> np.ndarray:
    """float32 `values * scale + shift * mask` (shift only where the mask is 1), as `finish` computes it in TensorFlow.

    Numbers are computed identically on both sides (float32 `x * (1 + factor)`, then
    `+ offset * mask`), so `vidvol.load` and the random-access readers agree bit for bit.

    Args:
      values: the patch's voxels.
      mask: its mask (None: all ones).
      scale: the sample's `1 + factor`.
      shift: the sample's offset.

    Returns:
      The float32 voxels.
    """
    y = np.multiply(values, np.float32(scale), dtype=np.float32)
    if shift:
        y = y + (np.float32(shift) if mask is None else np.float32(shift) * mask.astype(np.float32))
    return y


@dataclasses.dataclass(frozen=True)
class VolumePlan:
    """A `VolumeAugment` resolved against one dataset: which volume, its shape, the patch, the mask, training or not."""

    augment: VolumeAugment
    volume: str
    shape: tuple[int, int, int]
    patch: tuple[int, int, int]
    training: bool
    mask: str | None = None  # the BoxMask feature read with the volume, which follows it
    mask_dtype: Any = None  # load: the dense mask's dtype; None keeps the boxes (a left-out mask, checked full)

    @property
    def samples(self) -> int:
        """Patches per volume: `samples_per_volume` in training, 1 at evaluation."""
        return self.augment.samples_per_volume if self.training else 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        """One example's volume: the patch, with the samples axis first when there are several."""
        return ((self.samples,) if self.samples > 1 else ()) + self.patch

    @property
    def plane(self) -> tuple[int, int]:
        return self.augment.rotate_axes

    @property
    def changes_values(self) -> bool:
        return self.training and self.augment.changes_values

    def draws(self, gen: np.random.Generator | None) -> VolumeSamples:
        """One example's draws: from `gen` in training, the centre patch at evaluation."""
        if not self.training:
            return centre(self.shape, self.patch)
        if gen is None:
            raise ValueError("a training example with VolumeAugment needs an rng for its draws")
        return draw(self.augment, self.shape, self.patch, gen)

    def batch_draws(self, seeds: np.ndarray, epochs: np.ndarray, indices: np.ndarray) -> list[VolumeSamples]:
        """The draws of a batch of `vidvol.load` draws (iteration key, epoch, example index)."""
        return [self.draws(rng.example_rng(int(k), int(e), int(i), rng.VOLUME_AUGMENT) if self.training else None)
                for k, e, i in zip(seeds.tolist(), epochs.tolist(), indices.tolist())]

    def work_dtype(self, output_dtype: Any) -> np.dtype:
        """What the host call writes: int16 for an int16 output (the stored values), else float32 (cast by one copy)."""
        return np.dtype(np.int16) if tf.as_dtype(output_dtype) == tf.int16 else np.dtype(np.float32)

    def write(self, targets: np.ndarray, volume: np.ndarray, box: np.ndarray, draws: VolumeSamples) -> np.ndarray:
        """One volume's samples into `targets` [S, ...] (`volume`: the whole volume); returns the samples' mask boxes
        [S, 3, 2] (`write_sample` each)."""
        boxes = np.empty((self.samples, 3, 2), np.int64)
        box = box.tolist()
        for j, sample in enumerate(draws):
            boxes[j] = self.write_sample(targets[j], cut(volume, sample.start, self.patch), box, sample)
        return boxes

    def write_sample(self, target: np.ndarray, patch: np.ndarray, box: Sequence[Sequence[int]], sample: Sample
                     ) -> list[list[int]]:
        """One patch (cut, not yet flipped or turned) into `target`; returns its mask box after the transforms.

        A few of the target's slices at a time, in its own order (contiguous writes): one copy through the
        flip/rotation view, cast and `x * scale` in that pass, then `+ shift` inside the mask's box while
        the slices are in cache (what `intensity_np` computes); integer targets take the values as they are.
        """
        new = box_of(box, sample, self.patch, self.plane)
        view = oriented(patch, sample, self.plane)
        if target.dtype.kind != "f":
            np.copyto(target, view, casting="same_kind")
            return new
        (lo, hi), rest = new[0], tuple(slice(a, b) for a, b in new[1:])
        step = max(1, _CHUNK_VOXELS // (self.patch[1] * self.patch[2]))
        for d in range(0, self.patch[0], step):
            out = target[d: d + step]
            np.copyto(out, view[d: d + step], casting="unsafe")
            if sample.scale != 1:
                out *= sample.scale
            if sample.shift and max(lo, d) < min(hi, d + step):
                inside = out[(slice(max(lo, d) - d, min(hi, d + step) - d),) + rest]
                inside += sample.shift
        return new

    def example_np(self, volume: np.ndarray, mask: np.ndarray | None, gen: np.random.Generator | None
                   ) -> tuple[np.ndarray, np.ndarray | None]:
        """One decoded example (float32 volume, dense uint8 mask) -> its augmented patches (random-access readers).

        Written independently of `write` (array transforms of the dense mask, `intensity_np`), which the tests
        hold against each other.
        """
        vols, masks = [], []
        for sample in self.draws(gen):
            m = None if mask is None else np.ascontiguousarray(oriented(cut(mask, sample.start, self.patch), sample,
                                                                        self.plane))
            v = np.ascontiguousarray(oriented(cut(volume, sample.start, self.patch), sample, self.plane), np.float32)
            vols.append(intensity_np(v, m, sample.scale, sample.shift) if self.changes_values else v)
            masks.append(m)
        if self.samples == 1:
            return vols[0], masks[0]
        return np.stack(vols), None if mask is None else np.stack(masks)

    # ---- vidvol.load: the TensorFlow side

    def full_boxes(self, batch: tf.Tensor) -> tf.Tensor:
        """[B, 3, 2] boxes covering the whole volume (no mask read: every voxel counts as real)."""
        whole = tf.constant([[0, n] for n in self.shape], tf.int64)
        return tf.tile(whole[tf.newaxis], [batch, 1, 1])

    def finish(self, values: tf.Tensor, boxes: tf.Tensor, dtype: Any, batch_size: int | None = None
               ) -> tuple[tf.Tensor, tf.Tensor]:
        """(volume patches in `dtype`, mask) from a host call's values [B, S, ...] and boxes [B, S, 3, 2].

        The mask: dense in `mask_dtype` at the patch shape (the boxes when `mask_dtype` is None).
        """
        s = self.samples
        values.set_shape((batch_size, s) + self.patch)
        boxes.set_shape((batch_size, s, 3, 2))
        if self.mask_dtype is None:
            mask = boxes
        else:
            dense = vidvol_features.BoxMask(self.patch).dense_as(tf.reshape(boxes, [-1, 3, 2]), self.mask_dtype)
            mask = tf.reshape(dense, tf.concat([tf.shape(boxes)[:2], self.patch], 0))
        dtype = tf.as_dtype(dtype)
        values = values if values.dtype == dtype else tf.cast(values, dtype)
        if s == 1:  # no samples axis: a reshape (the same buffer), where a slice would copy
            drop = lambda x: tf.reshape(x, tf.concat([tf.shape(x)[:1], tf.shape(x)[2:]], 0))
            values, mask = drop(values), drop(mask)
            values.set_shape((batch_size,) + self.patch)
            mask.set_shape((batch_size,) + ((3, 2) if self.mask_dtype is None else self.patch))
        return values, mask


class ArrayPatches(host_calls.HostCall):
    """Python body of the augmentation of decoded volumes (TensorFlow's reader): [B, D, H, W] -> patches and boxes."""

    def __init__(self, plan: VolumePlan, dtype: Any):
        self.plan, self.dtype = plan, plan.work_dtype(dtype)
        super().__init__()

    def run(self, volumes: np.ndarray, boxes: np.ndarray, seeds: np.ndarray, epochs: np.ndarray, indices: np.ndarray):
        plan = self.plan
        draws = plan.batch_draws(seeds, epochs, indices)
        shape = (len(draws), plan.samples) + plan.patch
        out = host_calls.pool.take(int(np.prod(shape)) * self.dtype.itemsize).view(self.dtype).reshape(shape)
        new_boxes = np.stack([plan.write(out[i], volumes[i], boxes[i], d) for i, d in enumerate(draws)]) if draws else (
            np.zeros((0, plan.samples, 3, 2), np.int64))
        return out, new_boxes


def augment_decoded(plan: VolumePlan, batch: dict[str, tf.Tensor], draw_: dict[str, tf.Tensor], dtype: Any
                    ) -> dict[str, tf.Tensor]:
    """A parsed batch (the whole volumes, the mask as boxes) with its volume patched and transformed, the mask alike."""
    out = dict(batch)
    volume = batch[plan.volume]
    boxes = batch[plan.mask] if plan.mask else plan.full_boxes(tf.shape(volume)[0])
    call = ArrayPatches(plan, dtype)
    values, new_boxes = tf.numpy_function(call, [volume, boxes, draw_["seed"], draw_["epoch"], draw_["index"]],
                                          [tf.as_dtype(call.dtype), tf.int64], stateful=False,
                                          name="vidvol_augment_volumes")
    out[plan.volume], mask = plan.finish(values, new_boxes, dtype, volume.shape[0])
    if plan.mask:
        out[plan.mask] = mask
    return out


def plan_for(info: Any, names: Sequence[str], augment: VolumeAugment, training: bool, *, mask_dtype: Any = None,
             mask_read: bool = True) -> VolumePlan:
    """The `VolumePlan` of reading `names` of a dataset with `info`; ValueError naming the fix where it does not apply.

    `mask_read`: whether the `mask` feature is among what is read (its boxes then follow the volume).
    """
    volumes = [n for n in names if output.is_volume(info.features[n])]
    if len(volumes) != 1:
        found = "none" if not volumes else ", ".join(volumes)
        raise ValueError(f"{info.full_name}: VolumeAugment transforms one volume feature; the features read "
                         f"({list(names)}) hold {found}. Video datasets take VideoAugment")
    mask = output.MASK if mask_read and output.MASK in names else None
    if mask is not None and not isinstance(info.features[mask], vidvol_features.BoxMask):
        raise ValueError(f"{info.full_name}: VolumeAugment moves a box mask (BoxMask) with the volume; feature 'mask' "
                         f"is a {type(info.features[mask]).__name__}")
    has_mask = output.MASK in info.features and isinstance(info.features[output.MASK], vidvol_features.BoxMask)
    if augment.shift_prob > 0 and has_mask and mask is None:
        raise ValueError(f"{info.full_name}: VolumeAugment's intensity shift is applied where the mask is 1 (padding "
                         "stays 0), so it needs the mask read with the volume: keep 'mask' in Output.inputs (or "
                         "Output.features)")
    shape = tuple(int(d) for d in info.features[volumes[0]].shape)
    mask_dtype = None if mask_dtype is None else tf.as_dtype(mask_dtype)
    return VolumePlan(augment, volumes[0], shape, augment.patch_of(shape), bool(training), mask, mask_dtype)
