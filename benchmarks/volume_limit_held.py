"""The MRI volume limit with its outputs kept alive: what a tight NumPy loop reaches when, like a read
pipeline, it cannot reuse the float32 volume it just wrote.

`make bench`'s volume limit (`baselines.volume_rate`) reads a volume's stored int16 bytes from the
page cache and makes a new float32 volume, freed before the next: the allocator hands the same
8 MiB back each time, so the loop writes into memory that is still in the CPU's cache. A loader
cannot: its batches stay alive in the prefetch buffer and with the consumer while the next ones
are written. This script runs the same loop on every core at once, once as the limit does and
then writing into a ring of K float32 volumes per core (K = volumes alive at once), over the same
stored volumes:

    python benchmarks/volume_limit_held.py DATA_DIR/mri_volumes/128/2.0.0 [--seconds 2]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import threading
import time

import numpy as np


def _spans(folder: str) -> list[tuple[int, int, int]]:
    from vidvol.readers import direct_volumes  # pylint: disable=g-import-not-at-top

    spans = []
    for path in sorted(glob.glob(os.path.join(folder, "*-train.tfrecord-*"))):
        index = direct_volumes.index_shard(path, "volume")
        fd = os.open(path, os.O_RDONLY)
        for start, at, length in zip(index.starts, index.data_at, index.data_len):
            spans.append((fd, int(start) + 12 + int(at), int(length)))
    if not spans:
        raise SystemExit(f"{folder}: no train TFRecord shards of mri_volumes")
    return spans


def _loop(spans, ring: int, seconds: float, out: list) -> None:
    count = spans[0][2] // 2
    outputs = [np.zeros(count, np.float32) for _ in range(ring)]
    scratch = np.empty(count, np.int16)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fd, offset, length = spans[n % len(spans)]
        if ring == 0:  # as baselines.volume_rate: a new float32 volume each time, freed before the next
            np.frombuffer(os.pread(fd, length, offset), "<i2").astype(np.float32)
        else:
            os.preadv(fd, [memoryview(scratch).cast("B")], offset)
            np.copyto(outputs[n % ring], scratch, casting="unsafe")
        n += 1
    out.append(n / (time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a prepared mri_volumes config folder (…/mri_volumes/128/2.0.0)")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rings", default="0,1,2,4,8,16")
    args = parser.parse_args()
    spans = _spans(args.folder)
    cores = os.cpu_count() or 1
    rows = []
    for ring in (int(r) for r in args.rings.split(",")):
        rates: list[float] = []
        threads = [threading.Thread(target=_loop, args=(spans, ring, args.seconds, rates)) for _ in range(cores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows.append({"volumes_alive_per_core": ring or "freed at once (the limit)", "volumes_per_s": round(sum(rates), 1)})
    base = rows[0]["volumes_per_s"]
    for row in rows:
        row["of_limit"] = round(row["volumes_per_s"] / base, 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
