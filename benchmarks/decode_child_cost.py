"""Study: what keeping a decoder crash out of the build costs (docs/building.md, "A decoder that crashes").

A native decoder that segfaults on a damaged file kills the process it runs in. Two ways to keep it
from killing the Beam worker, timed on the hmdb51 example stage (`clips.clip_example`, the default
`split1_20x64x64`: 20 frames at 64x64, JPEG) over footage-like HMDB51 clips (`inputs.hmdb51_plan`,
320x240 XVID at 30 fps):

- `inline`: the clip decoded in this process (no protection: the yardstick);
- `child`: `isolation.InChild`, what vidvol does: the clip decoded in a child process that stays for
  the following clips (a new one after a crash), the example sent back through a pipe;
- `probe`: the same kept child opens the clip and decodes its first frame, then the clip is decoded
  here (the other option: probe inputs in a child first; here every input, as nothing says in
  advance which file will crash a decoder; it guards only what the probe reads).

The process imports vidvol (TensorFlow, Beam, TFDS) first, as a Beam worker has. Each round takes
every clip once in each mode, the modes in a rotating order from clip to clip, so a drift of the
machine's speed hits all three alike; a mode's time is its total over the round's clips, its
figure the median over the rounds; overhead = mode / inline - 1, per round, median. Wall time, and
CPU time (this process plus the child, which reports its own): with every core busy, as in a
build, CPU per clip is what sets the build's speed, and on a shared machine it moves less than wall
time. `child_start_s`: wall time of a new child's first clip minus an inline clip's (its start-up).

    python benchmarks/decode_child_cost.py --out /tmp/decode_cost [--clips 40 --rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time

import inputs
import vidvol  # noqa: F401  (a worker's imports: TensorFlow, TFDS, Beam)
from vidvol.builders import example_io
from vidvol.builders import isolation
from vidvol.builders.transforms import clips
from vidvol.builders.transforms import video

SPEC = clips.ClipSpec(num_frames=20, height=64, width=64)


def _example(path: str):
    return clips.ClipSource(path=path, key=os.path.basename(path), features={})


def _timed_clip(source: clips.ClipSource):
    """`clip_example`'s items, then the CPU seconds the process spent making and sending them (run in the child)."""
    start = time.process_time()
    yield from clips.clip_example(source, SPEC)
    yield "__cpu__", {"cpu": time.process_time() - start}


def _timed_probe(source: clips.ClipSource):
    """Opens the clip and decodes its first frame (run in the child); then the CPU seconds it took."""
    start = time.process_time()
    video.decode_frames(source.path, [0], stop_at=1)
    yield "__cpu__", {"cpu": time.process_time() - start}


def _run_inline(path: str) -> float:
    for _ in clips.clip_example(_example(path), SPEC):
        pass
    return 0.0


_CHILD = isolation.InChild(_timed_clip, setup=[video.single_threaded_opencv])
_PROBE = isolation.InChild(_timed_probe, setup=[video.single_threaded_opencv])


def _in_child(wrapped: isolation.InChild, path: str) -> float:
    child_cpu = 0.0
    for item in example_io.run_example_fn(wrapped, (path, _example(path)), "train"):
        if isinstance(item, example_io.Skip):
            raise RuntimeError(f"{path}: {item.reason}")
        if item[0] == "__cpu__":
            child_cpu = item[1]["cpu"]
    return child_cpu


def _run_child(path: str) -> float:
    return _in_child(_CHILD, path)


def _run_probe(path: str) -> float:
    child_cpu = _in_child(_PROBE, path)
    _run_inline(path)
    return child_cpu


def child_start(path: str, times: int = 3) -> float:
    """Median over `times` new children of (first clip in a new child - that clip inline), seconds."""
    gaps = []
    for _ in range(times):
        isolation._end_all()  # pylint: disable=protected-access  (the next clip starts a new child)
        start = time.perf_counter()
        _run_child(path)
        first = time.perf_counter() - start
        start = time.perf_counter()
        _run_inline(path)
        gaps.append(first - (time.perf_counter() - start))
    return statistics.median(gaps)


MODES = {"inline": _run_inline, "child": _run_child, "probe": _run_probe}


def _median_overhead(values: list[float], base: list[float]) -> float:
    return statistics.median(v / b - 1 for v, b in zip(values, base))


def measure(paths: list[str], rounds: int) -> dict:
    """Per round, each mode's wall and CPU seconds (this process + its decoding children) over all clips."""
    names = list(MODES)
    for path in paths[:3]:  # warm up every mode (the child's start, the decoders' first use)
        for name in names:
            MODES[name](path)
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        used = dict.fromkeys(names, 0.0)
        for i, path in enumerate(paths):
            order = names[(i + r) % 3:] + names[:(i + r) % 3]
            for name in order:
                start, start_cpu = time.perf_counter(), time.process_time()
                children = MODES[name](path)
                spent[name] += time.perf_counter() - start
                used[name] += time.process_time() - start_cpu + children
        for name in names:
            wall[name].append(spent[name])
            cpu[name].append(used[name])
        print(f"round {r + 1}: " + ", ".join(f"{n} {spent[n]:.2f} s ({used[n]:.2f} s CPU)" for n in names), flush=True)
    others = [name for name in names if name != "inline"]
    return {
        "ms_per_clip": {name: 1000 * statistics.median(t) / len(paths) for name, t in wall.items()},
        "cpu_ms_per_clip": {name: 1000 * statistics.median(t) / len(paths) for name, t in cpu.items()},
        "overhead_vs_inline": {name: _median_overhead(wall[name], wall["inline"]) for name in others},
        "cpu_overhead_vs_inline": {name: _median_overhead(cpu[name], cpu["inline"]) for name in others},
        "rounds_wall_s": wall,
        "rounds_cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--clips", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    video.single_threaded_opencv()  # as in a Beam worker
    root = os.path.join(args.out, "inputs_hmdb51")
    classes = max(1, (args.clips + 3) // 4)
    inputs.write_inputs([inputs.hmdb51_plan(root, num_classes=classes, videos_per_class=4, num_frames=(60, 300))])
    paths = [p for p, _ in inputs.hmdb51_split_videos(root, 1, "train") + inputs.hmdb51_split_videos(root, 1, "test")]
    paths = sorted(paths)[: args.clips]
    result = {"clips": len(paths), "inputs": inputs.describe_hmdb51(root), "spec": "20 frames, 64x64, JPEG q90",
              "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"), "load_average": os.getloadavg(),
              **measure(paths, args.rounds), "child_start_s": child_start(paths[0])}
    with open(os.path.join(args.out, "decode_child_cost.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("rounds")}, indent=1))


if __name__ == "__main__":
    main()
