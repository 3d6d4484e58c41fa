"""Fuzz targets: mutated real inputs through the paths users hit, each ending as an example, a skip or a clear error.

`TARGETS` names each target's maker; `make(name, workdir)` writes its seed inputs and returns the `Target`, whose
`check(data)` runs one mutated input and says "example", "skip" or "error", or raises `Finding` (a crash, hang,
wrong example or unclear error). `mutate(data, ops)` applies `ops` (`ops_strategy()` for hypothesis, `random_ops`
for a seeded loop). tests/test_fuzz.py runs a short budget; benchmarks/sections/fuzz.py a long one (`run_budget`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import json
import os
import random
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vidvol.builders import example_io, isolation
from vidvol.builders.transforms import clips, video
from vidvol.builders.transforms import volume_examples as ve

DECODE_TIMEOUT_S = 30.0  # a decoding child still busy after this is a hang (real inputs here take milliseconds)
OPS = ("flip", "set", "truncate", "insert", "delete", "duplicate")
INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF)


class Finding(AssertionError):
    """A bad outcome: `kind` is "crash" (an exception no user should see), "hang", "wrong" (a bad example) or
    "unclear" (an error that does not name the file)."""

    def __init__(self, kind: str, target: str, message: str):
        super().__init__(f"[{target}] {kind}: {message}")
        self.kind = kind


# --------------------------------------------------------------------------------------------
# Mutations


def mutate(data: bytes, ops: Sequence[tuple], region: int | None = None) -> bytes:
    """`data` with each op applied in turn; positions wrap around `region` bytes (default: the whole input)."""
    out = bytearray(data)
    for op, at, arg in ops:
        span = min(region or len(out), len(out))
        pos = at % span if span else 0
        if op == "flip" and out:
            out[pos] ^= (arg % 255) + 1
        elif op == "set" and out:
            out[pos] = INTERESTING[arg % len(INTERESTING)]
        elif op == "truncate":
            del out[at % (len(out) + 1):]
        elif op == "insert":
            out[pos:pos] = bytes([arg % 256]) * (1 + arg % 16)
        elif op == "delete":
            del out[pos:pos + 1 + arg % 64]
        elif op == "duplicate" and out:
            out[pos:pos] = out[pos:pos + 1 + arg % 64]
    return bytes(out)


def ops_strategy(max_ops: int = 6):
    """Hypothesis: a list of 1..max_ops mutation ops (op, position, argument)."""
    from hypothesis import strategies as st

    op = st.tuples(st.sampled_from(OPS), st.integers(0, 2**31 - 1), st.integers(0, 2**16))
    return st.lists(op, min_size=1, max_size=max_ops)


def random_ops(rng: random.Random, max_ops: int = 6) -> list[tuple]:
    """The same ops as `ops_strategy`, drawn from a seeded `random.Random`."""
    return [(rng.choice(OPS), rng.randrange(2**31), rng.randrange(2**16 + 1)) for _ in range(rng.randint(1, max_ops))]


HOSTILE_VALUES = (None, -1, 0, 1, 2**63, -(2**63), 1.5, float("nan"), float("inf"), "", "x" * 300, [], {}, [0, 0],
                  [-1, 2**40], True, {"next_index": -5})


def _hostile(rng: random.Random) -> Any:
    return json.loads(json.dumps(rng.choice(HOSTILE_VALUES)))  # a fresh copy: later edits may change it


def mutate_json(doc: Any, rng: random.Random, edits: int = 2) -> Any:
    """`doc` (parsed JSON) with `edits` structural changes: a value replaced by a hostile one, a key dropped or added."""
    doc = json.loads(json.dumps(doc))
    for _ in range(edits):
        parent, key = None, None
        node = doc
        while isinstance(node, (dict, list)) and node and rng.random() < 0.7:
            parent, key = node, rng.choice(list(node) if isinstance(node, dict) else range(len(node)))
            node = parent[key]
        if parent is None:
            if isinstance(doc, dict):
                doc[rng.choice(("extra", "seed", "data", "shards", "splits"))] = _hostile(rng)
            continue
        roll = rng.random()
        if roll < 0.2 and isinstance(parent, dict):
            del parent[key]
        elif roll < 0.3 and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[key])))  # a duplicated entry
        else:
            parent[key] = _hostile(rng)
    return doc


def _json_input(seeds: Sequence[bytes], data: bytes) -> bytes:
    """Half the inputs as they come (byte mutations: mostly JSON no longer), the other half a structural mutation of a
    seed (`mutate_json`) chosen by the input's bytes: valid JSON that says something else."""
    if data in seeds:
        return data
    rng = random.Random(data)
    if rng.random() < 0.5:
        return data
    return json.dumps(mutate_json(json.loads(rng.choice(seeds)), rng, rng.randint(1, 3))).encode()


