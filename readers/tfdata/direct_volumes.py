"""Direct volume reads: a volume's stored bytes go from the shard file into the output, nothing in between.

For local TFRecord shards of one `WholeNumberVolume` stored as int16, `vidvol.load` indexes each
shard once (`index_shard`) and reads a batch's volumes in one Python call (`VolumeReads`; with
volume augmentation `PatchReads`) beside TFDS's parse of the small records (`DirectParser`);
anything else reads whole records (`plan_direct`; docs/reading.md, "Pipeline").
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import artifacts
from vidvol.core import protowire
from vidvol.core import redact
from vidvol.core import store
from vidvol.readers import augment_volume
from vidvol.readers import bucket
from vidvol.readers import host_calls
from vidvol.core import tfrecord
from vidvol.core.tfrecord import FOOTER as _FOOTER, HEADER as _HEADER, crc32c_extend, masked as _mask
from vidvol.readers import records
from vidvol.readers.tfdata.shard_window import ShardWindow

logger = logging.getLogger(__name__)

_WINDOW = 1 << 12  # bytes read at a time while indexing: a record's small features fit


class IndexError_(ValueError):
    """A shard's records do not walk as expected (the whole-record path reads it instead, or it is damaged)."""


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """(value, position after it) of a protobuf varint in buf at `at` (IndexError_ when cut off)."""
    try:
        return protowire.decode_varint(buf, at)
    except ValueError as e:
        raise IndexError_(str(e)) from None


@dataclasses.dataclass
class ShardIndex:
    """Where one shard's records and their volume bytes lie, and each record without its volume."""

    path: str
    small: list[bytes]  # each record as a tf.train.Example without the volume's bytes entry
    starts: np.ndarray  # int64: file offset of each record (its length header)
    lengths: np.ndarray  # int64: each record's serialized length
    data_at: np.ndarray  # int64: offset of the volume bytes inside the record's serialized bytes
    data_len: np.ndarray  # int64: bytes of the stored volume
    int16: np.ndarray  # bool: the volume is stored as int16 (else float32)
    verified: np.ndarray = None  # bool: the record's CRC32C was checked in this process

    def __post_init__(self):
        if self.verified is None:
            self.verified = np.zeros(len(self.small), bool)


def _int64_value(entry: bytes, at: int) -> int:
    """The first value of an Int64List feature whose Feature message starts at `at` in a map entry."""
    if entry[at:at + 1] != b"\x12":
        raise IndexError_("int64 feature without a value")
    _, at = _varint(entry, at + 1)
    if entry[at:at + 1] != b"\x1a":
        raise IndexError_("not an int64_list feature")
    _, at = _varint(entry, at + 1)
    if entry[at:at + 1] == b"\x0a":  # packed
        _, at = _varint(entry, at + 1)
        return _varint(entry, at)[0]
    if entry[at:at + 1] == b"\x08":
        return _varint(entry, at + 1)[0]
    raise IndexError_("empty int64_list")


_indexes = tfrecord.FileCache()
_bucket_indexes: dict[tuple[str, str, str], ShardIndex] = {}  # (shard URL, SHA-256, volume) -> its index
_bucket_lock = threading.Lock()


def cached_index(path: str, volume: str) -> ShardIndex:
    """`index_shard`, remembered while the file keeps its size, mtime and inode (each `load` of a split reuses it)."""
    return _indexes.get(path, index_shard, volume)


