"""Whole bucket shards in a bounded memory window, fetched ahead in the shard-streaming order (`ShardOrder`).

Under `ReadSpec(order=ShardOrder(...))` an epoch reads each shard within one block, so `vidvol.load` from a
bucket fetches a shard's bytes whole (a few large concurrent ranges: `store.read_object`) the first time a
batch needs it, and the next shards of the epoch's sequence ahead of the reader, while they fit in the
window. Shards of blocks the reader has left are dropped first when room is needed; the current block's are
never dropped for a fetch ahead. No local disk is used. The window changes no example, only speed and memory.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vidvol.core import redact, store
from vidvol.core.tfrecord import FOOTER, HEADER, FileIndex
from vidvol.readers import shard_order

logger = logging.getLogger(__name__)

FETCHES = 4  # shards downloaded at once (each in a few concurrent ranges)


def file_bytes(index: FileIndex) -> int:
    """The bytes of one shard file's records (its size for a whole TFRecord file), from its record index."""
    if len(index.starts) == 0:
        return 0
    return int(index.starts[-1]) + HEADER + int(index.lengths[-1]) + FOOTER


# Of a window's bytes, what a read from a bucket holds besides the shards: the store client (its library, runtime
# and connections), the fetching threads' allocator arenas and the body chunks in flight. Shards get the rest.
STORE_RESERVE = 32 << 20


def block_bytes(files: Sequence[FileIndex], block: int) -> int:
    """The bytes of the `block` largest shards: the most one block's shards hold."""
    sizes = sorted((file_bytes(f) for f in files), reverse=True)
    return int(sum(sizes[:block]))


def least_window(files: Sequence[FileIndex], block: int) -> int:
    """The smallest window that works: one block's largest shards, and the store's reserve (`STORE_RESERVE`)."""
    return block_bytes(files, block) + STORE_RESERVE


def default_window(files: Sequence[FileIndex], block: int) -> int:
    """The window when `Tuning.stream_window` is None: two blocks (the one read and the next, fetched ahead), and
    the store's reserve."""
    return 2 * block_bytes(files, block) + STORE_RESERVE


def check_window(window: int, files: Sequence[FileIndex], block: int, where: str) -> None:
    """shard_order.OrderError when a `Tuning.stream_window` of `window` bytes is below `least_window` (naming it)."""
    shard_order.refuse_window(window, least_window(files, block), where, block, STORE_RESERVE)