# --------------------------------------------------------------------------------------------
# Targets


@dataclasses.dataclass
class Target:
    """One fuzzed path: its seed inputs, the region mutations hit (None: all), and the check of one input."""

    name: str
    seeds: list[bytes]
    run: Callable[[bytes], str]
    region: int | None = None
    close: Callable[[], None] = lambda: None

    def check(self, data: bytes) -> str:
        """'example', 'skip' or 'error' for one input; `Finding` for a bad outcome."""
        try:
            return self.run(data)
        except Finding:
            raise
        except Exception as e:
            raise Finding("crash", self.name, f"{type(e).__name__}: {e}") from e


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def _through_child(name: str, fn, key: str, record: Any, path: str) -> list[Any]:
    """What the writer gets for one source, decoded in a child as in a build; a timeout is a hang."""
    items = list(example_io.run_example_fn(fn, (key, record), "train"))
    for item in items:
        if isinstance(item, example_io.Skip):
            if item.reason.startswith("DecoderTimeout"):
                raise Finding("hang", name, item.reason)
            if not item.reason.strip():
                raise Finding("unclear", name, f"a skip without a reason: {item}")
    return items


def _examples(name: str, items: list[Any], path: str) -> list[dict]:
    """The examples among a decode's items; a Finding when a skip does not name the file it skipped."""
    out = []
    for item in items:
        if isinstance(item, example_io.Skip):
            if path not in item.reason and not item.example:
                raise Finding("unclear", name, f"the skip does not name the file: {item.reason}")
            continue
        out.append(item[1])
    return out


def _outcome(items: list[Any]) -> str:
    if any(isinstance(i, example_io.Skip) and not i.example for i in items):
        return "skip"
    return "example"


def _volume_target(name: str, workdir: str, suffix: str, region: int | None) -> Target:
    from vidvol.datasets.mri_volumes import make_dummy_data as dummy

    seeds = []
    for i, (shape, dtype) in enumerate((((8, 9, 10), np.int16), ((6, 7, 5, 2), np.float32))):
        data = (np.arange(int(np.prod(shape))) % 97).reshape(shape).astype(dtype)
        seed = dummy.write_nifti(os.path.join(workdir, f"seed{i}{suffix}"), data, dummy.affine_for(shape[:3], (1.0, 1.2, 1.5)),
                                 dtype=dtype)
        seeds.append(open(seed, "rb").read())
    spec = ve.VolumeSpec(spatial_size=(8, 8, 8), max_source_bytes=64 * 2**20)
    fn = isolation.InChild(functools.partial(ve.volume_example, spec=spec), timeout_s=DECODE_TIMEOUT_S)
    path = os.path.join(workdir, f"input{suffix}")

    def run(data: bytes) -> str:
        _write(path, data)
        source = ve.VolumeSource(path=path, key="input", features={"label": 0}, origin="labels.csv:2")
        items = _through_child(name, fn, "input", source, path)
        for ex in _examples(name, items, path):
            vol, mask = ex["volume"], ex["mask"]
            if vol.shape != (8, 8, 8) or vol.dtype != np.float32 or mask.shape != (8, 8, 8):
                raise Finding("wrong", name, f"volume {vol.shape} {vol.dtype}, mask {mask.shape}")
            if not np.isfinite(vol).all() or not set(np.unique(mask)) <= {0, 1}:
                raise Finding("wrong", name, "non-finite voxels or a mask that is not 0/1")
        return _outcome(items)

    return Target(name, seeds, run, region)


def nifti_header(workdir: str) -> Target:
    """Uncompressed NIfTI-1 scans (3-D int16, 4-D float32), mutations in the 352-byte header and extension flag."""
    return _volume_target("nifti_header", workdir, ".nii", 352)


def nifti_gzip(workdir: str) -> Target:
    """The same scans gzipped: mutations anywhere in the gzip stream (header, deflate blocks, CRC, size)."""
    return _volume_target("nifti_gzip", workdir, ".nii.gz", None)