def bucket_index(path: str, volume: str) -> ShardIndex:
    """`index_shard` of a bucket shard (`readers.bucket`): walked once by small ranged GETs (or in the shard
    cache), then kept beside the dataset's metadata, keyed by the shard's SHA-256."""
    remote, name = bucket.shard_of_url(path)
    key = (path, remote.entries[name].get("sha256", ""), volume)
    with _bucket_lock:
        if key in _bucket_indexes:  # kept in the process too: records checked once stay checked
            return _bucket_indexes[key]
    saved = bucket.saved_index_path(remote, name, f"volume-{volume.replace('/', '_')}")
    try:
        with np.load(saved) as z:
            small = [bytes(b) for b in np.split(z["small"], np.cumsum(z["small_len"])[:-1])] if len(z["small_len"]) else []
            index = ShardIndex(path, small, z["starts"], z["lengths"], z["data_at"], z["data_len"], z["int16"])
    except (OSError, KeyError, ValueError):
        index = _walk_bucket_shard(remote, name, path, volume, saved)
    with _bucket_lock:
        return _bucket_indexes.setdefault(key, index)


def _walk_bucket_shard(remote: bucket.Remote, name: str, path: str, volume: str, saved: str) -> ShardIndex:
    win = bucket.reader(remote, name, _WINDOW * 4)
    try:
        size = int(remote.entries[name].get("num_bytes") or store.size(path))
        index = walk_examples(path, win, size, volume)
    finally:
        win.f.close()
    bucket.save_index(saved, small=np.frombuffer(b"".join(index.small), np.uint8),
                      small_len=np.asarray([len(b) for b in index.small], np.int64), starts=index.starts,
                      lengths=index.lengths, data_at=index.data_at, data_len=index.data_len, int16=index.int16)
    return index


def index_shard(path: str, volume: str) -> ShardIndex:
    """Walks one TFRecord file of `tf.train.Example`s, finding the bytes of `volume` ("volume/data") and its flag.

    The TFRecord framing and the `tf.train.Example` wire format are walked with a few small reads per
    record, the volume bytes skipped: where each record and its volume bytes lie, and the record
    without them (a valid, small `tf.train.Example` holding every other feature).

    Args:
      path: a local TFRecord shard file.
      volume: the volume feature's name.

    Returns:
      The shard's `ShardIndex`.

    Raises:
      IndexError_: the records or their examples do not walk (then whole records are read).
    """
    with open(path, "rb") as f:
        return walk_examples(path, tfrecord.Window(f, _WINDOW), os.fstat(f.fileno()).st_size, volume)


def walk_examples(path: str, win: tfrecord.Window, size: int, volume: str) -> ShardIndex:
    """`index_shard` over any `tfrecord.Window` of a file of `size` bytes (a local file, or a bucket shard's GETs)."""
    target, flag_key = f"{volume}/data".encode(), f"{volume}/int16".encode()
    small, starts, lengths, data_at, data_len, int16 = [], [], [], [], [], []
    try:
        for pos, length in tfrecord.walk(win, size):  # lazily: the body reads share the window
            d0 = pos + _HEADER
            head = win.get(d0, 12)
            if not head or head[0] != 0x0A:
                raise IndexError_(f"record at byte {pos} is not a tf.train.Example")
            flen, p = _varint(head, 1)
            p, end = d0 + p, d0 + length
            if p + flen != end:
                raise IndexError_(f"record at byte {pos}: unexpected Example layout")
            kept, found, flag = [], None, None
            while p < end:
                entry_head = win.get(p, 16 + len(target))
                if entry_head[0] != 0x0A:
                    raise IndexError_(f"record at byte {pos}: unexpected Features layout")
                elen, q = _varint(entry_head, 1)
                entry_end = p + q + elen
                eh = win.get(p + q, min(elen, 32 + len(target)))
                if eh[:1] != b"\x0a":
                    raise IndexError_(f"record at byte {pos}: feature entry without a leading key")
                klen, k = _varint(eh, 1)
                if eh[k:k + klen] == target:
                    at, value = k + klen, None
                    for tag in (0x12, 0x0A, 0x0A):  # Feature value -> bytes_list -> first bytes value
                        if eh[at:at + 1] != bytes([tag]):
                            raise IndexError_(f"record at byte {pos}: {volume} data is not a single bytes value")
                        value, at = _varint(eh, at + 1)
                    found = (p + q + at - d0, value)
                    if p + q + at + value > entry_end:
                        raise IndexError_(f"record at byte {pos}: {volume} data runs past its entry")
                else:
                    entry = win.get(p, entry_end - p)
                    kept.append(entry)
                    if eh[k:k + klen] == flag_key:
                        flag = _int64_value(entry, q + k + klen)
                p = entry_end
            if found is None or flag is None:
                raise IndexError_(f"record at byte {pos} has no {volume!r} data and int16 flag")
            body = b"".join(kept)
            small.append(b"\x0a" + protowire.encode_varint(len(body)) + body)
            starts.append(pos)
            lengths.append(length)
            data_at.append(found[0])
            data_len.append(found[1])
            int16.append(flag == 1)
    except tfrecord.FrameError as e:
        raise IndexError_(str(e)) from None
    as_array = lambda v: np.asarray(v, np.int64)
    return ShardIndex(path, small, as_array(starts), as_array(lengths), as_array(data_at), as_array(data_len),
                      np.asarray(int16, bool))


