"""Only the source voxels a fixed-shape output needs, read through the proxy a window of planes at a time.

`vidvol.builders.transforms.volume.preprocess_volume` decides the output grid from the header
alone (canonical RAS, voxel size, centre crop/pad) and hands the part of the grid it keeps to
these functions (`copy_window` without resampling, `resample_window` with it). Windows go forward
in the file (a ``.nii.gz`` proxy decompresses once, front to back) and hold at most about
``window_bytes`` of source voxels.
"""

from __future__ import annotations

from collections.abc import Sequence

import nibabel as nib
import numpy as np

from vidvol.builders.transforms import volume_io

WINDOW_BYTES = 32 * 2**20  # source voxels (float32) held per window


class RasReader:
    """Reads float32 blocks of the chosen volume given in RAS grid ranges; NaN/Inf become 0 and are counted."""

    def __init__(self, opened: volume_io.OpenedImage, ornt: np.ndarray | None):
        self.opened = opened
        self.ornt = ornt  # None: the file is already in RAS order
        self.shape = tuple(opened.shape[:3])
        self.num_nonfinite = 0
        slow = 2 if opened.order == "F" else 0
        self.slab_axis = slow if ornt is None else int(ornt[slow, 0])  # RAS axis read a window at a time
        self.forward = ornt is None or ornt[slow, 1] > 0  # increasing RAS index = increasing file position

    def read(self, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """The RAS block ``[lo, hi)`` per RAS axis, as C-contiguous float32 in RAS axis order."""
        spatial = []
        for axis, n in enumerate(self.shape):
            ras_axis = axis if self.ornt is None else int(self.ornt[axis, 0])
            lo, hi = ranges[ras_axis]
            if self.ornt is not None and self.ornt[axis, 1] < 0:
                lo, hi = n - hi, n - lo
            spatial.append(slice(int(lo), int(hi)))
        try:
            block = volume_io.read_float32(self.opened.dataobj, self.opened.slicer(tuple(spatial)))
        except volume_io.READ_ERRORS as err:
            raise volume_io.VolumeError(
                f"{self.opened.path}: voxel data cannot be read, file truncated or corrupt ({type(err).__name__}: {err})"
            ) from err
        expected = tuple(s.stop - s.start for s in spatial)
        if block.shape != expected:
            raise volume_io.VolumeError(f"{self.opened.path}: read data shape {block.shape}, expected {expected}")
        finite = np.isfinite(block)
        bad = int(block.size - np.count_nonzero(finite))
        if bad:
            block[~finite] = 0.0
            self.num_nonfinite += bad
        del finite
        if self.ornt is not None:
            block = np.ascontiguousarray(nib.orientations.apply_orientation(block, self.ornt))
        return block


def _index(axis: int, part: slice) -> tuple:
    """`part` along `axis`, everything along the others."""
    index = [slice(None)] * 3
    index[axis] = part
    return tuple(index)


def copy_window(reader: RasReader, src: Sequence[slice], out: np.ndarray, *, window_bytes: int = WINDOW_BYTES) -> None:
    """``out[...] = RAS voxels src`` (no resampling), read a window of planes along the slab axis at a time.

    Without resampling, the kept RAS block is a source block (flips and axis swaps only): it is read
    in windows of whole planes along the source's slowest axis.
    """
    axis = reader.slab_axis
    plane_bytes = 4 * int(np.prod([s.stop - s.start for a, s in enumerate(src) if a != axis]))
    per = max(1, window_bytes // max(plane_bytes, 1))
    count = src[axis].stop - src[axis].start
    starts = list(range(0, count, per))
    for start in starts if reader.forward else starts[::-1]:
        stop = min(start + per, count)
        ranges = [(s.start, s.stop) for s in src]
        ranges[axis] = (src[axis].start + start, src[axis].start + stop)
        out[_index(axis, slice(start, stop))] = reader.read(ranges)


def _needs(floor: int, n: int) -> set[int]:
    """Source planes linear interpolation reads at a coordinate with this floor ("nearest": clamped to the last)."""
    return {min(floor, n - 1), min(floor + 1, n - 1)}


def _chunks(order: Sequence[int], floors: np.ndarray, n: int, max_planes: int, max_out: int) -> list[tuple[list[int], list[int]]]:
    """Output planes grouped in file order: (output planes, sorted source planes they need), each within the bounds."""
    chunks: list[tuple[list[int], list[int]]] = []
    planes: list[int] = []
    need: set[int] = set()
    for j in order:
        more = _needs(int(floors[j]), n)
        if planes and (len(need | more) > max_planes or len(planes) >= max_out):
            chunks.append((planes, sorted(need)))
            planes, need = [], set()
        planes.append(j)
        need |= more
    if planes:
        chunks.append((planes, sorted(need)))
    return chunks


def _runs(planes: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted plane indices as [lo, hi) runs of consecutive planes."""
    runs: list[tuple[int, int]] = []
    for p in planes:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def resample_window(reader: RasReader, ras_shape: Sequence[int], scale: Sequence[float], src: Sequence[slice],
                    out: np.ndarray, *, window_bytes: int = WINDOW_BYTES) -> None:
    """``out = resampled grid voxels src``: linear interpolation of RAS voxel ``k * scale`` (edges: nearest).

    The values of `volume.resample_to_spacing(order=1)` followed by the crop to `src`, read a window at a time.

    With resampling (linear, edge values past the last voxel), each output voxel needs two source
    voxels per axis: along the two fast axes the window spans the needed range, along the slowest it
    holds only the needed planes (a downsampled whole field of view skips the planes in between),
    and the output is made a window of output planes at a time.

    The values are those of `volume.resample_to_spacing` on the whole volume, bit for bit: the same
    scipy kernel (`ndimage.map_coordinates`, which shares `affine_transform`'s interpolation code)
    at the same coordinates shifted by whole voxels, which is exact in floating point, so the
    weights and their sums are the same numbers.
    """
    from scipy import ndimage  # here, not at import: registering mri_volumes needs no SciPy

    axis = reader.slab_axis
    coords, floors, ranges = [], [], []
    for a in range(3):
        k = np.arange(src[a].start, src[a].stop, dtype=np.float64)
        x = k * scale[a]  # past the last voxel, scipy's "nearest" clamps the neighbours, not the coordinate
        f = np.floor(x).astype(np.int64)
        coords.append(x)
        floors.append(f)
        if a != axis:
            need = set().union(*(_needs(int(v), ras_shape[a]) for v in np.unique(f)))
            lo, hi = min(need), max(need) + 1
            ranges.append((lo, hi))
            coords[a] = x - lo  # exact: a whole number no larger than x
        else:
            ranges.append((0, 0))
    plane_bytes = 4 * int(np.prod([hi - lo for a, (lo, hi) in enumerate(ranges) if a != axis]))
    out_plane = int(np.prod([s.stop - s.start for a, s in enumerate(src) if a != axis]))
    max_planes = max(2, window_bytes // max(plane_bytes, 1))
    max_out = max(1, window_bytes // (24 * out_plane))  # the float64 coordinates of a window's output
    count = src[axis].stop - src[axis].start
    order = range(count) if reader.forward else range(count - 1, -1, -1)
    chunks = _chunks(order, floors[axis], ras_shape[axis], max_planes, max_out)
    cache: dict[int, np.ndarray] = {}
    for c, (planes, need) in enumerate(chunks):
        missing = [p for p in need if p not in cache]
        runs = _runs(missing)
        for lo, hi in runs if reader.forward else runs[::-1]:
            block_ranges = list(ranges)
            block_ranges[axis] = (lo, hi)
            block = reader.read(block_ranges)
            for p in range(lo, hi):
                cache[p] = block[_index(axis, slice(p - lo, p - lo + 1))]
        window = np.concatenate([cache[p] for p in need], axis=axis) if len(need) > 1 else cache[need[0]]
        position = {p: i for i, p in enumerate(need)}
        first, last = min(planes), max(planes) + 1
        f = np.minimum(floors[axis][first:last], ras_shape[axis] - 1)
        shifts = f - np.array([position[int(v)] for v in f], dtype=np.int64)  # whole voxels, at most x: exact
        tables = [coords[a] if a != axis else coords[axis][first:last] - shifts for a in range(3)]
        grid = np.empty((3, *(len(t) for t in tables)), dtype=np.float64)
        for a, table in enumerate(tables):
            shape = [1, 1, 1]
            shape[a] = -1
            grid[a] = table.reshape(shape)
        values = ndimage.map_coordinates(window, grid, output=np.float32, order=1, mode="nearest", prefilter=False)
        out[_index(axis, slice(first, last))] = values
        del window, grid, values
        keep = set(chunks[c + 1][1]) if c + 1 < len(chunks) else set()
        cache = {p: np.array(cache[p]) for p in need if p in keep}  # copies: the window's blocks are freed
