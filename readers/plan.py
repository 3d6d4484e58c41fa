"""What one read pipeline reads and where each feature is decoded (the `ReadPlan`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.readers import clip_sampling
from vidvol.readers import frames


def static_bytes(shape: Sequence[int | None], dtype: Any) -> int:
    """Bytes of a tensor of static `shape` (0 when a dimension is unknown)."""
    if any(d is None for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def per_frame_features(features: tfds.features.FeaturesDict, video: str, names: Sequence[str]) -> tuple[str, ...]:
    """Features among `names` with one entry per frame of `video` (same leading dimension), e.g. mask, hrr."""
    length = features[video].shape[0]
    out = []
    for name in names:
        feature = features[name]
        if name == video or frames.is_encoded_video(feature) or frames.is_raw_video(feature):
            continue
        if not isinstance(feature, tfds.features.Tensor):
            continue
        if len(feature.shape) >= 1 and feature.shape[0] == length:
            out.append(name)
    return tuple(out)


def _zero_invalid(values: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
    """`values` with the slots where `valid` is False set to zero (valid has values' leading dims)."""
    extra = values.shape.rank - valid.shape.rank
    mask = tf.reshape(valid, tf.concat([tf.shape(valid), tf.ones([extra], tf.int32)], 0))
    return tf.where(mask, values, tf.zeros_like(values))


def _gather_padded(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """`tf.gather(values, indices)` that also works on an empty `values` (reads a zero row)."""
    pad = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.gather(tf.concat([values, pad], 0), indices)


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """The features read, the videos decoded here, the clip window, and whether frames decode per batch."""

    features: tfds.features.FeaturesDict
    names: tuple[str, ...]  # features read, in output order for dict outputs
    videos: tuple[str, ...]  # frame features: encoded Video features the read side decodes, and raw ones
    per_frame: tuple[str, ...]  # features aligned with the first video's frames
    clip: clip_sampling.ClipWindow | None
    training: bool
    decode_in_batch: bool  # decode a whole (static-size) batch of frames in one call, else per example
    # Decoders replacing some non-video features' own (volumes to the output dtype, masks to the mask dtype).
    feature_decoders: Mapping[str, tfds.decode.Decoder] = dataclasses.field(default_factory=dict)
    raw: tuple[str, ...] = ()  # the videos stored as raw uint8 (parsed, never decoded)

    @property
    def encoded(self) -> tuple[str, ...]:
        """The videos stored as encoded frames (decoded here)."""
        return tuple(v for v in self.videos if v not in self.raw)

    @classmethod
    def make(
        cls,
        info: tfds.core.DatasetInfo,
        names: Sequence[str],
        clip: clip_sampling.ClipWindow | None,
        training: bool,
        static_batch: int | None,
    ) -> "ReadPlan":
        """Checks the requested features against the builder and decides what is decoded where."""
        features = info.features
        raw = tuple(n for n in names if frames.is_raw_video(features[n]))
        videos = tuple(n for n in names if frames.is_encoded_video(features[n]) or n in raw)
        per_frame = per_frame_features(features, videos[0], names) if videos else ()
        if clip is not None and not videos:
            raise ValueError(f"{info.full_name}: clip_length is set but none of {list(names)} is a video feature")
        for v in videos:
            if features[v].shape[0] is None and clip is None:
                raise ValueError(
                    f"{info.full_name}: feature {v!r} stores a variable number of frames per example "
                    f"(shape {features[v].shape}); pass clip_length=T (e.g. 16) to sample fixed-length clips"
                )
        plan = cls(features, tuple(names), videos, per_frame, clip, training, decode_in_batch=False, raw=raw)
        if static_batch and videos:
            count = static_batch * sum(int(np.prod(plan.frame_dims(v))) for v in plan.encoded)
            plan = dataclasses.replace(plan, decode_in_batch=count <= frames.MAX_UNROLLED_FRAMES)
        return plan

    @property
    def clip_shape(self) -> tuple[int, ...]:
        """Leading dims of a decoded video: (T,), (N, T) for several eval clips, () without clips."""
        if self.clip is None:
            return ()
        if not self.training and self.clip.eval_clips > 1:
            return (self.clip.eval_clips, self.clip.clip_length)
        return (self.clip.clip_length,)

    def frame_dims(self, video: str) -> tuple[int, ...]:
        """Leading (time) dims of one decoded example of `video`."""
        return self.clip_shape or (self.features[video].shape[0],)

    def decoded_bytes(self) -> int:
        """Bytes of one decoded example (frames uint8, other tensors as stored)."""
        total = 0
        for name in self.names:
            feature = self.features[name]
            if name in self.videos:
                total += static_bytes(self.frame_dims(name) + tuple(feature.shape[1:]), feature.np_dtype)
            elif isinstance(feature, tfds.features.Tensor):
                total += static_bytes(feature.shape, feature.np_dtype)
        return total

    def float_bytes(self, resize: Sequence[int] | None = None) -> int:
        """Bytes of one example in the output batch (frames float32, optionally resized)."""
        total = 0
        for name in self.names:
            feature = self.features[name]
            if name in self.videos:
                h, w = resize if resize else feature.shape[1:3]
                total += static_bytes(self.frame_dims(name) + (h, w, feature.shape[3]), np.float32)
            elif isinstance(feature, tfds.features.Tensor):
                total += static_bytes(feature.shape, np.float32)
        return total

    def buffer_example_bytes(self, stored_bytes: float) -> float:
        """Bytes one parsed example holds in the shuffle buffer: encoded frames plus decoded tensors.

        Frames stay encoded (about the stored size); other tensors are already decoded there and
        may be larger than stored (a zlib mask). Without frames, the larger of the two sizes.
        """
        decoded = sum(
            static_bytes(self.features[n].shape, self.features[n].np_dtype)
            for n in self.names
            if n not in self.videos and isinstance(self.features[n], tfds.features.Tensor)
        )
        return stored_bytes + decoded if self.videos else max(stored_bytes, decoded)

    def with_decoders(self, decoders: Mapping[str, tfds.decode.Decoder]) -> "ReadPlan":
        """This plan with `decoders` (set up on their features) used for those features, per batch and per example."""
        for name, decoder in decoders.items():
            decoder.setup(feature=self.features[name])
        return dataclasses.replace(self, feature_decoders=dict(decoders))

    def decoders(self) -> tfds.decode.PartialDecoding:
        """Parse only the features read; keep encoded video frames encoded (raw frames parse to uint8)."""
        return tfds.decode.PartialDecoding(
            {name: True for name in self.names},
            decoders={**self.feature_decoders, **{v: frames.KeepEncoded() for v in self.encoded}},
        )

    @property
    def needs_example_map(self) -> bool:
        """Whether a per-example step runs before batching (clip selection or per-example decoding)."""
        if not self.videos:
            return False
        return self.clip is not None or (bool(self.encoded) and not self.decode_in_batch)

    def select(self, example: Mapping[str, tf.Tensor], seed: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Per example: picks the clip's encoded frames and per-frame values; decodes them unless batched."""
        out = dict(example)
        if self.clip is not None:
            num_frames = tf.shape(example[self.videos[0]])[0]
            if self.training:
                indices, valid = clip_sampling.random_clip(num_frames, self.clip, seed)
            else:
                indices, valid = clip_sampling.even_clips(num_frames, self.clip)
                if self.clip.eval_clips == 1:
                    indices, valid = indices[0], valid[0]
            flat_valid = tf.reshape(valid, [-1])
            for v in self.raw:  # raw frames are values already: gathered like any per-frame feature
                out[v] = _zero_invalid(_gather_padded(example[v], indices), valid)
            for v in self.encoded:
                # Slots past the end get an encoded all-zero frame: cheap to decode, exactly 0 after it.
                picked = _gather_padded(example[v], tf.reshape(indices, [-1]))
                out[v] = tf.where(flat_valid, picked, tf.constant(frames.blank_frame(self.features[v])))
            for name in self.per_frame:
                out[name] = _zero_invalid(_gather_padded(example[name], indices), valid)
        if not self.decode_in_batch:
            for v in self.encoded:
                out[v] = self._decode(v, out[v], ())
        return out

    def _decode(self, video: str, encoded: tf.Tensor, batch_dims: tuple[int, ...]) -> tf.Tensor:
        """Encoded frames (batch_dims + (count,)) -> uint8 (batch_dims + frame_dims + (H, W, C))."""
        feature = self.features[video]
        dims = tuple(batch_dims) + self.frame_dims(video)
        count = int(np.prod(dims))
        decoded = frames.decode_frame_strings(tf.reshape(encoded, [count]), count, feature)
        return tf.reshape(decoded, dims + tuple(feature.shape[1:]))

    def decode_batch(self, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Per batch (static batch size): decodes every video's frames in one call."""
        out = dict(batch)
        if self.decode_in_batch:
            for v in self.encoded:
                out[v] = self._decode(v, batch[v], (int(batch[v].shape[0]),))
        return out