class VolumeReads(host_calls.HostCall):
    """Python body of `volume_batch`: a batch of int16-stored volumes read from their shards into one array.

    int16 output: each volume's bytes go from the file straight into the batch buffer, which becomes
    the tensor without a copy. float32 output (`result`): each volume is read a chunk at a time into a
    small scratch buffer that stays in the CPU's cache, and each chunk converted from there into the
    float32 batch buffer (one pass over the output, no int16 batch written to memory and read back by
    a cast). A record's CRC32C (and length) is checked the first time it is read in this process
    (`ShardIndex.verified`); later epochs read just the volume bytes.
    """

    chunk_bytes = 1 << 19  # read and converted at a time in float32 mode: fits a core's L2 cache

    def __init__(self, indexes: Sequence[ShardIndex], shape: Sequence[int], verify: str, result: str = "int16",
                 cache_limit: int | None = None, window: ShardWindow | None = None):
        self.indexes, self.shape, self.verify = list(indexes), tuple(int(d) for d in shape), verify
        self.window = window  # whole bucket shards in memory (the shard-streaming order); None: ranged GETs
        # Bucket shards (`readers.bucket`): read from the shard cache (`cache_limit` bytes), else by ranged GETs.
        self.remote = {k: bucket.shard_of_url(index.path) for k, index in enumerate(self.indexes)
                       if not tfrecord.is_local(index.path)}
        self.cache_limit = cache_limit
        if cache_limit is not None:
            for remote, name in self.remote.values():
                bucket.check_fits(remote, name, cache_limit)  # at load(), not at the first batch
        self.count = int(np.prod(self.shape))
        self.nbytes = self.count * 2
        self.out = np.dtype("<i2")
        self.result = np.dtype(np.float32) if result == "float32" else self.out  # what `run` returns
        self.bytes_read = 0  # bytes read from the shard files by this reader (records checked whole included)
        self._lock = threading.Lock()
        self._scratch = threading.local()
        super().__init__()

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes

    def _scratch_of(self, key: tuple[int, ...]) -> np.ndarray:
        """This thread's int16 scratch buffer for `key` (a tag, then the buffer's shape)."""
        buffers = self._scratch.__dict__.setdefault("buffers", {})
        if key not in buffers:
            buffers[key] = np.empty(key[1:], self.out)
        return buffers[key]

    def run(self, files: np.ndarray, rows: np.ndarray, epoch=None, key=None) -> np.ndarray:
        batch = len(files)
        out = host_calls.pool.take(batch * self.count * self.result.itemsize).view(self.result)
        out = out.reshape((batch,) + self.shape)
        if self.remote and self.window is not None and epoch is not None and batch:
            self._count(self._from_window(out, files, rows, int(np.asarray(epoch).reshape(-1)[0]),
                                          int(np.asarray(key).reshape(-1)[0])))
            return out
        if self.remote and self.cache_limit is None:
            self._count(self._fetch(out, files, rows))
            return out
        paths = {}
        for f in {int(f) for f in files}:
            found = self.remote.get(f)
            paths[f] = self.indexes[f].path if found is None else bucket.ensure_cached(*found, self.cache_limit)
        one = self._read_one if self.result == self.out else self._read_converted
        self._count(sum(one(out[i], int(files[i]), int(rows[i]), paths[int(files[i])]) for i in range(batch)))
        return out

    def _fetch(self, out: np.ndarray, files: np.ndarray, rows: np.ndarray) -> int:
        """The batch's volumes from bucket shards: one ranged GET each, all at once (bytes read). A record's first
        read in the process fetches its whole frame (length and CRC32C checked); later ones just the volume."""
        spans, places = [], []
        for f, r in zip(files, rows):
            index, row = self.indexes[int(f)], int(r)
            places.append((index, row, not index.verified[row]))
            spans.append((index.path,) + self._span(index, row, places[-1][2]))
        return sum(self._take(out[i], data, *place)
                   for i, (data, place) in enumerate(zip(store.read_many(spans, copy=False), places)))

    def _span(self, index: ShardIndex, row: int, whole: bool) -> tuple[int, int]:
        """The byte range read for a record: its whole frame (`whole`: checked on its first read), else its volume."""
        start, length, at = int(index.starts[row]), int(index.lengths[row]), int(index.data_at[row])
        if whole:
            return start, start + _HEADER + length + _FOOTER
        return start + _HEADER + at, start + _HEADER + at + self.nbytes

    def _from_window(self, out: np.ndarray, files: np.ndarray, rows: np.ndarray, epoch: int, key: int) -> int:
        """The batch's volumes copied from whole shards held in the window (fetched whole, ahead of the reader)."""
        with self.window.holding(sorted({int(f) for f in files}), epoch, key) as held:
            read = 0
            for i, (f, r) in enumerate(zip(files, rows)):
                index, row = self.indexes[int(f)], int(r)
                whole = not index.verified[row]
                read += self._take(out[i], memoryview(held[int(f)])[slice(*self._span(index, row, whole))], index, row, whole)
            return read

    def _take(self, target: np.ndarray, data, index: ShardIndex, row: int, whole: bool) -> int:
        """One fetched record (`whole`: its frame, checked) or volume's bytes into `target` (bytes taken)."""
        start, length, at = int(index.starts[row]), int(index.lengths[row]), int(index.data_at[row])
        where = f"{redact.url(index.path)}: the record at byte {start}"
        want = _HEADER + length + _FOOTER if whole else self.nbytes
        if len(data) != want:
            raise ValueError(f"{where} could not be read whole ({len(data)} of {want} bytes): the shard changed "
                             f"since it was indexed. {self.verify}")
        view = memoryview(data)
        if whole:
            if int.from_bytes(view[:8], "little") != length or _mask(crc32c_extend(
                    0, view[_HEADER:_HEADER + length])) != int.from_bytes(view[-_FOOTER:], "little"):
                raise ValueError(f"{where} is corrupted (its length or CRC32C does not match). {self.verify}")
            index.verified[row] = True
            view = view[_HEADER + at:_HEADER + at + self.nbytes]
        np.copyto(target.reshape(-1), np.frombuffer(view, self.out), casting="unsafe")
        return len(data)

    def _read_converted(self, target: np.ndarray, file: int, row: int, path: str | None = None) -> int:
        """One volume into a float32 `target`, a cache-sized chunk at a time (bytes read)."""
        index = self.indexes[file]
        path = path or index.path
        if not index.verified[row]:  # the first read in this process: the whole record, its CRC32C checked
            whole = self._scratch_of((0,) + self.shape)
            read = self._read_one(whole, file, row, path)
            np.copyto(target, whole, casting="unsafe")
            return read
        step = self.chunk_bytes // 2
        scratch = self._scratch_of((1, step))
        view, flat = memoryview(scratch).cast("B"), target.reshape(-1)
        base = int(index.starts[row]) + _HEADER + int(index.data_at[row])
        fd = os.open(path, os.O_RDONLY)
        try:
            for at in range(0, self.count, step):
                n = min(step, self.count - at)
                got = os.preadv(fd, [view[: n * 2]], base + at * 2)
                if got != n * 2:
                    raise ValueError(f"{index.path}: the record at byte {int(index.starts[row])} could not be read whole "
                                     f"({got} of {n * 2} bytes of a chunk): the file changed or was cut short since it "
                                     f"was indexed. {self.verify}")
                np.copyto(flat[at: at + n], scratch[:n], casting="unsafe")
        finally:
            os.close(fd)
        return self.nbytes

    def _read_one(self, target: np.ndarray, file: int, row: int, path: str | None = None) -> int:
        """One volume into `target` (bytes read); the record's length and CRC32C checked on its first read.

        `path`: where the shard's bytes are (a bucket shard's cached copy), else its index's path.
        """
        index = self.indexes[file]
        start, length, at = int(index.starts[row]), int(index.lengths[row]), int(index.data_at[row])
        check = not index.verified[row]
        view = memoryview(target.reshape(-1)).cast("B")
        fd = os.open(path or index.path, os.O_RDONLY)
        try:
            if check:
                header, before, after = bytearray(_HEADER), bytearray(at), bytearray(length - at - self.nbytes + _FOOTER)
                got = os.preadv(fd, [header, before, view, after], start)
                want = _HEADER + length + _FOOTER
            else:
                got, want = os.preadv(fd, [view], start + _HEADER + at), self.nbytes
        finally:
            os.close(fd)
        where = f"{index.path}: the record at byte {start}"
        if got != want or (check and int.from_bytes(header[:8], "little") != length):
            raise ValueError(f"{where} could not be read whole ({got} of {want} bytes): the file changed or was cut "
                             f"short since it was indexed. {self.verify}")
        if check:
            crc = crc32c_extend(crc32c_extend(crc32c_extend(0, before), view), memoryview(after)[:-_FOOTER])
            if _mask(crc) != int.from_bytes(after[-_FOOTER:], "little"):
                raise ValueError(f"{where} is corrupted (its CRC32C does not match). {self.verify}")
            index.verified[row] = True
        return got


