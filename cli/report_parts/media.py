"""The report's images, inlined as data: URIs: animated WebP clips, frame strips, orthogonal MRI slices.

Masked frames are blended towards grey and carry a red band along their bottom edge; the MRI mask's
edge is drawn in yellow. Every image is scaled down (`MAX_SIDE`) to keep the page small.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

MASKED_GREY = 128
MAX_SIDE = 128  # longest side of a previewed frame, in pixels
CLIP_FRAMES = 16  # frames of an animated clip at most, evenly spread
STRIP_FRAMES = 8
WEBP_QUALITY = 60
MASK_EDGE = (255, 220, 0)
MASK_BAND = (220, 30, 30)


def data_uri(data: bytes, mime: str) -> str:
    """`data:MIME;base64,...` for an image's bytes."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def positions(length: int, count: int) -> list[int]:
    """Up to `count` evenly spread frame positions of `length` frames."""
    if length <= 0:
        return []
    return sorted(set(np.linspace(0, length - 1, min(length, count)).round().astype(int).tolist()))


def frame_at(frames, i: int) -> np.ndarray:
    """Frame `i` of a clip held as pixels or as encoded images (JPEG/PNG bytes, decoded here, one at a time)."""
    frame = frames[i]
    if isinstance(frame, (bytes, np.bytes_)):
        with Image.open(io.BytesIO(bytes(frame))) as image:
            return np.asarray(image.convert("RGB"))
    return np.asarray(frame)


def _rgb(frame: np.ndarray) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim == 2:
        frame = frame[..., None]
    if frame.shape[-1] == 1:
        frame = np.repeat(frame, 3, axis=-1)
    return frame[..., :3].astype(np.uint8)


def shown_frame(frame: np.ndarray, masked: bool) -> Image.Image:
    """One frame as shown: scaled to `MAX_SIDE`; a masked one greyed, with a red band along its bottom."""
    out = _rgb(frame).astype(np.float32)
    if masked:
        out = out * 0.25 + MASKED_GREY * 0.75
    image = Image.fromarray(out.clip(0, 255).astype(np.uint8))
    scale = MAX_SIDE / max(image.size)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.BILINEAR)
    if masked:
        band = np.asarray(image).copy()
        band[-max(2, band.shape[0] // 10):] = MASK_BAND
        image = Image.fromarray(band)
    return image


def shown_positions(kind: str, mask: np.ndarray) -> list[int]:
    """The frames a preview shows: a fire_hrr strip (`fire_positions`) or up to `CLIP_FRAMES` of a clip, evenly spread."""
    mask = np.asarray(mask).reshape(-1)
    return fire_positions(mask) if kind == "fire" else positions(len(mask), CLIP_FRAMES)


def clip_webp(frames, masked, fps: float = 8.0) -> tuple[bytes, int]:
    """An animated WebP of the frames given (masked ones greyed and banded), looping.

    Args:
      frames: the frames to show, as pixels or encoded images.
      masked: whether each of them is masked.
      fps: frames per second of the animation.

    Returns:
      (the WebP file's bytes, its width in pixels).
    """
    shown = [shown_frame(frame_at(frames, k), bool(m)) for k, m in enumerate(masked)]
    buf = io.BytesIO()
    shown[0].save(buf, format="WEBP", save_all=True, append_images=shown[1:], duration=round(1000 / fps), loop=0,
                  quality=WEBP_QUALITY, method=2)
    return buf.getvalue(), shown[0].width


def strip_jpeg(frames, masked) -> bytes:
    """The frames given side by side (masked ones greyed and banded), as one JPEG."""
    tiles = [shown_frame(frame_at(frames, k), bool(m)) for k, m in enumerate(masked)]
    gap = 3
    width = sum(t.width for t in tiles) + gap * (len(tiles) - 1)
    canvas = Image.new("RGB", (max(width, 1), max(t.height for t in tiles)), (255, 255, 255))
    x = 0
    for tile in tiles:
        canvas.paste(tile, (x, 0))
        x += tile.width + gap
    buf = io.BytesIO()
    canvas.save(buf, format="JPEG", quality=80)
    return buf.getvalue()


def fire_positions(mask: np.ndarray, count: int = STRIP_FRAMES) -> list[int]:
    """Strip positions spread over a recording's real frames, plus its first masked frame after them, if any."""
    mask = np.asarray(mask).reshape(-1)
    real = np.flatnonzero(mask > 0)
    span = int(real[-1]) + 1 if len(real) else len(mask)
    where = positions(span, count - 1 if span < len(mask) else count)
    return where + ([span] if span < len(mask) else [])


def _edge(mask2d: np.ndarray) -> np.ndarray:
    """The pixels of a 2-D mask that touch a pixel outside it (its outline)."""
    m = mask2d > 0
    padded = np.pad(m, 1, constant_values=False)
    inner = padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    return m & ~inner


def slices_png(volume: np.ndarray, mask: np.ndarray) -> bytes:
    """The three orthogonal centre slices of a volume (sagittal, coronal, axial), mask outline in yellow, one PNG.

    Axes are those `mri_volumes` stores (RAS: left->right, posterior->anterior, inferior->superior); each slice
    is drawn with the superior (or anterior) side up. Intensities are windowed to the 1st-99th percentile inside the mask.
    """
    vol, msk = np.asarray(volume, np.float32), np.asarray(mask)
    inside = vol[msk > 0] if msk.any() else vol.reshape(-1)
    lo, hi = (np.percentile(inside, [1, 99]) if inside.size else (0.0, 1.0))
    hi = hi if hi > lo else lo + 1
    tiles = []
    for axis in range(3):
        index = [slice(None)] * 3
        index[axis] = vol.shape[axis] // 2
        img, m = vol[tuple(index)].T[::-1], msk[tuple(index)].T[::-1]
        grey = ((img - lo) / (hi - lo) * 255).clip(0, 255).astype(np.uint8)
        rgb = np.repeat(grey[..., None], 3, axis=-1)
        if 0 < int((m > 0).sum()) < m.size:
            rgb[_edge(m)] = MASK_EDGE
        scale = max(1, min(4, 128 // max(rgb.shape[:2])))
        tiles.append(np.kron(rgb, np.ones((scale, scale, 1), np.uint8)))
    height = max(t.shape[0] for t in tiles)
    gap = np.full((height, 4, 3), 255, np.uint8)
    padded = [np.pad(t, ((0, height - t.shape[0]), (0, 0), (0, 0)), constant_values=255) for t in tiles]
    row = np.concatenate([padded[0], gap, padded[1], gap, padded[2]], axis=1)
    image = Image.fromarray(row)
    if max(image.size) > 3 * MAX_SIDE * 2:
        scale = 3 * MAX_SIDE * 2 / max(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BILINEAR)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False)
    return buf.getvalue()
