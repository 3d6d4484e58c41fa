"""PNG previews of prepared datasets: frame strips, HRR curves, orthogonal MRI slices, masks shown.

CLI: `python -m vidvol preview NAME[/CONFIG] --data_dir DIR --split train --out preview.png`.
Notebook: `vidvol.cli.preview.show("hmdb51", data_dir=...)` returns a matplotlib Figure.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless by default; notebooks display the returned Figure inline

import matplotlib.pyplot as plt
import numpy as np
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)

MASKED_GREY = 128
FIG_WIDTH_IN = 12.0
DPI = 100


def grey_masked_frames(frames: np.ndarray, mask: np.ndarray, *, strength: float = 0.75) -> np.ndarray:
    """Frames with masked ones (mask 0) blended towards grey, so padding is visible at a glance."""
    out = frames.astype(np.float32)
    masked = np.asarray(mask) == 0
    out[masked] = out[masked] * (1 - strength) + MASKED_GREY * strength
    return out.clip(0, 255).astype(np.uint8)


def _strip_positions(length: int, max_frames: int) -> np.ndarray:
    """Evenly spaced frame positions to show in a strip."""
    return np.unique(np.linspace(0, length - 1, min(length, max_frames)).round().astype(int))


def _label_text(builder: tfds.core.DatasetBuilder, example: Mapping[str, Any]) -> str:
    """Label name (ClassLabel) or raw value, plus the example's id when there is one."""
    parts = []
    if "label" in example:
        feature = builder.info.features["label"]
        value = int(example["label"])
        parts.append(feature.int2str(value) if isinstance(feature, tfds.features.ClassLabel) else str(value))
    for key in ("video_id", "experiment", "subject", "path"):
        if key in example:
            value = example[key]
            parts.append(value.decode() if isinstance(value, bytes) else str(value))
            break
    return " | ".join(parts)


def _frame_strip(fig, grid, row, builder, ex, positions) -> None:
    """One strip of frames (masked ones greyed) in a grid row, titled with the label."""
    frames = grey_masked_frames(ex["video"], ex["mask"])
    for col, pos in enumerate(positions):
        ax = fig.add_subplot(grid[row, col])
        ax.imshow(frames[pos])
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"t={pos}{'' if ex['mask'][pos] else ' (masked)'}", fontsize=7)
        if col == 0:
            ax.set_title(_label_text(builder, ex), fontsize=9, loc="left")


def _video_rows(fig, grid_rows, builder, examples, max_frames):
    """One row per example: a strip of frames with masked frames greyed."""
    for row, ex in enumerate(examples):
        _frame_strip(fig, grid_rows, row, builder, ex, _strip_positions(len(ex["video"]), max_frames))


def _render_video(builder, examples, max_frames) -> plt.Figure:
    cols = max_frames
    fig = plt.figure(figsize=(FIG_WIDTH_IN, 1.6 * len(examples)), dpi=DPI)
    grid = fig.add_gridspec(len(examples), cols)
    _video_rows(fig, grid, builder, examples, max_frames)
    return fig


def _render_fire(builder, examples, max_frames) -> plt.Figure:
    fig = plt.figure(figsize=(FIG_WIDTH_IN, 3.2 * len(examples)), dpi=DPI)
    grid = fig.add_gridspec(2 * len(examples), max_frames, height_ratios=[1, 1.2] * len(examples))
    for i, ex in enumerate(examples):
        length = len(ex["video"])
        real = np.flatnonzero(np.asarray(ex["mask"]) > 0)
        span = int(real[-1]) + 1 if len(real) else length
        if span < length:  # spread the strip over the recording, show one padding frame at the end
            positions = np.append(_strip_positions(span, max_frames - 1), length - 1)
        else:
            positions = _strip_positions(length, max_frames)
        _frame_strip(fig, grid, 2 * i, builder, ex, positions)
        ax = fig.add_subplot(grid[2 * i + 1, :])
        t = np.arange(len(ex["hrr"]))
        ax.plot(t, ex["hrr"], color="tab:red", lw=1.5, label="HRR (kW)")
        for j in np.flatnonzero(np.asarray(ex["mask"]) == 0):
            ax.axvspan(j - 0.5, j + 0.5, color="0.6", alpha=0.5, lw=0)
        ax.set_xlim(-0.5, len(t) - 0.5)
        ax.set_xlabel("frame (grey: masked)", fontsize=8)
        ax.set_ylabel("HRR (kW)", fontsize=8)
    fig.tight_layout()
    return fig


def _render_volume(builder, examples) -> plt.Figure:
    fig, axes = plt.subplots(len(examples), 3, figsize=(FIG_WIDTH_IN * 0.6, 2.6 * len(examples)), dpi=DPI, squeeze=False)
    for i, ex in enumerate(examples):
        vol, mask = np.asarray(ex["volume"]), np.asarray(ex["mask"])
        centre = [s // 2 for s in vol.shape]
        lo, hi = np.percentile(vol[mask > 0], [1, 99]) if mask.any() else (vol.min(), vol.max())
        for axis, name in enumerate(("sagittal (x)", "coronal (y)", "axial (z)")):
            ax = axes[i, axis]
            sl = [slice(None)] * 3
            sl[axis] = centre[axis]
            img, m = vol[tuple(sl)].T, mask[tuple(sl)].T
            ax.imshow(img, cmap="gray", origin="lower", vmin=lo, vmax=hi if hi > lo else lo + 1)
            if 0 < m.sum() < m.size:
                ax.contour(m, levels=[0.5], colors="yellow", linewidths=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{name}" + (f" — {_label_text(builder, ex)}" if axis == 0 else ""), fontsize=8, loc="left")
    fig.tight_layout()
    return fig


def show(name: str, *, data_dir: str | None = None, split: str = "train", num_examples: int = 3,
         max_frames: int = 8) -> plt.Figure:
    """A matplotlib Figure previewing the first examples of a prepared dataset (for notebooks)."""
    builder = tfds.builder(name, data_dir=data_dir)
    # No autocache: TFDS caches a small split, and taking a few examples of it drops the cache with a warning.
    ds = builder.as_dataset(split=split, shuffle_files=False,
                            read_config=tfds.ReadConfig(try_autocache=False)).take(num_examples)
    examples = list(tfds.as_numpy(ds))
    if not examples:
        raise ValueError(f"{name} split {split!r} in {builder.data_dir} has no examples to preview")
    features = builder.info.features
    if "volume" in features:
        return _render_volume(builder, examples)
    if "hrr" in features:
        return _render_fire(builder, examples, max_frames)
    if "video" in features:
        return _render_video(builder, examples, max_frames)
    raise ValueError(f"{name}: no video or volume feature to preview (features: {sorted(features.keys())})")


def save(name: str, out: str, **kwargs: Any) -> str:
    """Renders `show(name, ...)` to a PNG file and returns its path."""
    fig = show(name, **kwargs)
    fig.savefig(out, format="png", dpi=DPI)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry: `python -m vidvol preview NAME[/CONFIG] --data_dir DIR --split train --out preview.png`."""
    parser = argparse.ArgumentParser(prog="vidvol preview", description=__doc__)
    parser.add_argument("name", help="dataset, optionally with /config")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--out", default="preview.png")
    parser.add_argument("--num_examples", type=int, default=3)
    parser.add_argument("--max_frames", type=int, default=8)
    args = parser.parse_args(argv)
    path = save(args.name, args.out, data_dir=args.data_dir, split=args.split, num_examples=args.num_examples,
                max_frames=args.max_frames)
    print(f"wrote {path}")
    return 0