def _video_target(name: str, workdir: str, suffix: str, fourcc: str) -> Target:
    from vidvol.testing import samples

    seed = samples.write_video(os.path.join(workdir, f"seed{suffix}"), 12, height=48, width=64, fourcc=fourcc)
    spec = clips.ClipSpec(num_frames=4, height=32, width=32)
    fn = isolation.InChild(functools.partial(clips.clip_example, spec=spec), setup=[video.single_threaded_opencv],
                           timeout_s=DECODE_TIMEOUT_S)
    path = os.path.join(workdir, f"input{suffix}")

    def run(data: bytes) -> str:
        _write(path, data)
        source = clips.ClipSource(path=path, key="input", features={"label": 0}, origin="videos.csv:2")
        items = _through_child(name, fn, "input", source, path)
        for ex in _examples(name, items, path):
            frames, mask, count = ex["video"], np.asarray(ex["mask"]), int(ex["num_frames"])
            if len(frames) != 4 or mask.shape != (4,) or not 1 <= mask.sum() <= min(4, count):
                raise Finding("wrong", name, f"{len(frames)} frames, mask {mask.tolist()}, num_frames {count}")
            for jpeg in frames:
                import cv2

                img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
                if img is None or img.shape != (32, 32, 3):
                    raise Finding("wrong", name, f"a stored frame is not a 32x32 JPEG: {None if img is None else img.shape}")
        return _outcome(items)

    return Target(name, [open(seed, "rb").read()], run)


def video_avi(workdir: str) -> Target:
    """A 12-frame XVID AVI (vidvol.testing.samples): container and bitstream byte flips, cuts, insertions."""
    return _video_target("video_avi", workdir, ".avi", "XVID")


def video_mp4(workdir: str) -> Target:
    """A 12-frame MPEG-4 Part 2 MP4 (moov last): the same mutations."""
    return _video_target("video_mp4", workdir, ".mp4", "mp4v")


def _text_target(name: str, workdir: str, file_name: str, seeds: list[str], parse: Callable[[str], list]) -> Target:
    path = os.path.join(workdir, file_name)

    def run(data: bytes) -> str:
        _write(path, data)
        try:
            rows = parse(path)
        except ValueError as e:  # the parsers' errors (CsvError, LayoutError, UnicodeDecodeError) are ValueErrors
            if path not in str(e):
                raise Finding("unclear", name, f"{type(e).__name__} does not name the file: {e}") from e
            return "error"
        if not isinstance(rows, list):
            raise Finding("wrong", name, f"parsed into {type(rows).__name__}")
        return "example"

    return Target(name, [s.encode("utf-8") for s in seeds], run)


def labels_csv(workdir: str) -> Target:
    """mri_volumes' labels.csv (header with path, label, subject, split) through `layout.read_labels_csv`."""
    from vidvol.datasets.mri_volumes import layout

    def parse(path: str) -> list:
        rows = layout.read_labels_csv(path)
        for row in rows:
            if not row.path or not row.label or row.split not in ("train", "validation", "test"):
                raise Finding("wrong", "labels_csv", f"a row with an empty field or an unknown split: {row}")
        return rows

    buf = io.StringIO()
    csv.writer(buf).writerows([["path", "label", "subject", "split"], ["volumes/a.nii.gz", "1", "sub-01", "train"],
                               ["volumes/b.nii", "0", "sub-02", "test"], ["volumes/c.nii.gz", "1", "", "validation"]])
    return _text_target("labels_csv", workdir, "labels.csv", [buf.getvalue(), "path,label\nx.nii,0\ny.nii.gz,1\n"], parse)


def video_csv(workdir: str) -> Target:
    """video_folder's CSV list (path, label, split, start, end) through `csv_list.read_video_csv`."""
    from vidvol.datasets.video_folder import csv_list

    def parse(path: str) -> list:
        rows, _ = csv_list.read_video_csv(path)
        for row in rows:
            start, end = getattr(row, "start", None), getattr(row, "end", None)
            if (start is None) != (end is None) or (start is not None and not (np.isfinite(start) and np.isfinite(end))):
                raise Finding("wrong", "video_csv", f"a row with half a range or a non-finite time: {row}")
        return rows

    seeds = ["path,label,split,start,end\nclips/a.mp4,run,train,0.5,2.0\nclips/b.avi,walk,test,1,3\n",
             "clips/a.mp4,run\nclips/b.avi,walk\n"]
    return _text_target("video_csv", workdir, "videos.csv", seeds, parse)


