"""Encoded TFDS example -> serialized `tf.train.Example` bytes, written directly in protobuf's wire format.

TFDS's `ExampleSerializer` copies every value into the message and `SerializeToString` copies it
all again: for large examples those copies are most of what serializing costs a build. `serialize`
produces the same bytes with one join; TFDS still decides what each feature becomes, and
`Serializer` falls back to TFDS's own path where its internals are missing (see both).
"""

from __future__ import annotations

import functools
from typing import Any
from collections.abc import Callable, Mapping

import numpy as np
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

from vidvol.core import protowire
from vidvol.core import tfds_api

# TFDS's internals for how an example dict becomes a flat feature map (None: TFDS's own serializer path).
_TFDS = tfds_api.serializer_parts()
_FAST = _TFDS is not None


def _varints(values: np.ndarray) -> bytes:
    """Packed varints of int64 values (negatives as 10-byte two's complement, as protobuf writes int64)."""
    u = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64).ravel()
    if u.size == 0:
        return b""
    if u.size <= 64:
        return b"".join(protowire.encode_varint(int(x)) for x in u)
    nbytes = np.ones(u.shape, dtype=np.int64)
    for k in range(1, 10):
        nbytes += (u >> np.uint64(7 * k)) > 0
    out = np.zeros((u.size, 10), dtype=np.uint8)
    for k in range(10):
        out[:, k] = ((u >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | np.where(nbytes > k + 1, 0x80, 0).astype(np.uint8)
    keep = np.arange(10)[None, :] < nbytes[:, None]
    return out[keep].tobytes()


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return protowire.encode_varint(number << 3 | 2) + protowire.encode_varint(len(payload)) + payload


def _feature(item: Any, tensor_info: Any) -> bytes:
    """One `tf.train.Feature` message, as TFDS's `_item_to_tf_feature` fills it."""
    v = _TFDS.item_to_np_array(item, shape=tensor_info.shape, dtype=tensor_info.np_dtype)
    if v.dtype == np.bool_:
        v = v.astype(int)
    if v.dtype == np.uint64:
        v = v.view(np.int64)
    if _TFDS.is_integer(v.dtype):
        packed = _varints(v)
        return _field(3, _field(1, packed) if packed else b"")
    if _TFDS.is_floating(v.dtype):
        packed = np.ascontiguousarray(v, dtype="<f4").tobytes()
        return _field(2, _field(1, packed) if packed else b"")
    if _TFDS.is_string(tensor_info.np_dtype):
        values = [_TFDS.as_bytes(x) for x in v.flat]
        return _field(1, b"".join(_field(1, x) for x in values))
    raise ValueError(f"Unsupported value: {v!r}: tf.train.Feature does not support type {type(v)!r}")


def _protobuf_key_order() -> Callable[[str], Any]:
    """The sort key that puts feature-map keys in the order deterministic `SerializeToString` writes them.

    Probed, not assumed: protobuf's upb backend orders a key before the keys it is a prefix of
    *after* them (`video_id` before `video`), the pure-Python backend in plain string order.
    """
    probe = tf.train.Example()
    for k in ("ab", "a", "b"):
        probe.features.feature[k].int64_list.value.append(1)
    order = _entry_keys(probe.SerializeToString(deterministic=True))
    if order == ["a", "ab", "b"]:
        return lambda k: k.encode("utf-8")
    if order == ["ab", "a", "b"]:
        # Byte order, but a longer key first when one is the other's prefix.
        return functools.cmp_to_key(_cmp_longer_prefix_first)
    raise RuntimeError(f"unexpected protobuf map order {order}")


def _cmp_longer_prefix_first(a: str, b: str) -> int:
    x, y = a.encode("utf-8"), b.encode("utf-8")
    m = min(len(x), len(y))
    if x[:m] != y[:m]:
        return -1 if x[:m] < y[:m] else 1
    return len(y) - len(x)


def _entry_keys(buf: bytes) -> list[str]:
    """The feature-map keys of a serialized Example, in their written order (for the probe)."""

    def varint(i: int) -> tuple[int, int]:
        return protowire.decode_varint(buf, i)

    _, i = varint(0)  # Example.features tag
    length, i = varint(i)
    end, keys = i + length, []
    while i < end:
        _, i = varint(i)  # Features.feature (a map entry) tag
        length, i = varint(i)
        _, k = varint(i)  # the entry's key tag (written first)
        key_len, k = varint(k)
        keys.append(buf[k:k + key_len].decode("utf-8"))
        i += length
    return keys


_KEY_ORDER: Callable[[str], Any] | None = None


def serialize(example: Mapping[str, Any], tensor_info_dict: Mapping[str, Any]) -> bytes:
    """Bytes of the `tf.train.Example` TFDS would make of the encoded `example` (deterministic map order).

    TFDS's `ExampleSerializer` builds a `tf.train.Example` message (copying every value into a
    BytesList, then the whole feature map into the Example) and `SerializeToString` copies it all
    again: for large examples (a window of full-size JPEG frames) those copies are most of what
    serializing costs a build. This produces the same bytes as
    `serializer.get_tf_example(example).SerializeToString(deterministic=True)` (feature-map entries
    in key order; tests compare them byte for byte on every feature kind vidvol writes) with one
    join.
    """
    example = _TFDS.flatten_nest_dict(example)
    flat = _TFDS.flatten_nest_dict({
        k: _TFDS.add_ragged_fields(example[k], info)
        for k, info in _TFDS.flatten_nest_dict(tensor_info_dict).items()
    })
    entries = []
    global _KEY_ORDER
    if _KEY_ORDER is None:
        _KEY_ORDER = _protobuf_key_order()
    for key in sorted(flat, key=_KEY_ORDER):
        item, info = flat[key]
        if item is None and isinstance(info, tfds.features.TensorInfo) and info.optional:
            continue
        try:
            feature = _feature(item, info)
        except Exception as e:
            raise type(e)(f"Error while serializing feature `{key}`: `{info}`: {e}") from e
        entries.append(_field(1, _field(1, key.encode("utf-8")) + _field(2, feature)))
    return _field(1, b"".join(entries))


class Serializer:
    """`features.encode_example(example)` -> serialized bytes; the fast path where TFDS's internals allow.

    TFDS decides what each feature becomes: the same `_add_ragged_fields` (nested sequences), nest
    flattening and `_item_to_np_array` (dtype/shape checks, errors naming the feature) run first;
    only the message building is ours. They come from `vidvol.core.tfds_api`, which checks them at
    import; where they are missing (another TFDS version, or `VIDVOL_TFDS_PUBLIC_ONLY=1`),
    `Serializer` uses TFDS's own path.
    """

    def __init__(self, features: tfds.features.FeatureConnector, *, fast: bool | None = None):
        self._features = features
        self._info = features.get_serialized_info()
        self._tfds = tfds.core.ExampleSerializer(self._info)
        self.fast = _FAST if fast is None else (fast and _FAST)

    def __call__(self, example: Any) -> bytes:
        encoded = self._features.encode_example(example)
        if self.fast:
            return serialize(encoded, self._info)
        return self._tfds.get_tf_example(encoded).SerializeToString(deterministic=True)
