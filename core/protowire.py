"""Protobuf wire-format varints: the one encoder and decoder behind vidvol's direct record writing and reading.

Used where vidvol writes `tf.train.Example` bytes itself (`builders.writer.example_bytes`) and where it
reads stored volumes straight out of TFRecord files (`readers.tfdata.direct_volumes`).
"""

from __future__ import annotations


def encode_varint(value: int) -> bytes:
    """The varint bytes of a non-negative integer (int64 negatives: pass `value & (2**64 - 1)`)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: bytes, at: int) -> tuple[int, int]:
    """(value, position after it) of the varint in `buf` at `at`; ValueError if it is cut off or too long."""
    value, shift = 0, 0
    while True:
        if at >= len(buf):
            raise ValueError("varint runs past the bytes read")
        byte = buf[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
