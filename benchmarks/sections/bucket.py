"""Datasets in a bucket: read rates against local disk and the store's own GET limit, build time, peak RSS."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

if __name__ == "__main__":  # run as a script: import from benchmarks/ (common, sections, peers), not this folder
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from common import inputs, jobs, section, shuffle_quality

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
BUCKET = "vidvol-bench"
TARGET = 0.80  # the per-example order's ranged GETs (one per example)
STREAM_TARGET = 0.90  # the shard-streaming order (whole shards)
STREAM_LOCAL, STREAM_BUCKET = "local, streaming order", "bucket, streaming order"
DEFAULT_BLOCK = 4  # vidvol.readers.shard_order.DEFAULT_BLOCK (benchmarks/ imports the package only in its children)

METHOD = (
    "Builds: `python -m vidvol build NAME/CONFIG --num_shards N` into a local data_dir and into "
    "`s3://vidvol-bench/tfds` (SeaweedFS `weed mini` on 127.0.0.1, credentials in AWS_*), each timed from the "
    "command's start to its exit.",
    "Reads: one process per read. Its first pass, `vidvol.load(NAME, 'train', B, seed=0, repeat=False)` over the "
    "split (metadata copy, record index by ranged GETs, or the cache filling), is timed apart. Then three "
    "repeating pipelines (seeds 0-2), one at a time (each deleted before the next), each after 2 batches of warm-up, are timed for at least the section's read "
    "seconds; the rate is their median (examples/s, and the records' stored MB/s); peak RSS is the process's VmHWM.",
    "GET limit: the same records' byte ranges fetched with `store.read_many` (obstore's client, as the reader's), no decoding: each shard's at "
    "once, a batch's worth across the shards at once, all at once, whole shards as the streaming order "
    "fetches them (`store.read_object`, 4 at once) (each the median of passes 2-4), and as the reader fetches them, "
    "16 threads each fetching a batch's ranges at once for 8 s; the fastest (MB/s).",
    "The server runs on the same cores as the reader (loopback): what it spends serving a GET is taken from "
    "decoding, so on 2 cores a byte-bound read is also CPU-bound on the server's side.",
    "Streaming order: the same reads with `spec=ReadSpec(order=ShardOrder(block))` (block: the section's, at most "
    "the shards), from local disk and from the bucket with no cache (each shard one GET, its body streamed into one "
    "buffer, held in the default window: two blocks' largest shards and the 32 MiB the window keeps for the store "
    "client, `Tuning.stream_window=None`). The local and the bucket read are made in turn, three times each; each "
    "figure (rate, peak RSS) is the median of the three. MRI is built "
    "into more shards than hmdb51 so that its train split is several windows: every epoch then fetches nearly "
    "every shard again, as a real collection's does.",
    "1 core: hmdb51 read again with the reader pinned to one core and every thread of the server to the other (a "
    "store off the reader's cores, as a real bucket is), beside the local read on that same one core.",
)

_READ = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[5])
import tensorflow as tf, vidvol
from common import measure
name, data_dir, batch, limit, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[6])
block = int(sys.argv[7])  # 0: the per-example order; else ShardOrder(block)
tuning = vidvol.Tuning(cache_limit=limit) if limit != "-" else None
spec = vidvol.ReadSpec(order=vidvol.ShardOrder(block)) if block else None
count = lambda b: int(tf.nest.flatten(b)[-1].shape[0])
start = time.perf_counter()
examples = sum(count(b) for b in vidvol.load(name, "train", batch, data_dir=data_dir, seed=0, repeat=False, tuning=tuning,
                                           spec=spec))
first = time.perf_counter() - start
rates = []
for run in range(3):  # steady state: a repeating pipeline, 2 batches of warm-up, then >= `seconds` of batches
    it = iter(vidvol.load(name, "train", batch, data_dir=data_dir, seed=run, repeat=True, tuning=tuning, spec=spec))
    for _ in range(2):
        next(it)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        n += count(next(it))
    rates.append(n / (time.perf_counter() - start))
    del it  # one pipeline at a time, as a training loop holds them
    gc.collect()
rate = sorted(rates)[1]
window = 0
if block:  # the window a bucket read holds (Tuning.stream_window None: two blocks)
    from vidvol.readers import records
    from vidvol.readers.tfdata import shard_window
    from vidvol.readers.dataset import get_builder
    files = records.open_split(get_builder(name, data_dir), "train").files
    window = shard_window.default_window(files, block)
print(json.dumps({"examples": examples, "first_s": first, "second_s": examples / rate, "rates": rates,
                  "peak_rss_mib": measure.peak_rss_mib(), "window_mib": window / 2**20}))
"""


