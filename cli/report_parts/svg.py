"""The report's charts as inline SVG: label counts, histograms, an HRR curve; each with a text title for readers.

Every chart carries `role="img"` and an `aria-label`, and writes its numbers as text, so it reads
without the picture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
FONT = 'font-family="sans-serif" font-size="11"'


def _open(width: int, height: int, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>')


def label_bars(names: Sequence[str], counts: Mapping[str, Sequence[int]], label: str) -> str:
    """Horizontal bars: one row per class, one bar per split, each with its count.

    Args:
      names: the class names, one row each.
      counts: split -> count per class (in `names`' order).
      label: the chart's title (also its accessible name).

    Returns:
      The SVG element.
    """
    splits = list(counts)
    bar, gap, left, width = 10, 6, min(220, 12 + 7 * max((len(n) for n in names), default=4)), 360
    row = bar * len(splits) + gap
    top = 18
    height = top + row * len(names) + 6
    most = max((max(c, default=0) for c in counts.values()), default=0) or 1
    out = [_open(left + width + 60, height, label)]
    for j, split in enumerate(splits):  # the legend
        out.append(f'<rect x="{left + 90 * j}" y="3" width="10" height="10" fill="{COLOURS[j % len(COLOURS)]}"/>'
                   f'<text x="{left + 90 * j + 14}" y="12" {FONT}>{escape(split)}</text>')
    for i, name in enumerate(names):
        y = top + i * row
        out.append(f'<text x="{left - 6}" y="{y + bar * len(splits) / 2 + 4:.0f}" text-anchor="end" {FONT}>'
                   f'{escape(name)}</text>')
        for j, split in enumerate(splits):
            n = int(counts[split][i])
            w = width * n / most
            yy = y + j * bar
            out.append(f'<rect x="{left}" y="{yy}" width="{w:.1f}" height="{bar - 1}" '
                       f'fill="{COLOURS[j % len(COLOURS)]}"><title>{escape(name)}, {escape(split)}: {n}</title></rect>'
                       f'<text x="{left + w + 4:.1f}" y="{yy + bar - 2}" {FONT} font-size="9">{n}</text>')
    out.append("</svg>")
    return "".join(out)


def histogram(values: np.ndarray, label: str, xlabel: str, bins: int = 40) -> str:
    """A histogram of `values` (bars, the value range on the axis, the count of the tallest bar).

    Args:
      values: the numbers (any shape; NaNs dropped).
      label: the chart's title (also its accessible name).
      xlabel: what the values are, with their unit.
      bins: number of bars.

    Returns:
      The SVG element (a note in its place when there are no values).
    """
    values = np.asarray(values, np.float64).reshape(-1)
    values = values[np.isfinite(values)]
    width, height, left, bottom = 420, 150, 44, 30
    if values.size == 0:
        return f"<p>{escape(label)}: no values.</p>"
    lo, hi = float(values.min()), float(values.max())
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi if hi > lo else lo + 1))
    top = int(counts.max()) or 1
    plot_w, plot_h = width - left - 10, height - bottom - 10
    out = [_open(width, height, label)]
    for k, n in enumerate(counts):
        h = plot_h * n / top
        x = left + plot_w * k / bins
        out.append(f'<rect x="{x:.1f}" y="{10 + plot_h - h:.1f}" width="{max(plot_w / bins - 1, 1):.1f}" height="{h:.1f}" '
                   f'fill="{COLOURS[0]}"><title>{edges[k]:.4g} to {edges[k + 1]:.4g}: {int(n)}</title></rect>')
    base = 10 + plot_h
    out.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>'
               f'<text x="{left}" y="{base + 13}" {FONT}>{lo:.4g}</text>'
               f'<text x="{left + plot_w}" y="{base + 13}" text-anchor="end" {FONT}>{hi:.4g}</text>'
               f'<text x="{left + plot_w / 2:.0f}" y="{base + 26}" text-anchor="middle" {FONT}>{escape(xlabel)}</text>'
               f'<text x="{left - 4}" y="18" text-anchor="end" {FONT}>{top}</text>'
               f'<text x="{left - 4}" y="{base}" text-anchor="end" {FONT}>0</text></svg>')
    return "".join(out)


def curve(values: np.ndarray, mask: np.ndarray, label: str, ylabel: str) -> str:
    """A line over frames (an experiment's HRR), masked frames shaded grey.

    Args:
      values: one value per frame.
      mask: 1 for a real frame, 0 for a masked one.
      label: the chart's title (also its accessible name).
      ylabel: what the values are, with their unit.

    Returns:
      The SVG element.
    """
    values = np.nan_to_num(np.asarray(values, np.float64).reshape(-1))
    mask = np.asarray(mask).reshape(-1)
    n = len(values)
    width, height, left, bottom = 640, 140, 50, 28
    plot_w, plot_h = width - left - 10, height - bottom - 10
    real = values[mask > 0] if mask.any() else values
    lo, hi = min(0.0, float(real.min()) if real.size else 0.0), float(real.max()) if real.size else 1.0
    hi = hi if hi > lo else lo + 1
    step = plot_w / max(n, 1)
    out = [_open(width, height, label)]
    for i in np.flatnonzero(mask == 0):
        out.append(f'<rect x="{left + step * i:.1f}" y="10" width="{step:.2f}" height="{plot_h}" fill="#bbb"/>')
    points = " ".join(f"{left + step * (i + 0.5):.1f},{10 + plot_h * (1 - (min(v, hi) - lo) / (hi - lo)):.1f}"
                      for i, v in enumerate(values))
    base = 10 + plot_h
    out.append(f'<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{points}"/>'
               f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#333"/>'
               f'<text x="{left - 4}" y="18" text-anchor="end" {FONT}>{hi:.4g}</text>'
               f'<text x="{left - 4}" y="{base}" text-anchor="end" {FONT}>{lo:.4g}</text>'
               f'<text x="{left}" y="{base + 13}" {FONT}>frame 0</text>'
               f'<text x="{left + plot_w}" y="{base + 13}" text-anchor="end" {FONT}>frame {n - 1}</text>'
               f'<text x="{left + plot_w / 2:.0f}" y="{base + 25}" text-anchor="middle" {FONT}>'
               f'{escape(ylabel)} per frame (grey: masked)</text></svg>')
    return "".join(out)
