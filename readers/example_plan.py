"""What one example reads: its features, videos, clip window and crops (`ExamplePlan`), for every reader."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow_datasets as tfds

from vidvol.readers import augment_video
from vidvol.readers import clip_sampling
from vidvol.readers import frames
from vidvol.readers.dataset import per_frame_features, static_bytes


@dataclasses.dataclass(frozen=True)
class ExamplePlan:
    """What each example reads (shared by `vidvol.load` and the random-access readers): the features, the videos
    decoded here, the clip window, whether frames decode per batch, their crops."""

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
    # `ReadSpec.augment` on each video's frames (crops and flips of the uint8 frames, after decoding).
    augments: Mapping[str, augment_video.Geometry] = dataclasses.field(default_factory=dict)

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
        augment: augment_video.VideoAugment | None = None,
    ) -> ExamplePlan:
        """Checks the requested features against the builder and decides what is decoded where (and cropped how)."""
        features = info.features
        raw = tuple(n for n in names if frames.is_raw_video(features[n]))
        videos = tuple(n for n in names if frames.is_encoded_video(features[n]) or n in raw)
        per_frame = per_frame_features(features, videos[0], names) if videos else ()
        if clip is not None and not videos:
            raise ValueError(f"{info.full_name}: Clips.length is set but none of {list(names)} is a video feature")
        for v in videos:
            if features[v].shape[0] is None and clip is None:
                raise ValueError(
                    f"{info.full_name}: feature {v!r} stores a variable number of frames per example "
                    f"(shape {features[v].shape}); pass spec=vidvol.ReadSpec(clips=vidvol.Clips(length=T)) (e.g. T=16) "
                    "to sample fixed-length clips"
                )
        if augment is not None and not videos:
            raise ValueError(f"{info.full_name}: VideoAugment crops video frames, and none of {list(names)} is a video "
                             "feature; leave ReadSpec.augment None")
        augments = {v: augment.geometry(features[v].shape[1:], training, v) for v in videos} if augment else {}
        plan = cls(features, tuple(names), videos, per_frame, clip, training, decode_in_batch=False, raw=raw,
                   augments=augments)
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

    def out_dims(self, video: str) -> tuple[int, ...]:
        """Leading (view, time) dims of one output example of `video`: `frame_dims`, times multi_crop's views."""
        g = self.augments.get(video)
        return g.out_lead(self.frame_dims(video)) if g else self.frame_dims(video)

    def out_frame(self, video: str) -> tuple[int, int]:
        """(height, width) of `video`'s output frames before `Normalize.resize`: the crop size, or as stored."""
        g = self.augments.get(video)
        return g.out_size if g else tuple(self.features[video].shape[1:3])

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
                h, w = resize if resize else self.out_frame(name)
                total += static_bytes(self.out_dims(name) + (h, w, feature.shape[3]), np.float32)
            elif isinstance(feature, tfds.features.Tensor):
                total += static_bytes(feature.shape, np.float32)
        return total

    def with_decoders(self, decoders: Mapping[str, tfds.decode.Decoder]) -> ExamplePlan:
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