class ShardWindow:
    """Whole shards held in memory, at most `limit` bytes; `sequence(epoch, key)` gives the order they are read in.

    A shard a batch is still copying from counts against the limit until that batch lets go of it (`holding`),
    even once dropped: a fetch that would pass the limit waits for the copies to end, so the window's bytes never
    exceed `limit` (the one exception: a batch whose own shards need more, which is read all the same).

    Args:
      files: the split's shard files (their `FileIndex`; paths are bucket URLs).
      sequence: (epoch, key) -> the shard files of that epoch in reading order.
      block: shards per block (the reader never drops its own block's shards for a fetch ahead).
      limit: bytes of whole shards held at once (>= the `block` largest shards: a window less `STORE_RESERVE`).
      fetch: url, size -> the object's bytes (default `store.read_object`).
      wrap: fetch ahead into the next epoch's shards (a repeated read); False stops at the epoch's end.
    """

    def __init__(self, files: Sequence[FileIndex], sequence: Callable[[int, int], np.ndarray], block: int, limit: int,
                 fetch: Callable[[str, int], bytes] | None = None, wrap: bool = True):
        self.files, self.sequence, self.block, self.limit = list(files), sequence, int(block), int(limit)
        self.wrap = wrap
        self.sizes = [file_bytes(f) for f in self.files]
        self._fetch = fetch or store.read_object
        self._held: dict[int, concurrent.futures.Future] = {}  # shard -> its bytes (done or on the way)
        self._rank: dict[int, tuple[int, int]] = {}  # shard -> (epoch, place) it was wanted for: drop lowest first
        self._pins: dict[int, int] = {}  # shard -> batches copying from it now
        self._dropped: dict[int, concurrent.futures.Future] = {}  # dropped while pinned: still counted
        self._lock = threading.Condition()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.fetched = 0  # shards downloaded (tests, logs)
        self.most = 0  # the most bytes counted at once (tests: never above `limit` but for one batch's own shards)
        self._released = False  # `release` was called: fetch nothing ahead, keep nothing after a read

    def __getstate__(self):
        raise TypeError("a ShardWindow holds downloads in flight; it is not copied")

    def release(self) -> None:
        """Lets go of every shard held (the pipeline was deleted: TensorFlow may keep its Python functions, and with
        them this window, alive). A read still in flight then gets its shards, and keeps none."""
        with self._lock:
            self._held.clear(), self._rank.clear(), self._dropped.clear()
            pool, self._pool, self._released = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _used(self) -> int:
        return sum(self.sizes[f] for f in self._held) + sum(self.sizes[f] for f in self._dropped)

    def _start(self, f: int, rank: tuple[int, int]) -> concurrent.futures.Future:
        if f in self._dropped:  # still in memory for a batch copying from it: held again, not fetched again
            self._held[f], self._rank[f] = self._dropped.pop(f), rank
            return self._held[f]
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(FETCHES, thread_name_prefix="vidvol-shard-window")
        self.fetched += 1
        logger.debug("shard window: fetching %s whole (%d bytes)", redact.url(self.files[f].path), self.sizes[f])
        future = self._pool.submit(self._fetch, self.files[f].path, self.sizes[f])
        self._held[f], self._rank[f] = future, rank
        self.most = max(self.most, self._used())
        return future

    def _drop(self, f: int) -> None:
        """Lets go of held shard `f`. It stays counted while a batch copies from it or while its download, already
        under way, has not ended (its bytes arrive all the same): the window's bytes never pass the limit."""
        future = self._held.pop(f)
        del self._rank[f]
        if self._pins.get(f) or not (future.done() or future.cancel()):
            self._dropped[f] = future
            future.add_done_callback(lambda done, f=f: self._landed(f, done))

    def _landed(self, f: int, future: concurrent.futures.Future) -> None:
        """A dropped shard's download ended: uncounted once no batch copies from it."""
        with self._lock:
            if self._dropped.get(f) is future and not self._pins.get(f):
                del self._dropped[f]
                self._lock.notify_all()

    def _drop_until(self, need: int, candidates: Sequence[int]) -> bool:
        """Drops `candidates`, in turn, until `need` more bytes fit; whether they do."""
        for f in candidates:
            if self._used() + need <= self.limit:
                break
            self._drop(f)
        return self._used() + need <= self.limit

    def _drop_before(self, need: int, before: tuple[int, int], keep: set[int]) -> bool:
        """Drops held shards ranked before `before` (lowest first) until `need` more bytes fit; whether they do."""
        return self._drop_until(need, [f for f in sorted(self._held, key=self._rank.__getitem__)
                                       if f not in keep and self._rank[f] < before])

    def _make_room(self, need: int, block_start: tuple[int, int], keep: set[int]) -> bool:
        """Room for `need` bytes a batch wants now: shards of blocks the reader left go first (lowest first), then
        shards fetched ahead, the furthest ahead first (fetched again when their turn comes); whether it fits."""
        return self._drop_before(need, block_start, keep) or self._drop_until(
            need, [f for f in sorted(self._held, key=self._rank.__getitem__, reverse=True) if f not in keep])

    @contextlib.contextmanager
    def holding(self, wanted: Sequence[int], epoch: int, key: int) -> Iterator[dict[int, Any]]:
        """The bytes of the shards `wanted` by one batch of epoch `epoch` under `key`, counted against the limit
        until the `with` block ends (copy from them inside it); fetches the next ones ahead."""
        order = self.sequence(int(epoch), int(key))
        place = np.empty(len(order), np.int64)
        place[order] = np.arange(len(order))
        wanted = sorted(set(int(f) for f in wanted), key=lambda f: place[f])
        with self._lock:
            first = int(place[wanted[0]])
            block_start = (int(epoch), first - first % self.block)
            for f in wanted:
                if f in self._held:
                    self._rank[f] = max(self._rank[f], (int(epoch), int(place[f])))
                    continue
                while not self._make_room(self.sizes[f], block_start, set(wanted)):
                    if not self._dropped:  # only this batch's own shards are in the way: read them all the same
                        break
                    self._lock.wait()  # for batches to finish copying from dropped shards, downloads to end
                self._start(f, (int(epoch), int(place[f])))
            futures = {f: self._held[f] for f in wanted}
            for f in wanted:
                self._pins[f] = self._pins.get(f, 0) + 1
            if not self._released:
                self._ahead(order, int(place[wanted[-1]]), int(epoch), key, block_start)
        try:
            yield {f: future.result() for f, future in futures.items()}
        finally:
            with self._lock:
                for f in wanted:
                    self._pins[f] -= 1
                    if not self._pins[f]:
                        del self._pins[f]
                        if self._released:
                            self._held.pop(f, None), self._rank.pop(f, None)
                        if self._dropped.pop(f, None) is not None:
                            self._lock.notify_all()

    def _ahead(self, order: np.ndarray, last: int, epoch: int, key: int, block_start: tuple[int, int]) -> None:
        """Starts fetching the shards after place `last` (into the next epoch's) while they fit beside what is held."""
        n, sequence = len(order), order
        for step in range(1, n + 1):
            at, e = last + step, epoch
            if at >= n:
                if not self.wrap:
                    return
                at, e = at - n, epoch + 1
                if sequence is order:
                    sequence = self.sequence(e, int(key))
            f = int(sequence[at])
            if f in self._held:
                continue
            if not self._drop_before(self.sizes[f], block_start, set()):
                return
            self._start(f, (e, at))


def window_for(files: Sequence[FileIndex], blocks: shard_order.ShardBlocks | None, training: bool, window: int | None,
               where: str, repeat: bool = True) -> ShardWindow:
    """The window of a streamed read: the epoch's shard sequence in training, storage order at evaluation.

    Raises:
      shard_order.OrderError: `window` cannot hold one block's shards (naming the smallest that works).
    """
    block = blocks.block if blocks is not None and training else 1
    if window is not None:
        check_window(int(window), files, block, where)
    total = int(window) if window is not None else default_window(files, block)
    storage = np.arange(len(files))
    sequence = blocks.shard_sequence if blocks is not None and training else (lambda epoch, key: storage)
    logger.info("%s: whole shards from the bucket, %d bytes window (%d for shards; blocks of %d shards)", where, total,
                total - STORE_RESERVE, block)
    return ShardWindow(files, sequence, block, total - STORE_RESERVE, wrap=repeat)
