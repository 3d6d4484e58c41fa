"""Peak Beam-worker memory vs `--max_shard_size_mb`: TFDS's stock writer against vidvol's streaming writer.

TFDS's stock Beam writer (`tensorflow_datasets/core/writer.py`) groups every serialized example
of a shard (and, between stages on the local runner, of a split) in memory before writing it;
vidvol's `StreamingBeamBuilder` writes one example at a time into its shard file. This script
writes full-resolution fire_hrr inputs once (`vidvol.samples.write_fire_hrr_frames`, 540x960 JPEG
frames), then builds `fire_hrr/<config>` with the real `tfds build` CLI in a subprocess: the
streaming writer and the stock writer (`benchmarks/stock_writer.py`, a drop-in for the `tfds` CLI)
at each `--max_shard_size_mb`, and the stock writer again with `--num_shards` forcing shards of
that size (TFDS 4.9.10 ignores max_shard_size when it counts shards), polling the RSS of the
driver and of each SDK worker process (psutil, see `benchmarks/fire_memory.py`, whose input writer
and process-tree monitor it reuses).

Run: python benchmarks/shard_memory.py --out DIR [--experiments 16] [--sizes 32 256]
Writes DIR/shard_memory.json and prints one table row per build.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import Any, Sequence

import fire_memory

logger = logging.getLogger(__name__)


def build_row(manual_dir: str, out: str, *, writer: str, size_mb: int, num_shards: int | None, config: str,
              workers: int, interval: float) -> dict[str, Any]:
    """One measured build: `writer` with `--max_shard_size_mb size_mb` (and `--num_shards` if given)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    extra = ["--max_shard_size_mb", str(size_mb)]
    if num_shards:
        extra += ["--num_shards", str(num_shards)]
    if workers:
        extra.append(f"--beam_pipeline_options=direct_num_workers={workers}")
    tag = f"{writer}_{size_mb}mb" + (f"_{num_shards}shards" if num_shards else "")
    logger.info("building %s", tag)
    result = fire_memory.build_once(manual_dir, os.path.join(out, f"data_{tag}"), config=config, interval=interval,
                                    extra=extra, env=env, writer=writer)
    return {"writer": writer, "max_shard_size_mb": size_mb, "num_shards_flag": num_shards, **result}


def run_matrix(
    manual_dir: str, out: str, *, config: str, sizes: Sequence[int], workers: int = 0, interval: float = 0.2,
) -> list[dict[str, Any]]:
    """Streaming and stock writer at each max_shard_size, plus the stock writer forced to that shard size.

    TFDS 4.9.10 computes its shard count in a classmethod that reads the class defaults (64 MiB min,
    1 GiB max), so `--max_shard_size_mb` does not change the stock writer's shards; the forced rows
    pass `--num_shards ceil(dataset / size)` so its shards really are about `size` MiB.
    """
    kw = {"config": config, "workers": workers, "interval": interval}
    rows = [build_row(manual_dir, out, writer="streaming", size_mb=size, num_shards=None, **kw) for size in sizes]
    total_mib = rows[0]["dataset_mib"]
    for size in sizes:
        rows.append(build_row(manual_dir, out, writer="tfds", size_mb=size, num_shards=None, **kw))
        rows.append(build_row(manual_dir, out, writer="tfds", size_mb=size, num_shards=max(1, math.ceil(total_mib / size)), **kw))
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The measurements as a Markdown table."""
    head = ("| writer | flags | shards | MiB per shard | peak worker RSS MiB | peak driver RSS MiB | wall s |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        flags = f"--max_shard_size_mb {r['max_shard_size_mb']}" + (
            f" --num_shards {r['num_shards_flag']}" if r["num_shards_flag"] else "")
        per_shard = r["dataset_mib"] / max(1, r["shards"])
        lines.append(f"| {r['writer']} | `{flags}` | {r['shards']} | {per_shard:.0f} | {r['worker_peak_mib']:.0f} "
                     f"| {r['driver_peak_mib']:.0f} | {r['wall_s']:.0f} |\n")
    return head + "".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="work folder (inputs, datasets, logs, shard_memory.json)")
    parser.add_argument("--experiments", type=int, default=16, help="fire experiments (one 161-frame example each)")
    parser.add_argument("--frames", type=int, default=161, help="frames per experiment")
    parser.add_argument("--height", type=int, default=540)
    parser.add_argument("--width", type=int, default=960)
    parser.add_argument("--quality", type=int, default=95, help="JPEG quality of the source frames")
    parser.add_argument("--config", default="full_161x540x960", help="fire_hrr config to build")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 256], help="--max_shard_size_mb values")
    parser.add_argument("--workers", type=int, default=0, help="Beam SDK workers (0: one per core)")
    parser.add_argument("--interval", type=float, default=0.2, help="RSS polling period in seconds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    out = os.path.abspath(args.out)
    labels = fire_memory.write_inputs(os.path.join(out, "inputs"), experiments=args.experiments, frames=args.frames,
                                      height=args.height, width=args.width, quality=args.quality)
    manual_dir = os.path.join(out, "manual")
    fire_memory.subset_labels(labels, manual_dir, args.experiments)
    rows = run_matrix(manual_dir, out, config=args.config, sizes=args.sizes, workers=args.workers,
                      interval=args.interval)
    examples = {r["examples"] for r in rows}
    if len(examples) != 1:
        raise RuntimeError(f"builds disagree on the number of examples: {sorted(examples)}")
    print(table(rows), end="")
    with open(os.path.join(out, "shard_memory.json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