_GETS = r"""
import json, sys, time
from vidvol.readers import records
from vidvol.readers.dataset import get_builder
from vidvol.core import store
builder, batch = get_builder(sys.argv[1], sys.argv[2]), int(sys.argv[3])
split = records.open_split(builder, "train")
spans = [(f.path, int(s), int(s) + 16 + int(n)) for f in split.files for s, n in zip(f.starts, f.lengths)]
# The same ranges fetched concurrently in groups: each shard's records at once, `batch` at a time across the
# shards (as a batch is read), and all at once; the limit is the fastest.
groups = {"per shard": [[s for s in spans if s[0] == f.path] for f in split.files],
          f"{batch} at once": [spans[i:i + batch] for i in range(0, len(spans), batch)], "all at once": [spans]}
rates, total = {}, 0
# As the reader fetches: 16 threads, each fetching a batch's ranges at once, for 8 s.
import threading
lock, done, stop = threading.Lock(), [0], time.perf_counter() + 8.0
batches = groups[f"{batch} at once"]
def worker(k):
    i = k
    while time.perf_counter() < stop:
        n = sum(len(b) for b in store.read_many(batches[i % len(batches)]))
        i += 16
        with lock:
            done[0] += n
start = time.perf_counter()
threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
rates[f"16 threads x {batch}"] = round(done[0] / 1e6 / (time.perf_counter() - start), 1)
for label, parts in groups.items():
    times = []
    for _ in range(4):
        start = time.perf_counter()
        total = sum(len(b) for part in parts for b in store.read_many(part))
        times.append(time.perf_counter() - start)
    rates[label] = round(total / 1e6 / sorted(times[1:])[1], 1)
# Whole shards as the streaming order fetches them (`store.read_object`, FETCHES shards at once).
import concurrent.futures
from vidvol.readers.tfdata import shard_window
sizes = [shard_window.file_bytes(f) for f in split.files]
with concurrent.futures.ThreadPoolExecutor(shard_window.FETCHES) as pool:
    times = []
    for _ in range(4):
        start = time.perf_counter()
        whole = sum(len(memoryview(b)) for b in pool.map(store.read_object, [f.path for f in split.files], sizes))
        times.append(time.perf_counter() - start)
rates[f"whole shards, {shard_window.FETCHES} at once"] = round(whole / 1e6 / sorted(times[1:])[1], 1)
print(json.dumps({"bytes": total, "rates": rates, "second_s": total / 1e6 / max(rates.values())}))
"""

# The store client's own resident cost in a reading process: RSS after TensorFlow and vidvol are imported, then
# after the client lists the dataset and reads one range of a shard (obstore's library and runtime; no decoding).
_CLIENT = r"""
import json, sys
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
import tensorflow, vidvol
from vidvol.core import store
before = rss()
shard = next(u for u in store.listdir(sys.argv[1]) if ".tfrecord-" in u)
store.read_range(shard, 0, min(65536, store.size(shard)))  # the client at work, holding no shard
print(json.dumps({"client_mib": rss() - before, "s3fs": "s3fs" in sys.modules}))
"""

@dataclasses.dataclass(frozen=True, kw_only=True)
class BucketSettings(section.Settings):
    hmdb51: dict[str, Any]
    mri: dict[str, Any]
    hmdb51_config: str = "split1_20x64x64"
    mri_config: str = "128"
    num_shards: int = 8
    mri_shards: int = 0  # MRI's own shard count (0: num_shards): its split several times the streaming window
    batch: int = 8
    block: int = DEFAULT_BLOCK  # ShardOrder's block of the streamed reads (at most num_shards)
    read_seconds: float = 8.0  # each timed read: at least this long (3 of them, the median)
    stream_pairs: int = 3  # the streamed reads (local, bucket) made this many times in turn; figures: the medians