def split_lists(workdir: str) -> Target:
    """HMDB51's `<video> <id>` split files and UCF101's `<class>/<video> [<index>]` lists (one seed each)."""
    from vidvol.builders.sources import labels
    from vidvol.datasets.video_folder import layout

    hmdb = "brush_hair_1.avi 1\nbrush_hair_2.avi 2\nbrush_hair_3.avi 0\n"
    ucf = "ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi 1\nArchery/v_Archery_g01_c01.avi 2\n"

    def parse(path: str) -> list:
        with open(path, "rb") as f:
            head = f.read(1)
        if head[:1] == b"b":  # the HMDB51 seed (and what its mutations keep)
            return labels.parse_hmdb_split_file(path, "brush_hair")
        return layout.parse_ucf_list(path, "train")

    return _text_target("split_lists", workdir, "list.txt", [hmdb, ucf], parse)


# -- verify and the iterator's state: one tiny ArrayRecord build of mri_volumes/small_32 -----------


@functools.cache
def _built(workdir: str) -> tuple[str, str]:
    """(data_dir, data_path) of mri_volumes/small_32 from six 10^3 scans, ArrayRecord, built once per workdir."""
    from conftest import in_process_config
    from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
    from vidvol.testing import samples

    root = os.path.join(workdir, "built")
    samples.write_mri_volumes(os.path.join(root, "manual"), num_subjects=6, shape=(10, 10, 10))
    builder = mri.Builder(data_dir=os.path.join(root, "data"), config="small_32", file_format="array_record")
    with contextlib.redirect_stdout(io.StringIO()):
        builder.download_and_prepare(download_config=in_process_config(manual_dir=os.path.join(root, "manual")))
    return os.path.join(root, "data"), os.fspath(builder.data_path)


def _what_verify_checks(name: str, doc: Any) -> Any:
    """What a change of the file must not slip past verify: the shard list (shards.json), the splits (dataset_info)."""
    if name == "shards.json":  # num_bytes is optional (the checksum covers the bytes); unknown keys are ignored
        return (doc.get("dataset"), doc.get("version"), doc.get("checksum"),
                [tuple(s.get(k) for k in ("file", "split", "examples", "sha256")) for s in doc.get("shards", [])])
    splits = {s.get("name"): (s.get("shardLengths"), s.get("filepathTemplate")) for s in doc.get("splits", [])}
    return [sorted(splits.items()), doc.get("fileFormat"), doc.get("name"), doc.get("configName"), doc.get("version")]


def _verify_target(name: str, workdir: str) -> Target:
    from vidvol.cli import verify as verify_cli

    data_dir, data_path = _built(workdir)
    path = os.path.join(data_path, name)
    original = open(path, "rb").read()
    expected = _what_verify_checks(name, json.loads(original))
    assert verify_cli.verify(data_path, dataset="mri_volumes/small_32", data_dir=data_dir).exit_code == 0

    def run(data: bytes) -> str:
        data = _json_input([original], data)
        _write(path, data)
        try:
            report = verify_cli.verify(data_path, dataset="mri_volumes/small_32", data_dir=data_dir)
            lines = report.lines()
        finally:
            _write(path, original)
        if report.exit_code != 0:
            if not any(name in line or "mri_volumes-" in line for line in lines):  # the file, or the shard it disagrees on
                raise Finding("unclear", f"verify_{name}", f"exit {report.exit_code} without naming {name}: {lines}")
            return "error"
        try:
            doc = json.loads(data)
            same = _what_verify_checks(name, doc) == expected
        except (ValueError, AttributeError, TypeError):
            same = False
        if not same:
            raise Finding("wrong", f"verify_{name}", f"verify passed a changed {name}: {data[:300]!r}")
        return "example"

    return Target(f"verify_{name.split('.')[0]}", [original], run)


def verify_shards_json(workdir: str) -> Target:
    """`vidvol verify` over a built dataset whose shards.json is mutated: it passes only an unchanged shard list."""
    return _verify_target("shards.json", workdir)


def verify_dataset_info(workdir: str) -> Target:
    """`vidvol verify` with a mutated dataset_info.json: it passes only unchanged splits and shard lengths."""
    return _verify_target("dataset_info.json", workdir)


