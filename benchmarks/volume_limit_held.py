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
import functools
import glob
import json
import os
import time

import numpy as np

import baselines


def held_volume_rate(spans, *, min_seconds: float, ring: int) -> dict[str, float]:
    """`baselines.volume_rate`'s work (stored int16 bytes from the page cache -> float32 volume), on one core,
    but writing into a ring of `ring` float32 volumes kept alive instead of a new one freed at once."""
    fds = {p: os.open(p, os.O_RDONLY) for p in {s[0] for s in spans}}
    count = spans[0][2] // 2
    outputs = [np.zeros(count, np.float32) for _ in range(ring)]
    scratch = np.empty(count, np.int16)
    try:
        done, start, cpu_start = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - start < min_seconds:
            path, offset, _ = spans[done % len(spans)]
            os.preadv(fds[path], [memoryview(scratch).cast("B")], offset)
            np.copyto(outputs[done % ring], scratch, casting="unsafe")
            done += 1
        elapsed, cpu = time.perf_counter() - start, max(time.thread_time() - cpu_start, 1e-9)
        return {"frames_per_s": done / elapsed, "cpu_frames_per_s": done / cpu, "frames": done}
    finally:
        for fd in fds.values():
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a prepared mri_volumes config folder (…/mri_volumes/128/2.0.0)")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rings", default="0,1,2,4,8,16")
    args = parser.parse_args()
    spans = baselines.stored_volume_spans(sorted(glob.glob(os.path.join(args.folder, "*-train.tfrecord-*"))))
    cores = os.cpu_count() or 1
    rows = []
    for ring in (int(r) for r in args.rings.split(",")):
        rate_fn = functools.partial(held_volume_rate, ring=ring) if ring else baselines.volume_rate
        rate = baselines.on_every_core(rate_fn, spans, cores, min_seconds=args.seconds)["frames_per_s"] * cores
        rows.append({"volumes_alive_per_core": ring or "freed at once (the limit)", "volumes_per_s": round(rate, 1)})
    base = rows[0]["volumes_per_s"]
    for row in rows:
        row["of_limit"] = round(row["volumes_per_s"] / base, 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
