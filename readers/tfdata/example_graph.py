"""The graph ops of an `ExamplePlan` in `vidvol.load`: clip selection per example, frame decoding, crops per batch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from vidvol.readers import augment_video
from vidvol.readers import clip_sampling
from vidvol.readers import frames
from vidvol.readers.example_plan import ExamplePlan


def _zero_invalid(values: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """`values` with the slots where `valid` is False set to zero (valid has values' leading dims)."""
    extra = values.shape.rank - valid.shape.rank
    mask = tf.reshape(valid, tf.concat([tf.shape(valid), tf.ones([extra], tf.int32)], 0))
    return tf.where(mask, values, tf.zeros_like(values))


def _gather_padded(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`tf.gather(values, indices)` that also works on an empty `values` (reads a zero row)."""
    pad = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.gather(tf.concat([values, pad], 0), indices)


def augment(plan: ExamplePlan, batch: Mapping[str, tf.Tensor], keys: tf.Tensor | None) -> dict[str, tf.Tensor]:
    """Per batch (uint8 frames decoded): each video's crops (training: from `keys`, (B, 2)); per-frame values
    repeated for multi_crop's views (`augment_video.augment_batch`)."""
    if not plan.augments:
        return dict(batch)
    leads = {v: plan.frame_dims(v) for v in plan.augments}
    return augment_video.augment_batch(batch, plan.augments, leads, plan.per_frame, keys)


def select(plan: ExamplePlan, example: Mapping[str, tf.Tensor], seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Per example: picks the clip's encoded frames and per-frame values; decodes them unless batched."""
    out = dict(example)
    if plan.clip is not None:
        num_frames = tf.shape(example[plan.videos[0]])[0]
        if plan.training:
            indices, valid = clip_sampling.random_clip(num_frames, plan.clip, seed)
        else:
            indices, valid = clip_sampling.even_clips(num_frames, plan.clip)
            if plan.clip.eval_clips == 1:
                indices, valid = indices[0], valid[0]
        flat_valid = tf.reshape(valid, [-1])
        for v in plan.raw:  # raw frames are values already: gathered like any per-frame feature
            out[v] = _zero_invalid(_gather_padded(example[v], indices), valid)
        for v in plan.encoded:
            # Slots past the end get an encoded all-zero frame: cheap to decode, exactly 0 after it.
            picked = _gather_padded(example[v], tf.reshape(indices, [-1]))
            out[v] = tf.where(flat_valid, picked, tf.constant(frames.blank_frame(plan.features[v])))
        for name in plan.per_frame:
            out[name] = _zero_invalid(_gather_padded(example[name], indices), valid)
    if not plan.decode_in_batch:
        for v in plan.encoded:
            out[v] = _decode(plan, v, out[v], ())
    return out


def _decode(plan: ExamplePlan, video: str, encoded: tf.Tensor, batch_dims: tuple[int, ...]) -> tf.Tensor:
    """Encoded frames (batch_dims + (count,)) -> uint8 (batch_dims + frame_dims + (H, W, C))."""
    feature = plan.features[video]
    dims = tuple(batch_dims) + plan.frame_dims(video)
    count = int(np.prod(dims))
    decoded = frames.decode_frame_strings(tf.reshape(encoded, [count]), count, feature)
    return tf.reshape(decoded, dims + tuple(feature.shape[1:]))


def decode_batch(plan: ExamplePlan, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Per batch (static batch size): decodes every video's frames in one call."""
    out = dict(batch)
    if plan.decode_in_batch:
        for v in plan.encoded:
            out[v] = _decode(plan, v, batch[v], (int(batch[v].shape[0]),))
    return out