def _timed_build(name: str, manual: str, data_dir: str, num_shards: int, env: dict[str, str], log: str) -> float:
    start = time.monotonic()
    status, _, _ = jobs.run_command([sys.executable, "-m", "vidvol", "build", name, "--manual_dir", manual, "--data_dir",
                                     data_dir, "--num_shards", str(num_shards)], log, 3600, env=env)
    if status:
        raise RuntimeError(f"building {name} into {data_dir} failed ({status}); see {log}")
    return time.monotonic() - start


def _child(script: str, args: list[str], env: dict[str, str], cpus: set[int] | None = None) -> dict[str, Any]:
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=3600,
                          preexec_fn=pin)
    if proc.returncode:
        raise RuntimeError(f"{args}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` onto `cpus` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def one_dataset(label: str, name: str, manual: str, work: str, settings: BucketSettings, server) -> dict[str, Any]:
    """Local and bucket builds of one config, then its reads: local, bucket by range, bucket through the cache."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **server.env())
    local = os.path.join(work, label, "local")
    shutil.rmtree(os.path.join(work, label), ignore_errors=True)
    os.makedirs(os.path.join(work, label))
    remote = f"s3://{BUCKET}/{label}"
    out: dict[str, Any] = {"label": label, "dataset": name}
    shards = settings.mri_shards if label == "mri" and settings.mri_shards else settings.num_shards
    out["build_local_s"] = round(_timed_build(name, manual, local, shards, env, local + ".log"), 1)
    env["VIDVOL_STAGING_DIR"] = os.path.join(work, label, "staging")
    out["build_bucket_s"] = round(_timed_build(name, manual, remote, shards, env,
                                               os.path.join(work, label, "bucket.log")), 1)
    reads = {}
    block = min(settings.block, shards)

    def read(mode: str, data_dir: str, limit: str, cpus: set[int] | None = None, order: int = 0) -> None:
        env["VIDVOL_CACHE_DIR"] = os.path.join(work, label, f"cache-{mode}".replace(", ", "-").replace(" ", "-"))
        r = _child(_READ, [name, data_dir, str(settings.batch), limit, HERE, str(settings.read_seconds), str(order)],
                   env, cpus)
        reads[mode] = {**r, "examples_per_s": round(r["examples"] / r["second_s"], 2)}

    for mode, data_dir, limit in (("local", local, "-"), ("bucket", remote, "-"), ("bucket+cache", remote, "100GB")):
        read(mode, data_dir, limit)
    # Then the shard-streaming order (ReadSpec(order=ShardOrder(block))): the same order from local disk and from the
    # bucket, each shard fetched whole into the default window, no cache.
    pairs = []  # the streamed reads, local and bucket in turn, `stream_pairs` times: each figure their median
    for _ in range(settings.stream_pairs):
        read(STREAM_LOCAL, local, "-", order=block)
        read(STREAM_BUCKET, remote, "-", order=block)
        pairs.append((reads.pop(STREAM_LOCAL), reads.pop(STREAM_BUCKET)))
    for mode, runs in ((STREAM_LOCAL, [p[0] for p in pairs]), (STREAM_BUCKET, [p[1] for p in pairs])):
        mid = {key: sorted(r[key] for r in runs)[len(runs) // 2] for key in ("second_s", "examples_per_s", "peak_rss_mib")}
        reads[mode] = {**runs[0], **mid, "runs": [{k: r[k] for k in ("examples_per_s", "peak_rss_mib")} for r in runs]}
    out["block"] = block
    if label == "hmdb51":
        out["shuffle"] = shuffle_quality.measure(local, name, settings.batch)
    cores = sorted(os.sched_getaffinity(0))
    if label == "hmdb51" and len(cores) >= 2:
        # A store off the reader's cores, as a real bucket is: the reader on one core, the server on another; the
        # local read on that same one core beside it.
        reader, other = {cores[0]}, {cores[1]}
        try:
            _pin(server.pid, other)
            read("local, 1 core", local, "-", reader)
            read("bucket, 1 core", remote, "-", reader)
        finally:
            _pin(server.pid, set(cores))
    version = os.path.relpath(glob.glob(os.path.join(local, name.split("/")[0], "*", "*", "dataset_info.json"))[0], local)
    out["client"] = _child(_CLIENT, [f"{remote}/{os.path.dirname(version)}"], env)
    env["VIDVOL_CACHE_DIR"] = os.path.join(work, label, "cache-gets")
    gets = _child(_GETS, [name, remote, str(settings.batch)], env)
    mb = gets["bytes"] / 1e6
    for r in reads.values():
        r["mb_per_s"] = round(mb / r["second_s"], 1)
    out.update(reads=reads, record_mb=round(mb, 1), get_limit_mb_per_s=round(mb / gets["second_s"], 1),
               get_rates_mb_per_s=gets["rates"])
    print(f"[bucket] {label}: local {reads['local']['examples_per_s']} ex/s, bucket {reads['bucket']['examples_per_s']} "
          f"ex/s ({reads['bucket']['mb_per_s']} MB/s; GET limit {out['get_limit_mb_per_s']} MB/s), streaming order "
          f"{reads[STREAM_LOCAL]['examples_per_s']} ex/s local, {reads[STREAM_BUCKET]['examples_per_s']} ex/s bucket "
          f"({reads[STREAM_BUCKET]['mb_per_s']} MB/s), cached "
          f"{reads['bucket+cache']['examples_per_s']} ex/s; builds {out['build_local_s']} s local, "
          f"{out['build_bucket_s']} s bucket", flush=True)
    return out


class BucketReads(section.Section):
    key = "bucket"
    label = "bucket"
    summary = "bucket section (sections/bucket.py: reads from SeaweedFS vs local disk and the GET limit, build time, RSS)"
    FULL = BucketSettings(mode="full", runs=1, hmdb51=dict(num_classes=4, videos_per_class=20, num_frames=(60, 200),
                          height=240, width=320), mri=dict(num=160, shape=(160, 192, 144)), mri_shards=32)
    QUICK = BucketSettings(mode="quick", runs=1, hmdb51=dict(num_classes=2, videos_per_class=4, num_frames=(20, 40),
                           height=120, width=160), mri=dict(num=6, shape=(40, 48, 36)), mri_config="small_32",
                           num_shards=2, batch=2, read_seconds=1.0, stream_pairs=1)
    method = METHOD

    def measure(self, work: str, settings: BucketSettings, *, hmdb51_manual: str, mri_manual: str) -> dict[str, Any]:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
        from services import SeaweedS3

        os.makedirs(work, exist_ok=True)
        with SeaweedS3(buckets=(BUCKET,)) as server:
            builds = [one_dataset("hmdb51", f"hmdb51/{settings.hmdb51_config}", hmdb51_manual, work, settings, server),
                      one_dataset("mri", f"mri_volumes/{settings.mri_config}", mri_manual, work, settings, server)]
        return {"mode": settings.mode, "runs": settings.runs, "cores": len(os.sched_getaffinity(0)), "datasets": builds,
                "load_average": round(os.getloadavg()[1], 2)}  # the machine's load over the last 5 minutes

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        rows = []
        for d in doc["datasets"]:
            bucket, local = d["reads"]["bucket"], d["reads"]["local"]
            streamed, streamed_local = d["reads"].get(STREAM_BUCKET), d["reads"].get(STREAM_LOCAL)
            if d["label"] == "hmdb51":
                rows.append(section.target("hmdb51 from the bucket (ranged GETs) vs local disk, examples/s",
                                           bucket["examples_per_s"] / local["examples_per_s"], TARGET, unit="%"))
                pinned = d["reads"].get("bucket, 1 core"), d["reads"].get("local, 1 core")
                if all(pinned):
                    rows.append(section.target(
                        "hmdb51 from the bucket (ranged GETs) vs local disk, the reader on 1 core, the server on another",
                        pinned[0]["examples_per_s"] / pinned[1]["examples_per_s"], TARGET, unit="%"))
                if streamed:
                    rows.append(section.target(
                        f"hmdb51 streaming order (blocks of {d['block']}): from the bucket vs local disk, no cache",
                        streamed["examples_per_s"] / streamed_local["examples_per_s"], STREAM_TARGET, unit="%"))
            else:
                rows.append(section.target("MRI from the bucket (ranged GETs) vs the store's GET limit, MB/s",
                                           bucket["mb_per_s"] / d["get_limit_mb_per_s"], TARGET, unit="%"))
                if streamed:
                    rows.append(section.target(
                        f"MRI streaming order (blocks of {d['block']}) from the bucket vs the store's GET limit, MB/s",
                        streamed["mb_per_s"] / d["get_limit_mb_per_s"], STREAM_TARGET, unit="%"))
            if streamed:
                rows.append(section.target(
                    f"{d['label']} streaming order: peak RSS from the bucket vs the local read's + the window "
                    f"({streamed['window_mib']:.1f} MiB)", streamed["peak_rss_mib"],
                    streamed_local["peak_rss_mib"] + streamed["window_mib"], op="<=", unit="MiB"))
        return rows

    def markdown(self, doc: dict[str, Any]) -> list[str]:
        from common import report

        out = ["## Datasets in a bucket", "",
               f"`benchmarks/sections/bucket.py` ({doc['mode']} mode, {doc['duration_s'] / 60:.1f} min, {doc['cores']} "
               "cores), SeaweedFS on loopback"
               + (f"; load average {doc['load_average']:.1f} at the end (a shared machine: rates understated and "
                  "noisy, the ratios of reads timed side by side steadier)"
                  # (the section itself keeps every core busy: more than that is another load)
                  if doc.get("load_average", 0) > doc["cores"] + 0.5 else "") + ".", ""]
        out += report.targets_table(doc["targets"]) + report.misses(doc["targets"])
        rows = []
        for d in doc["datasets"]:
            for mode, r in d["reads"].items():
                rows.append([d["dataset"], mode, f"{r['examples_per_s']:.1f}", f"{r['mb_per_s']:.1f}",
                             f"{r['first_s']:.1f} s", f"{r['peak_rss_mib']:.0f} MiB"])
            rows.append([d["dataset"], "GET limit (no decode)", "", f"{d['get_limit_mb_per_s']:.1f}", "", ""])
        out += report.table(["dataset", "read", "examples/s", "MB/s", "first pass", "peak RSS"], rows)
        clients = [f"{d['dataset']} {d['client']['client_mib']:.0f} MiB" for d in doc["datasets"] if "client" in d]
        if clients:
            out += ["The store client's own resident memory in a reading process (listing the version, fetching one "
                    "shard whole, after TensorFlow and vidvol are imported; s3fs and botocore not loaded): "
                    + ", ".join(clients) + ". No window setting changes it.", ""]
        out += report.table(["dataset", "build into local data_dir", "build into the bucket"],
                            [[d["dataset"], f"{d['build_local_s']:.1f} s", f"{d['build_bucket_s']:.1f} s"]
                             for d in doc["datasets"]])
        shuffle = next((d["shuffle"] for d in doc["datasets"] if "shuffle" in d), None)
        if shuffle:
            out += shuffle_quality.markdown(shuffle)
        out += [f"- {line}" for line in doc.get("method", [])] + [""]
        return out

    def run_inputs(self, ctx: section.Context) -> dict[str, Any]:
        settings = self.run_settings(ctx)
        mri = os.path.join(ctx.inputs_dir, "mri_bucket")
        inputs.write_inputs([inputs.mri_plan(mri, **settings.mri)], workers=ctx.cores)
        return {"hmdb51_manual": os.path.join(ctx.inputs_dir, "hmdb51"), "mri_manual": mri}

    def standalone_inputs(self, out: str, settings: BucketSettings, inputs_dir: str, args: Any) -> dict[str, Any]:
        hmdb, mri = os.path.join(inputs_dir, "hmdb51"), os.path.join(inputs_dir, "mri_bucket")
        inputs.write_inputs([inputs.hmdb51_plan(hmdb, **settings.hmdb51), inputs.mri_plan(mri, **settings.mri)],
                            workers=len(os.sched_getaffinity(0)))
        return {"hmdb51_manual": hmdb, "mri_manual": mri}


SECTION = BucketReads()

if __name__ == "__main__":
    sys.exit(SECTION.main())
