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
import functools
import glob
import json
import os
import time

import cv2
import numpy as np

import baselines


def decode_float_rate(buffers, *, min_seconds: float, ring_frames: int) -> dict[str, float]:
    """`baselines.decode_rate`'s loop on one core, each decoded frame also converted (`x * (1/255)`) into the next
    slot of a ring of `ring_frames` float32 frames kept alive."""
    ring = np.ones((ring_frames,) + cv2.imdecode(buffers[0], cv2.IMREAD_COLOR).shape, np.float32)
    scale = np.float32(1.0 / 255.0)
    done, start, cpu_start = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < min_seconds:
        image = cv2.imdecode(buffers[done % len(buffers)], cv2.IMREAD_COLOR)
        slot = ring[done % ring_frames]  # cast, then scale in place while the frame is in cache (faster than one mixed-type op)
        np.copyto(slot, image, casting="unsafe")
        np.multiply(slot, scale, out=slot)
        done += 1
    elapsed, cpu = time.perf_counter() - start, max(time.thread_time() - cpu_start, 1e-9)
    return {"frames_per_s": done / elapsed, "cpu_frames_per_s": done / cpu, "frames": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a prepared config folder holding *-train.tfrecord-* shards")
    parser.add_argument("--batch_frames", type=int, required=True, help="frames in one batch (the ring's size)")
    parser.add_argument("--max_frames", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.folder, "*-train.tfrecord-*")))
    encoded = baselines.stored_jpeg_frames(files, max_frames=args.max_frames)
    buffers = [np.frombuffer(b, np.uint8) for b in encoded]
    with_float_fn = functools.partial(decode_float_rate, ring_frames=args.batch_frames)
    cores = os.cpu_count() or 1
    ratios = []
    for _ in range(args.rounds):  # alternating, so that the machine's drift hits both alike
        decode = baselines.on_every_core(baselines.decode_rate, encoded, cores, min_seconds=args.seconds)["frames_per_s"]
        with_float = baselines.on_every_core(with_float_fn, buffers, cores, min_seconds=args.seconds)["frames_per_s"]
        ratios.append(with_float / decode)
        print(json.dumps({"decode_frames_per_s": round(decode * cores),
                          "decode_and_float32_frames_per_s": round(with_float * cores),
                          "ratio": round(with_float / decode, 3)}))
    print(json.dumps({"median_ratio": round(float(np.median(ratios)), 3)}))


if __name__ == "__main__":
    main()