class PatchReads(VolumeReads):
    """Python body of the augmented `volume_batch`: each volume's random patches read from its shard, flipped and turned.

    Only the rows of a patch come from the file (`runs`): one run from its first voxel to its last
    (the rows and row ends between come along), one run per D slice, or one per (D, H) row (the
    patch's bytes alone), whichever costs least, counting a read call as `call_bytes` (what the
    kernel copies in the time one call costs; each call is also a hand-over of the GIL). The runs
    land in a scratch buffer, from which the patch is written into the batch through its
    flip/rotation view (`augment_volume.VolumePlan.write_sample`). A record's first read in the
    process reads it whole (its CRC32C), and so does every read where a volume's patches would
    together read as many bytes.
    """

    call_bytes = 16 << 10

    def __init__(self, indexes: Sequence[ShardIndex], shape: Sequence[int], verify: str,
                 plan: augment_volume.VolumePlan, dtype: str):
        super().__init__(indexes, shape, verify)
        self.plan, self.work = plan, plan.work_dtype(dtype)
        self.mode = self.layout()
        self.whole = self.reads_whole  # fixed by the layout

    def layout(self) -> str:
        """'block' | 'slab' | 'row': the cheapest way to read a patch's rows (`call_bytes` per call, plus the bytes)."""
        (_, h, w), (pd, ph, pw) = self.shape, self.plan.patch
        costs = {"block": self.call_bytes + ((pd - 1) * h * w + (ph - 1) * w + pw) * 2,
                 "slab": pd * (self.call_bytes + ((ph - 1) * w + pw) * 2),
                 "row": pd * ph * (self.call_bytes + pw * 2)}
        return min(costs, key=costs.get)

    @property
    def patch_bytes(self) -> int:
        """Bytes the runs of one patch read (the same wherever the patch lies)."""
        return sum(count for _, count, _ in self.runs((0, 0, 0))) * 2

    @property
    def reads_whole(self) -> bool:
        """Whether a volume's patches together would read as much as the volume: then it is read once, and cut."""
        return self.plan.samples * self.patch_bytes >= self.nbytes

    def scratch_shape(self) -> tuple[int, int, int]:
        """The scratch buffer of a patch: its rows as read (whole slices, slice rows, or just the patch's rows)."""
        (_, h, w), (pd, ph, pw) = self.shape, self.plan.patch
        return {"block": (pd, h, w), "slab": (pd, ph, w), "row": (pd, ph, pw)}[self.mode]

    def runs(self, start: Sequence[int]) -> list[tuple[int, int, int]]:
        """The reads of the patch at `start`: (voxel offset in the volume, voxels, voxel offset in the scratch) each;
        the patch's voxel (d, r, c) then lies at scratch[d, r, c]."""
        (_, h, w), (pd, ph, pw), (s0, s1, s2) = self.shape, self.plan.patch, (int(v) for v in start)
        first = (s0 * h + s1) * w + s2
        if self.mode == "block":
            return [(first, (pd - 1) * h * w + (ph - 1) * w + pw, 0)]
        if self.mode == "slab":
            return [(first + d * h * w, (ph - 1) * w + pw, d * ph * w) for d in range(pd)]
        return [(first + d * h * w + r * w, pw, (d * ph + r) * pw) for d in range(pd) for r in range(ph)]

    def run(self, files: np.ndarray, rows: np.ndarray, boxes: np.ndarray, seeds: np.ndarray, epochs: np.ndarray,
            indices: np.ndarray):
        plan = self.plan
        draws = plan.batch_draws(seeds, epochs, indices)
        shape = (len(files), plan.samples) + plan.patch
        out = host_calls.pool.take(int(np.prod(shape)) * self.work.itemsize).view(self.work).reshape(shape)
        new_boxes = np.zeros((len(files), plan.samples, 3, 2), np.int64)
        read = 0
        for i, d in enumerate(draws):
            read += self._read_patches(out[i], new_boxes[i], boxes[i], int(files[i]), int(rows[i]), d)
        self._count(read)
        return out, new_boxes

    def _read_patches(self, targets: np.ndarray, new_boxes: np.ndarray, box: np.ndarray, file: int, row: int,
                      draws: augment_volume.VolumeSamples) -> int:
        """One volume's patches into `targets` [S, ...] and their mask boxes into `new_boxes` (bytes read)."""
        plan, index = self.plan, self.indexes[file]
        if not index.verified[row] or self.whole:  # first read in this process (CRC32C checked), or cheaper whole
            whole = self._scratch_of((0,) + self.shape)
            read = self._read_one(whole, file, row)
            new_boxes[:] = plan.write(targets, whole, box, draws)
            return read
        base = int(index.starts[row]) + _HEADER + int(index.data_at[row])
        scratch = self._scratch_of((2,) + self.scratch_shape())
        flat = memoryview(scratch.reshape(-1)).cast("B")
        (_, ph, pw), box_list, read = plan.patch, box.tolist(), 0
        fd = os.open(index.path, os.O_RDONLY)
        try:
            for j, sample in enumerate(draws):
                for at, count, into in self.runs(sample.start):
                    got = os.preadv(fd, [flat[into * 2: (into + count) * 2]], base + at * 2)
                    if got != count * 2:
                        raise ValueError(f"{index.path}: the record at byte {int(index.starts[row])} could not be "
                                         f"read whole ({got} of {count * 2} bytes of a patch): the file changed or "
                                         f"was cut short since it was indexed. {self.verify}")
                    read += got
                new_boxes[j] = plan.write_sample(targets[j], scratch[:, :ph, :pw], box_list, sample)
        finally:
            os.close(fd)
        return read


