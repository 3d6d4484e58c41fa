"""Shuffle quality of the shard-streaming order (`ShardOrder(block)`) against a uniform shuffle of the whole split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
BLOCKS = (1, 2, 4, 8, 16)
EPOCHS = 8
FULL_SIZE_BATCH = 32


def score(labels, sizes, batch: int, block: int | None, seed: int = 0) -> dict[str, float]:
    """Same-class pair share, repeated-pair share and shards per batch of one order over `EPOCHS` epochs."""
    import numpy as np
    from vidvol import ShardOrder
    from vidvol.readers import order

    labels = np.asarray(labels)
    n = len(labels)
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    blocks = None if block is None else ShardOrder(block).over(sizes, "shuffle quality")
    layout = order.Layout(n, 1, 0, True, blocks)
    key = int(order.iteration_key(seed, 0))
    if n < batch:
        raise ValueError(f"{n} examples: no batch of {batch}")
    same, shards, repeated, previous = [], [], [], None
    upper = np.triu_indices(batch, 1)
    for epoch in range(EPOCHS):
        index = layout.examples_np(np.arange(n - n % batch), epoch, key)[0].reshape(-1, batch)
        pairs = set()
        for b in index:
            y = labels[b]
            same.append((np.sum(y[:, None] == y[None, :]) - batch) / (batch * (batch - 1)))
            shards.append(len(np.unique(shard_of[b])))
            s = np.sort(b)
            pairs.update(zip(s[upper[0]].tolist(), s[upper[1]].tolist()))
        if previous is not None:
            repeated.append(len(pairs & previous) / max(1, len(pairs)))
        previous = pairs
    return {"same_class": float(np.mean(same)), "repeated_pairs": float(np.mean(repeated)),
            "shards_per_batch": float(np.mean(shards))}


def layouts(data_dir: str | None, name: str | None):
    """(label, labels, shard sizes) of the layouts scored: the given build (if any), then hmdb51 split1 at full size."""
    import numpy as np

    out = []
    if data_dir:
        import vidvol
        from vidvol.readers.dataset import get_builder

        builder = get_builder(name, data_dir)
        labels = vidvol.load_labels(builder, "train")
        sizes = [int(s) for s in builder.info.splits["train"].shard_lengths]
        out.append((f"{builder.info.full_name} (this run's build)", labels, sizes))
    gen = np.random.default_rng(0)
    labels = np.repeat(np.arange(51), 70)
    shard = gen.integers(0, 32, len(labels))
    order = np.argsort(shard, kind="stable")
    out.append(("hmdb51 split1 at full size (3,570 clips, 51 classes, 32 shards)", labels[order],
                np.bincount(shard, minlength=32).tolist()))
    return out


def run(data_dir: str | None, name: str | None, batch_size: int) -> dict[str, Any]:
    """Scores of the uniform order and of `ShardOrder(block)` for each of `BLOCKS` (at most the shards), per layout
    (the build's at `batch_size`, the full-size one at `FULL_SIZE_BATCH`)."""
    results = []
    for label, labels, sizes in layouts(data_dir, name):
        batch = FULL_SIZE_BATCH if label.startswith("hmdb51 split1 at full size") else batch_size
        uniform = score(labels, sizes, batch, None)
        rows = [{"block": None, **uniform}]
        for block in BLOCKS:
            if block <= len(sizes):
                rows.append({"block": block, **score(labels, sizes, batch, block)})
        ratio = lambda a, b: a / b if b > 0 else None  # None: the uniform order never had one (tiny quick splits)
        for row in rows:
            row["same_class_ratio"] = ratio(row["same_class"], uniform["same_class"])
            row["repeated_pairs_ratio"] = ratio(row["repeated_pairs"], uniform["repeated_pairs"])
        results.append({"layout": label, "examples": len(labels), "shards": len(sizes), "batch": batch, "rows": rows})
    return {"epochs": EPOCHS, "layouts": results}


def measure(data_dir: str, name: str, batch: int) -> dict[str, Any]:
    """`run` in a child process (the bench's own process does not import TensorFlow)."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), data_dir, name, str(batch)], capture_output=True,
                          text=True, timeout=3600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode:
        raise RuntimeError(f"shuffle quality: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown(doc: dict[str, Any]) -> list[str]:
    """The shuffle-quality tables of RESULTS.md's bucket section."""
    from common import report

    out = [f"Shuffle quality of the streaming order (`common/shuffle_quality.py`, {doc['epochs']} epochs; ratios to the "
           "uniform shuffle, 1.00 = as uniform):", ""]
    for layout in doc["layouts"]:
        shown = lambda v, digits: "n/a" if v is None else f"{v:.{digits}f}"
        rows = [[("uniform (default order)" if r["block"] is None else f"ShardOrder(block={r['block']})"),
                 shown(r["same_class_ratio"], 2), shown(r["repeated_pairs_ratio"], 1), f"{r['shards_per_batch']:.1f}"]
                for r in layout["rows"]]
        out += [f"{layout['layout']}: {layout['examples']} examples, {layout['shards']} shards, batch "
                f"{layout['batch']}", ""]
        out += report.table(["order", "same-class pairs", "repeated pairs", "shards per batch"], rows)
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    args = sys.argv[1:] + ["-", "-", "32"][len(sys.argv) - 1:]
    print(json.dumps(run(None if args[0] == "-" else args[0], None if args[1] == "-" else args[1], int(args[2]))))
