"""One `tf.io.parse_example` per batch of serialized examples, with TFDS's own specs and decoders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import tfds_api
from vidvol.readers import frames


class BatchParser:
    """Parses a batch of serialized examples in one call, giving what TFDS's per-example parse gives.

    TFDS's reader parses each example in its own map call; for features whose stored shape is fully
    known one call per batch is far cheaper (figures: benchmarks/RESULTS.md, "Read pipeline"). The specs are TFDS's own, the
    values go through the features' `decode_batch_example` (or the `decoders` given for some,
    already set up on their features), except video frames: encoded ones stay encoded, raw uint8
    ones (`frames.is_raw_video`) are one `tf.io.decode_raw` for the whole batch (TFDS's Tensor would
    `tf.map_fn` over the examples).
    """

    def __init__(self, features: tfds.features.FeaturesDict, names: Sequence[str], videos: Sequence[str],
                 decoders: Mapping[str, tfds.decode.Decoder] | None = None):
        self.features, self.names = features, tuple(names)
        self.videos = tuple(v for v in videos if not frames.is_raw_video(features[v]))  # kept encoded
        self.raw = tuple(
            n for n in self.names if frames.is_raw_video(features[n]) and frames.stored_as_bytes(features[n])
        )
        self.decoders = dict(decoders or {})
        self.infos = {n: features[n].get_serialized_info() for n in self.names}
        for name, info in self.infos.items():
            parts = info.values() if isinstance(info, dict) else [info]
            if not all(isinstance(p, tfds.features.TensorInfo) and None not in p.shape for p in parts):
                raise ValueError(f"feature {name!r}: serialized as {info}; only fixed-shape tensors parse per batch")
        specs = tfds_api.parse_specs(self.infos)
        if specs is None:
            raise ValueError("TFDS's example parser is not available; parse per example")
        self.specs = specs

    @classmethod
    def for_features(cls, features: tfds.features.FeaturesDict, names: Sequence[str], videos: Sequence[str],
                     decoders: Mapping[str, tfds.decode.Decoder] | None = None) -> BatchParser | None:
        """A parser when every feature read has a fixed stored shape (and TFDS's specs are reachable), else None."""
        if not tfds_api.available("read_files"):
            return None
        try:
            return cls(features, names, videos, decoders)
        except ValueError:
            return None

    def parse(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        """Serialized examples (B,) -> dict of batched features (encoded frames stay strings)."""
        parsed = tf.io.parse_example(serialized, self.specs)

        def restore(key: str, info: tfds.features.TensorInfo) -> tf.Tensor:
            value = parsed[key]
            return value if value.dtype == info.tf_dtype else tf.cast(value, info.tf_dtype)

        out = {}
        for name in self.names:
            info = self.infos[name]
            if isinstance(info, dict):  # a feature stored as several tensors ("name/part" in the Example)
                value = {part: restore(f"{name}/{part}", i) for part, i in info.items()}
            else:
                value = restore(name, info)
            if name in self.videos:
                out[name] = value
            elif name in self.decoders:
                out[name] = self.decoders[name].decode_batch_example(value)
            elif name in self.raw:
                out[name] = frames.decode_raw_batch(value, self.features[name])
            else:
                out[name] = self.features[name].decode_batch_example(value)
        return out