def _volume(builder: tfds.core.DatasetBuilder, names: Sequence[str]) -> str | None:
    from vidvol.readers import output

    volumes = [n for n in names if output.is_volume(builder.info.features[n])]
    return volumes[0] if len(volumes) == 1 else None


def plan_direct(builder: tfds.core.DatasetBuilder, source: records.SplitRecords, names: Sequence[str],
                *, buckets: bool = True) -> tuple[str, list[ShardIndex]] | None:
    """(volume feature, index of every shard file of the split) when direct reads apply, else None (logged).

    Integrity: the first time a record is read in a process its whole record is read and its length
    and CRC32C checked, as TensorFlow's reader does on every read (a mismatch names the file and the
    `verify` command); later epochs read only the volume bytes (the index is kept while the file's
    size, mtime and inode stay the same: `cached_index`). Shards of a dataset in a bucket (`readers.bucket`,
    `buckets`) are indexed by small ranged GETs (`bucket_index`, kept by SHA-256), and a batch's volumes
    fetched as concurrent ranged GETs of just their bytes, read from the shard cache, or (the shard-streaming
    order) copied from whole shards held in the `ShardWindow`. Anything else (other
    remote files, float32-stored
    volumes, videos, variable shapes, per-example parsing, a file whose records do not walk) reads
    whole records (`readers.records`) and parses them with TFDS's specs, which gives the same tensors.

    Args:
      builder: the prepared dataset's builder.
      source: the split's records (`records.SplitRecords`).
      names: the features the read needs.

    Returns:
      (volume feature name, one `ShardIndex` per shard file), or None where direct reads do not apply.
    """
    volume = _volume(builder, names)
    local = all(tfrecord.is_local(p) for p in source.paths)
    remote = buckets and all(bucket.shard_of_url(p) is not None for p in source.paths)
    if volume is None or not (local or remote):
        return None
    indexes = []
    for file in source.files:
        path = file.path
        try:
            index = cached_index(path, volume) if local else bucket_index(path, volume)
        except (IndexError_, OSError) as e:
            logger.info("%s: direct volume reads off (%s); reading whole records", path, e)
            return None
        if file.broken is not None or len(index.small) != len(file.starts):
            logger.info("%s: the records do not walk whole; reading whole records, which names the damage", path)
            return None
        if not index.int16.all():
            logger.info("%s: volumes stored as float32; reading whole records", path)
            return None
        expected = 2 * int(np.prod(builder.info.features[volume].shape))
        if np.any(index.data_len != expected):
            logger.info("%s: a stored volume is not %d bytes; reading whole records", path, expected)
            return None
        indexes.append(index)
    return volume, indexes


