"""Dataset-agnostic frame stages on arrays: resize one frame, pad frames into a fixed-length masked clip, encode frames.

Every function takes and returns numpy arrays in RGB order (the video stages in
`vidvol.builders.transforms.video` hand them decoded frames); nothing here reads a file.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

__all__ = [
    "encode_frame",
    "encode_frames",
    "pad_and_mask",
    "resize_frame",
]

RESIZE_MODES = ("resize", "crop")
IMAGE_FORMATS = {"jpeg": ".jpg", "jpg": ".jpg", "png": ".png"}


def check_size(size: tuple[int, int]) -> tuple[int, int]:
    """Validate a (height, width) pair of positive integers."""
    if len(size) != 2 or any(int(s) != s or s <= 0 for s in size):
        raise ValueError(f"size must be (height, width) positive integers, got {size!r}")
    return int(size[0]), int(size[1])


def _interpolation(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> int:
    """INTER_AREA when shrinking (no aliasing), INTER_LINEAR when any side grows."""
    return cv2.INTER_AREA if dst_hw[0] <= src_hw[0] and dst_hw[1] <= src_hw[1] else cv2.INTER_LINEAR


def resize_frame(
    frame: np.ndarray,
    size: tuple[int, int],
    *,
    mode: str = "resize",
    interpolation: int | None = None,
) -> np.ndarray:
    """Resize one (H, W[, C]) frame to ``size`` = (height, width).

    ``mode="resize"`` stretches to the target (aspect ratio not kept); ``mode="crop"`` scales
    keeping the aspect ratio until the frame covers the target, then crops the centre.
    Interpolation defaults to INTER_AREA when shrinking and INTER_LINEAR when enlarging.
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")
    height, width = check_size(size)
    if frame.ndim not in (2, 3) or frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"expected a non-empty (H, W) or (H, W, C) frame, got shape {frame.shape}")
    src_h, src_w = frame.shape[:2]
    if mode == "resize":
        if (src_h, src_w) == (height, width):
            return frame
        interp = interpolation if interpolation is not None else _interpolation((src_h, src_w), (height, width))
        out = cv2.resize(frame, (width, height), interpolation=interp)
    else:
        scale = max(height / src_h, width / src_w)
        # Round, but never below the target on either side, so the crop always fits.
        new_h = max(height, round(src_h * scale))
        new_w = max(width, round(src_w * scale))
        if (new_h, new_w) != (src_h, src_w):
            interp = interpolation if interpolation is not None else _interpolation((src_h, src_w), (new_h, new_w))
            scaled = cv2.resize(frame, (new_w, new_h), interpolation=interp)
        else:
            scaled = frame
        top = (new_h - height) // 2
        left = (new_w - width) // 2
        out = np.ascontiguousarray(scaled[top : top + height, left : left + width])
    if frame.ndim == 3 and out.ndim == 2:  # cv2.resize drops a trailing channel of size 1
        out = out[:, :, None]
    return out


def pad_and_mask(
    frames: np.ndarray | Sequence[np.ndarray],
    length: int,
    *,
    frame_shape: tuple[int, int, int] | None = None,
    positions: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Place frames into a fixed-length uint8 clip and return ``(video, mask)``, mask 1 = real frame.

    Frames fill slots ``0..n-1`` in order, or the given ``positions`` (other slots stay zero
    with mask 0, e.g. for missing frames in the middle). ``frame_shape`` = (H, W, C) is needed
    when there are no frames, and is checked against them otherwise.
    """
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    n = len(frames)
    if n > length:
        raise ValueError(f"got {n} frames, more than the clip length {length}")
    if n:
        shape = tuple(frames[0].shape)
        if len(shape) != 3:
            raise ValueError(f"expected frames of shape (H, W, C), got {shape}")
        if frame_shape is not None and tuple(frame_shape) != shape:
            raise ValueError(f"frames have shape {shape}, but frame_shape={tuple(frame_shape)}")
    elif frame_shape is None:
        raise ValueError("frame_shape is required when there are no frames")
    else:
        shape = tuple(int(s) for s in frame_shape)
    if positions is None:
        slots = np.arange(n, dtype=np.int64)
    else:
        slots = np.asarray(positions, dtype=np.int64).reshape(-1)
        if len(slots) != n:
            raise ValueError(f"got {len(slots)} positions for {n} frames")
        if n and (slots.min() < 0 or slots.max() >= length):
            raise ValueError(f"positions must lie in [0, {length}), got {slots.min()}..{slots.max()}")
        if len(np.unique(slots)) != n:
            raise ValueError("positions must be unique")

    video = np.zeros((length, *shape), dtype=np.uint8)
    mask = np.zeros((length,), dtype=np.uint8)
    for slot, frame in zip(slots, frames):
        if frame.shape != shape:
            raise ValueError(f"frame for slot {slot} has shape {frame.shape}, expected {shape}")
        if frame.dtype != np.uint8:
            raise ValueError(f"frames must be uint8, got {frame.dtype}")
        video[slot] = frame
    mask[slots] = 1
    return video, mask


def encode_frame(frame: np.ndarray, *, image_format: str = "jpeg", quality: int = 90) -> bytes:
    """Encode one RGB uint8 (H, W, 3) frame as JPEG (at ``quality``) or PNG bytes."""
    ext = IMAGE_FORMATS.get(image_format.lower())
    if ext is None:
        raise ValueError(f"image_format must be one of {sorted(IMAGE_FORMATS)}, got {image_format!r}")
    if not 0 <= quality <= 100:
        raise ValueError(f"quality must be in [0, 100], got {quality}")
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"expected an RGB uint8 frame (H, W, 3), got {frame.dtype} {frame.shape}")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if ext == ".jpg" else []
    ok, buf = cv2.imencode(ext, cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise ValueError(f"OpenCV failed to encode a {frame.shape} frame as {image_format}")
    return buf.tobytes()


def encode_frames(frames: np.ndarray, *, image_format: str = "jpeg", quality: int = 90) -> list[bytes]:
    """Encode each RGB frame of a (T, H, W, 3) clip, the pre-encoded form TFDS's Video feature stores."""
    if frames.ndim != 4:
        raise ValueError(f"expected frames of shape (T, H, W, 3), got {frames.shape}")
    return [encode_frame(frame, image_format=image_format, quality=quality) for frame in frames]
