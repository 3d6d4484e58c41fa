"""What float32 output costs on top of the decode limit: the decode limit's loop, then the same loop also
writing each frame as float32 into a batch-sized ring of buffers (as a loader's batches stay alive).

`make bench`'s decode limit decodes frames (`cv2.imdecode`, every core at once) and drops them. A
loader that hands out float32 batches also writes 4 bytes per value into memory that is not in the
cache (its batches stay alive in the prefetch buffer and with the consumer). This runs, on every
core at once over the frames stored in a prepared dataset's shards:

- decode: the limit's loop (`cv2.imdecode`);
- decode + float32: each decoded frame also converted (`x * (1/255)`) into the next slot of a ring
  of float32 frames as large as `--batch_frames` frames (one batch);

and prints both rates and their ratio: the share of the decode limit a float32 loader could reach if
everything else (reading, parsing, batching, the pipeline) cost nothing.

    python benchmarks/float_ceiling.py SHARD_FOLDER --batch_frames 161   # fire_hrr full_161x540x960
    python benchmarks/float_ceiling.py SHARD_FOLDER --batch_frames 640   # hmdb51 20x64x64, batch 32
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import threading
import time

import cv2
import numpy as np

import baselines


def _loop(buffers, ring, seconds: float, rates: list) -> None:
    scale = np.float32(1.0 / 255.0)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        image = cv2.imdecode(buffers[n % len(buffers)], cv2.IMREAD_COLOR)
        if ring is not None:  # cast, then scale in place while the frame is in cache (faster than one mixed-type op)
            slot = ring[n % len(ring)]
            np.copyto(slot, image, casting="unsafe")
            np.multiply(slot, scale, out=slot)
        n += 1
    rates.append(n / (time.perf_counter() - start))


def _on_every_core(buffers, ring_frames: int | None, seconds: float) -> float:
    cores = os.cpu_count() or 1
    shape = cv2.imdecode(buffers[0], cv2.IMREAD_COLOR).shape
    rates: list = []
    rings = [None if ring_frames is None else np.ones((ring_frames,) + shape, np.float32) for _ in range(cores)]
    threads = [threading.Thread(target=_loop, args=(buffers, rings[i], seconds, rates)) for i in range(cores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a prepared config folder holding *-train.tfrecord-* shards")
    parser.add_argument("--batch_frames", type=int, required=True, help="frames in one batch (the ring's size)")
    parser.add_argument("--max_frames", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    files = sorted(glob.glob(os.path.join(args.folder, "*-train.tfrecord-*")))
    buffers = [np.frombuffer(b, np.uint8) for b in baselines.stored_jpeg_frames(files, max_frames=args.max_frames)]
    ratios = []
    for _ in range(args.rounds):  # alternating, so that the machine's drift hits both alike
        decode = _on_every_core(buffers, None, args.seconds)
        with_float = _on_every_core(buffers, args.batch_frames, args.seconds)
        ratios.append(with_float / decode)
        print(json.dumps({"decode_frames_per_s": round(decode), "decode_and_float32_frames_per_s": round(with_float),
                          "ratio": round(with_float / decode, 3)}))
    print(json.dumps({"median_ratio": round(float(np.median(ratios)), 3)}))


if __name__ == "__main__":
    main()