def verify_hint(builder: tfds.core.DatasetBuilder) -> str:
    """'Check every shard: <verify command>' for this dataset."""
    has_config = builder.builder_config is not None
    spec = artifacts.dataset_spec(builder.name, builder.builder_config.name if has_config else None)
    return f"Check every shard: {artifacts.verify_command(spec, artifacts.data_dir_of(builder.data_path, has_config))}"


def volume_batch(files: tf.Tensor, rows: tf.Tensor, reads: VolumeReads, dtype: str, batch_size: int | None,
                 epoch: tf.Tensor | None = None, key: tf.Tensor | None = None) -> tf.Tensor:
    """The batch's volumes as `dtype`: int16 as stored, float32 converted as read, or one TensorFlow cast of the int16
    batch (float16/bfloat16). `epoch` and `key` (the draws') place a read through a `ShardWindow` in the epoch's shard
    sequence (what it fetches ahead); the volumes are the indices' alone."""
    args = [files, rows] if epoch is None or reads.window is None else [files, rows, epoch, key]
    values = tf.numpy_function(reads, args, tf.as_dtype(reads.result), stateful=False,
                               name="vidvol_read_volumes")
    values.set_shape((batch_size,) + reads.shape)
    return values if values.dtype == dtype else tf.cast(values, dtype)