def grain_state(workdir: str) -> Target:
    """`grain_dataset` iterator states, saved after one batch and mutated as JSON bytes, restored into a fresh
    iterator: a ValueError, or batches of the dataset's own volumes."""
    import vidvol

    data_dir, _ = _built(workdir)
    ds = vidvol.grain_dataset("mri_volumes/small_32", "train", 2, data_dir=data_dir, seed=3)
    known = {np.asarray(v).tobytes() for (x, _), _ in ds for v in x}
    it = iter(ds)
    next(it)
    seeds = [json.dumps(it.get_state()).encode()]
    next(it)
    seeds.append(json.dumps(it.get_state()).encode())

    def run(data: bytes) -> str:
        try:
            state = json.loads(_json_input(seeds, data))
        except ValueError:
            return "error"  # the caller's own JSON: not vidvol's to parse
        fresh = iter(ds)
        try:
            fresh.set_state(state)
        except ValueError as e:
            if not str(e).startswith("vidvol"):
                raise Finding("unclear", "grain_state", f"a ValueError that does not say what refused: {e}") from e
            return "error"
        for (x, mask), _ in fresh:
            if x.shape[1:] != (32, 32, 32) or not 1 <= x.shape[0] <= 2 or mask.shape != x.shape:
                raise Finding("wrong", "grain_state", f"a batch of {x.shape}")
            if any(np.asarray(v).tobytes() not in known for v in x):
                raise Finding("wrong", "grain_state", "a volume that is none of the dataset's")
        return "example"

    return Target("grain_state", seeds, run)


def rar_entries(workdir: str) -> Target:
    """rarfile's sample archives (RAR 3 with subfolders, RAR 5) through `extract_rar`: files inside the target only,
    else an ArchiveError naming the archive."""
    import rar_samples
    from vidvol.builders.sources import archive

    folder = rar_samples.samples_dir()
    seeds = [(folder / n).read_bytes() for n in ("rar3-subdirs.rar", "rar5-subdirs.rar", "rar5-blake.rar")
             if (folder / n).is_file()]
    path = os.path.join(workdir, "input.rar")
    target = os.path.join(workdir, "extracted")

    def run(data: bytes) -> str:
        _write(path, data)
        shutil.rmtree(target, ignore_errors=True)
        try:
            names = archive.extract_rar(path, target, max_bytes=64 * 2**20)
        except ValueError as e:  # ArchiveError, UnsafeArchiveError
            if path not in str(e):
                raise Finding("unclear", "rar_entries", f"{type(e).__name__} does not name the archive: {e}") from e
            return "error"
        real = os.path.realpath(target)
        for rel in names:
            full = os.path.realpath(os.path.join(target, rel))
            if not full.startswith(real + os.sep) or not os.path.isfile(full) or os.path.islink(os.path.join(target, rel)):
                raise Finding("wrong", "rar_entries", f"{rel!r} is not a file inside the target")
        return "example"

    return Target("rar_entries", seeds, run, close=lambda: shutil.rmtree(target, ignore_errors=True))


TARGETS: dict[str, Callable[[str], Target]] = {
    "nifti_header": nifti_header, "nifti_gzip": nifti_gzip, "video_avi": video_avi, "video_mp4": video_mp4,
    "labels_csv": labels_csv, "video_csv": video_csv, "split_lists": split_lists,
    "verify_shards": verify_shards_json, "verify_dataset_info": verify_dataset_info, "grain_state": grain_state,
    "rar_entries": rar_entries,
}


def make(name: str, workdir: str) -> Target:
    """The target `name` with its seeds written under `workdir/name` (a shared build under `workdir`)."""
    folder = os.path.join(workdir, name)
    os.makedirs(folder, exist_ok=True)
    maker = TARGETS[name]
    return maker(workdir) if name in ("verify_shards", "verify_dataset_info", "grain_state") else maker(folder)


def run_budget(target: Target, inputs: int, seed: int = 0) -> dict[str, Any]:
    """`inputs` seeded mutations of the target's seeds (each seed once unmutated first), counted by outcome; never
    stops at a finding: {"inputs", "example", "skip", "error", "crash", "hang", "wrong", "unclear", "findings"}."""
    rng = random.Random(seed)
    counts: dict[str, Any] = dict.fromkeys(("example", "skip", "error", "crash", "hang", "wrong", "unclear"), 0)
    findings: list[str] = []
    for i in range(inputs):
        base = target.seeds[i % len(target.seeds)]
        data = base if i < len(target.seeds) else mutate(base, random_ops(rng), target.region)
        try:
            counts[target.check(data)] += 1
        except Finding as f:
            counts[f.kind] += 1
            if len(findings) < 20:
                findings.append(str(f)[:500])
    return {"inputs": inputs, **counts, "findings": findings}