class DirectParser:
    """Parses a batch of example indices: the small records with TFDS's specs, the volume from its shard.

    Through TensorFlow's TFRecord parse a 128^3 MRI example is copied three times before it is a
    float32 volume (record string -> parsed feature string -> `decode_raw` tensor -> cast). Here the
    examples are read in `readers.order`'s order by their index in the split, as every `vidvol.load`
    read does (so batches equal the whole-record path's under a seed), and per batch the small
    records are parsed with TFDS's specs (`tf.io.parse_example`) and the volumes read in one Python
    call (`VolumeReads`, a `tf.numpy_function` without state: the same indices read the same bytes):
    `os.preadv` puts each volume's bytes straight into the int16 batch buffer, which becomes the
    tensor without a copy. float32 output: each volume is read a cache-sized chunk at a time into a
    scratch buffer and converted from there into the float32 batch buffer (the int16 bytes never
    reach main memory; NumPy's conversion and the read both let go of the GIL); float16 / bfloat16:
    one TensorFlow cast of the int16 batch. That is the work of the benchmark's volume limit
    (`os.pread` + `astype(float32)`). With volume augmentation (`augment_volume`), `PatchReads`
    reads only the rows of each random patch.
    """

    def __init__(self, builder: tfds.core.DatasetBuilder, source: records.SplitRecords, volume: str,
                 indexes: Sequence[ShardIndex], small_parser, dtype: str, batch_size: int | None,
                 augment: augment_volume.VolumePlan | None = None, cache_limit: int | None = None,
                 window: ShardWindow | None = None):
        self.volume, self.small_parser, self.dtype, self.batch_size = volume, small_parser, dtype, batch_size
        shape = builder.info.features[volume].shape
        self.augment = augment
        self.reads = (VolumeReads(indexes, shape, verify_hint(builder), dtype, cache_limit, window) if augment is None
                      else PatchReads(indexes, shape, verify_hint(builder), augment, dtype))
        self.small = [index.small[int(row)] for index, row in
                      zip((indexes[f] for f in source.file_of), source.row_of)]  # storage order
        self.file_of, self.row_of = source.file_of.astype(np.int64), source.row_of

    def parse(self, draw: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The features of the examples of a batch of draws (`index`: [B] storage indices of the split).

        With augmentation (`augment`), the volume's patches of each draw are read and transformed, the
        mask (read as its box) following them (`augment_volume.VolumePlan.finish`).
        """
        index = draw["index"]
        out = {}
        if self.small_parser is not None:
            out = dict(self.small_parser.parse(tf.gather(tf.constant(self.small, tf.string), index)))
        files, rows = tf.gather(tf.constant(self.file_of), index), tf.gather(tf.constant(self.row_of), index)
        plan = self.augment
        if plan is None:
            out[self.volume] = volume_batch(files, rows, self.reads, self.dtype, self.batch_size, draw["epoch"],
                                            draw["seed"])
            return out
        boxes = out[plan.mask] if plan.mask else plan.full_boxes(tf.shape(index)[0])
        values, boxes = tf.numpy_function(
            self.reads, [files, rows, boxes, draw["seed"], draw["epoch"], index],
            [tf.as_dtype(self.reads.work), tf.int64], stateful=False, name="vidvol_read_patches")
        out[self.volume], mask = plan.finish(values, boxes, self.dtype, self.batch_size)
        if plan.mask:
            out[plan.mask] = mask
        return out
