"""Shard integrity: what each worker records about the shard it wrote, and `python -m vidvol verify`.

At build time each worker hashes the shard file it wrote (SHA-256 of the bytes on disk, read once
before the file is renamed into place) and counts its examples; the driver gathers these into
`shards.json` next to the skip report. SHA-256 rather than CRC32C: it is in Python's standard
library (no extra package), `sha256sum` checks it with no vidvol at all, it is what TFDS records
for downloads, and it catches any change, not only the random ones a CRC is built for; one
hashing pass over a shard costs a small fraction of encoding its examples. The file is the same on every runner
(the shard bytes are deterministic, the entries are sorted).

`verify` checks a prepared dataset against it: `shards.json` is well formed and names this
dataset and version, every shard listed in `dataset_info.json` exists, has the recorded size,
SHA-256 and example count (no fewer and no more records), and every record passes its format's
framing checks (TFRecord CRCs; ArrayRecord's chunk checks) and parses as a `tf.train.Example` with
the dataset's feature specs. Each broken file is reported with the record index (and, for TFRecord,
the byte offset) where it breaks, and the command that rebuilds it. The verdict is one of three:
`OK` (exit 0), `BROKEN` (exit 1: a shard, `shards.json` or `dataset_info.json` is wrong), or
`NOT VERIFIED` (exit 3: nothing is wrong as far as records and counts go, but some shards have no
recorded checksum to compare with, e.g. a dataset built before vidvol wrote `shards.json`, so a file
changed after the build whose records still parse would pass unseen).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
import uuid
from typing import Any, Callable, Sequence

import tensorflow as tf
import tensorflow_datasets as tfds

from vidvol.core import artifacts
from vidvol.core import redact
from vidvol.core import tfds_api

logger = logging.getLogger(__name__)

DIGEST = "sha256"  # the checksum each shard entry records, by its hashlib name
_CHUNK = 4 << 20
_RECORD_OVERHEAD = 16  # TFRecord framing: uint64 length, uint32 CRC of it, the data, uint32 CRC of the data
_PARSE_BATCH_RECORDS = 64
_PARSE_BATCH_BYTES = 32 << 20


def file_digest(path: str) -> tuple[str, int]:
    """(SHA-256 hex digest, size in bytes) of a file, read through tf.io.gfile (local, gs://, ...)."""
    h = hashlib.sha256()
    size = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def shard_entry(path: str, split: str, examples: int, file_bytes: int | None, digest: str | None) -> dict[str, Any]:
    """One shard's line in `shards.json` (by file name: the folder moves when TFDS renames it)."""
    return {"file": os.path.basename(path), "split": split, "examples": int(examples),
            "num_bytes": file_bytes, DIGEST: digest}


def write_shards_file(
    path: str, *, dataset: str, version: str, manual_dir: str | None, entries: Sequence[dict[str, Any]]
) -> None:
    """Writes `shards.json`: the dataset, the manual_dir it was built from and one entry per shard file."""
    doc = {
        "dataset": dataset,
        "version": version,
        "manual_dir": redact.url(manual_dir) if manual_dir else manual_dir,  # never a URL's credentials
        "checksum": DIGEST,
        "shards": sorted(entries, key=lambda e: e["file"]),
    }
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(redact.data(doc), indent=1, sort_keys=True))
    tf.io.gfile.rename(tmp, path, overwrite=True)


def read_shards_file(data_path: str) -> dict[str, Any] | None:
    """The `shards.json` of a prepared dataset folder, or None where there is none (built before it existed)."""
    path = os.path.join(os.fspath(data_path), artifacts.SHARDS_NAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return json.loads(f.read())


_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _entry_problems(i: int, entry: Any) -> list[str]:
    """What is wrong with the `i`th entry of `shards` (none when well formed)."""
    if not isinstance(entry, dict):
        return [f"shards[{i}] is {_kind(entry)}, expected an object"]
    where = f"shards[{i}] ({entry['file']})" if isinstance(entry.get("file"), str) else f"shards[{i}]"
    out = []
    if not isinstance(entry.get("file"), str) or not entry["file"] or "/" in entry["file"]:
        out.append(f"{where}: `file` is {_kind(entry.get('file'))}, expected a shard file name")
    if not isinstance(entry.get("split"), str):
        out.append(f"{where}: `split` is {_kind(entry.get('split'))}, expected a string")
    for key, optional in (("examples", False), ("num_bytes", True)):
        value = entry.get(key)
        if not ((optional and value is None) or (type(value) is int and value >= 0)):  # pylint: disable=unidiomatic-typecheck
            out.append(f"{where}: `{key}` is {value!r}, expected a whole number" + (" or null" if optional else ""))
    digest = entry.get(DIGEST)
    if digest is not None and not (isinstance(digest, str) and _SHA256_RE.fullmatch(digest)):
        out.append(f"{where}: `{DIGEST}` is {_kind(digest)} {str(digest)[:20]!r}, expected 64 hex digits or null")
    return out


def shards_doc_problems(doc: Any) -> list[str]:
    """What makes `doc` (a parsed `shards.json`) unusable: not an object, keys missing or of the wrong kind."""
    if not isinstance(doc, dict):
        return [f"it is {_kind(doc)}, expected an object with dataset, version, manual_dir, checksum and shards"]
    out = [f"no `{key}`" for key in ("dataset", "version", "manual_dir", "checksum", "shards") if key not in doc]
    for key in ("dataset", "version", "checksum"):
        if key in doc and not isinstance(doc[key], str):
            out.append(f"`{key}` is {_kind(doc[key])}, expected a string")
    if doc.get("manual_dir") is not None and not isinstance(doc["manual_dir"], str):
        out.append(f"`manual_dir` is {_kind(doc['manual_dir'])}, expected a string or null")
    if isinstance(doc.get("checksum"), str) and doc["checksum"] != DIGEST:
        out.append(f"`checksum` is {doc['checksum']!r}; this vidvol records and checks {DIGEST!r}")
    if "shards" in doc and not isinstance(doc["shards"], list):
        out.append(f"`shards` is {_kind(doc['shards'])}, expected an array of shard entries")
    elif isinstance(doc.get("shards"), list):
        names: set[str] = set()
        for i, entry in enumerate(doc["shards"]):
            out.extend(_entry_problems(i, entry))
            name = entry.get("file") if isinstance(entry, dict) else None
            if isinstance(name, str) and name in names:
                out.append(f"shards[{i}]: {name} is listed twice")
            names.add(name)
    return out


def load_shards_file(data_path: str, *, dataset: str, version: str) -> tuple[dict[str, Any] | None, str | None]:
    """(`shards.json` of `data_path` if usable here, else None; why it is not, None when fine or absent).

    Usable: valid JSON, well formed (`shards_doc_problems`), and written for `dataset` (NAME/CONFIG) at `version`.
    """
    try:
        doc = read_shards_file(data_path)
    except (ValueError, UnicodeDecodeError, tf.errors.OpError) as e:
        return None, f"unreadable ({_first_line(e)}); it is written by the build, so rebuild"
    if doc is None:
        return None, None
    problems = shards_doc_problems(doc)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        return None, f"malformed: {shown}. It is written by the build and never edited by hand: rebuild to restore it"
    if (doc["dataset"], doc["version"]) != (dataset, version):
        return None, (f"it was written for {doc['dataset']} {doc['version']}, but this folder holds {dataset} {version}: "
                      "its checksums do not apply here (a file copied from another dataset?)")
    return doc, None


# ------------------------------------------------------------------------------------------------
# verify


@dataclasses.dataclass
class Problem:
    """One broken shard file: what is wrong and, where known, the record where it breaks."""

    file: str
    what: str
    record: int | None = None  # index of the first bad record in the file
    offset: int | None = None  # byte offset where that record starts

    def line(self) -> str:
        where = f"record {self.record} at byte offset {self.offset}: " if self.offset is not None else ""
        return f"BROKEN {self.file}: {where}{self.what}"


@dataclasses.dataclass
class Report:
    """What `verify` found in one prepared dataset folder."""

    dataset: str  # NAME/CONFIG
    data_path: str
    rebuild: str  # the command that rebuilds the dataset config
    files: int = 0
    records: int = 0
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    unverified: list[str] = dataclasses.field(default_factory=list)  # shard files with no recorded checksum
    why_unverified: str = ""

    @property
    def ok(self) -> bool:
        """Nothing found broken (see `verified` for whether every file also matched a checksum)."""
        return not self.problems

    @property
    def verified(self) -> bool:
        """Nothing broken and every shard file's checksum compared."""
        return self.ok and not self.unverified

    @property
    def exit_code(self) -> int:
        """0 verified, 1 broken, 3 not verified (no checksums to compare with)."""
        return 1 if self.problems else (EXIT_NOT_VERIFIED if self.unverified else 0)

    def lines(self) -> list[str]:
        """The report as printed: notes, each broken file (with the rebuild command), then the verdict."""
        out = [f"note: {n}" for n in self.notes]
        for p in self.problems:
            out += [p.line(), f"  rebuild: {self.rebuild}"]
        broken = len({p.file for p in self.problems})
        if self.problems:
            out.append(f"{broken} of {self.files} shard files of {self.dataset} in {self.data_path} are broken; a shard "
                       f"is not rebuilt alone (its contents depend on every input): rebuild the config with\n"
                       f"  {self.rebuild}")
        elif self.unverified:
            some = "none" if len(self.unverified) == self.files else f"{self.files - len(self.unverified)}"
            out.append(f"NOT VERIFIED {self.dataset} in {self.data_path}: {self.files} shard files, {self.records} records "
                       f"read, counted and parsed without fault, but {some} of them could be compared with a checksum "
                       f"({self.why_unverified}): a file changed after the build whose records still parse would pass "
                       f"unseen. A rebuild records the checksums:\n  {self.rebuild}")
        else:
            out.append(f"OK {self.dataset} in {self.data_path}: {self.files} shard files, {self.records} records, "
                       "every checksum, count and record checks out")
        return out


EXIT_NOT_VERIFIED = 3


def _record_parser(features: tfds.features.FeatureConnector | None) -> Callable[[list[bytes]], None]:
    """A function that raises on a batch of serialized records that do not parse as the dataset's examples."""
    specs = tfds_api.parse_specs(features.get_serialized_info()) if features is not None else None
    if specs:
        def parse(batch: list[bytes]) -> None:
            tf.io.parse_example(tf.constant(batch, tf.string), specs)
        return parse

    def parse_proto(batch: list[bytes]) -> None:  # public fallback: the proto itself
        for record in batch:
            tf.train.Example.FromString(record)
    return parse_proto


def _parse_error(parse: Callable[[list[bytes]], None], batch: list[bytes]) -> tuple[int, str] | None:
    """(index in batch, error) of the first record that does not parse, or None."""
    try:
        parse(batch)
        return None
    except Exception:  # pylint: disable=broad-except
        pass
    for i, record in enumerate(batch):
        try:
            parse([record])
        except Exception as e:  # pylint: disable=broad-except
            return i, f"{type(e).__name__}: {_first_line(e)}"
    return 0, "the batch does not parse, though each record does"


def _first_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:[^\]]*\].*", "", text)  # eager op suffix: `[Op:IteratorGetNext] name: `
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def scan_records(path: str, parse: Callable[[list[bytes]], None]) -> tuple[int, int, Problem | None]:
    """(records read, byte offset after the last, the first problem): framing CRCs through tf.data's TFRecord
    reader, then the parse."""
    count, offset = 0, 0
    batch: list[bytes] = []
    batch_start: list[tuple[int, int]] = []  # (record index, offset) of each record in the batch
    batch_bytes = 0

    def flush() -> Problem | None:
        nonlocal batch, batch_start, batch_bytes
        bad = _parse_error(parse, batch) if batch else None
        problem = None
        if bad is not None:
            index, offset_at = batch_start[bad[0]]
            problem = Problem(path, f"the record does not parse as an example of this dataset ({bad[1]})", index, offset_at)
        batch, batch_start, batch_bytes = [], [], 0
        return problem

    iterator = iter(tf.data.TFRecordDataset(path, buffer_size=_CHUNK).as_numpy_iterator())
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            break
        except tf.errors.DataLossError as e:
            problem = flush() or Problem(path, f"DataLossError: {_first_line(e)} (TFRecord CRC or length check failed)", count, offset)
            return count, offset, problem
        except tf.errors.OpError as e:
            return count, offset, flush() or Problem(path, f"{type(e).__name__}: {_first_line(e)}", count, offset)
        batch.append(record)
        batch_start.append((count, offset))
        batch_bytes += len(record)
        count += 1
        offset += len(record) + _RECORD_OVERHEAD
        if len(batch) >= _PARSE_BATCH_RECORDS or batch_bytes >= _PARSE_BATCH_BYTES:
            problem = flush()
            if problem is not None:
                return count, offset, problem
    return count, offset, flush()


def scan_array_records(path: str, parse: Callable[[list[bytes]], None]) -> tuple[int, Problem | None]:
    """(records in an ArrayRecord file, the first problem): ArrayRecord's own reader, then the parse."""
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top

    try:
        reader = array_record_module.ArrayRecordReader(path)
    except Exception as e:  # pylint: disable=broad-except  (the reader raises RuntimeError/ValueError on damage)
        return 0, Problem(path, f"ArrayRecord cannot open it: {_first_line(e)}")
    try:
        count = reader.num_records()
        for start in range(0, count, _PARSE_BATCH_RECORDS):
            indices = list(range(start, min(count, start + _PARSE_BATCH_RECORDS)))
            try:
                batch = reader.read(indices)
            except Exception as e:  # pylint: disable=broad-except
                return count, Problem(path, f"ArrayRecord cannot read records {start}-{indices[-1]}: {_first_line(e)}", start)
            bad = _parse_error(parse, batch)
            if bad is not None:
                return count, Problem(path, f"the record does not parse as an example of this dataset ({bad[1]})",
                                      start + bad[0])
        return count, None
    finally:
        reader.close()


def _load_info(data_path: str) -> tfds.core.DatasetInfo:
    return tfds.builder_from_directory(data_path).info


def verify(data_path: str, *, dataset: str, data_dir: str) -> Report:
    """Checks every shard of the prepared dataset in `data_path` (see the module docstring)."""
    data_path = os.fspath(data_path)
    shards_path = os.path.join(data_path, artifacts.SHARDS_NAME)
    shards, shards_problem = load_shards_file(data_path, dataset=dataset, version=os.path.basename(data_path.rstrip("/")))
    manual_dir = shards["manual_dir"] if shards else None
    report = Report(dataset, data_path, artifacts.rebuild_command(dataset, data_dir, manual_dir))
    if shards_problem:
        report.problems.append(Problem(shards_path, shards_problem))
    if not tf.io.gfile.exists(os.path.join(data_path, "dataset_info.json")):
        report.problems.append(Problem(os.path.join(data_path, "dataset_info.json"), "missing: the dataset is not prepared here"))
        return report
    try:
        info = _load_info(data_path)
    except Exception as e:  # pylint: disable=broad-except  (a damaged dataset_info.json or features.json)
        report.problems.append(Problem(os.path.join(data_path, "dataset_info.json"), f"unreadable: {type(e).__name__}: {_first_line(e)}"))
        return report
    array_record = info.file_format is tfds.core.FileFormat.ARRAY_RECORD
    if info.file_format not in (None, tfds.core.FileFormat.TFRECORD) and not array_record:
        report.notes.append(f"{info.file_format} shards: only their checksums and sizes are checked")
    recorded = {e["file"]: e for e in (shards or {}).get("shards", [])}
    if shards is None:
        report.why_unverified = (f"{artifacts.SHARDS_NAME} is not usable, see above" if shards_problem else
                                 f"there is no {artifacts.SHARDS_NAME}: built before vidvol recorded checksums, or it was removed")
    parse = _record_parser(info.features)
    listed = set()
    for split_name, split in sorted(info.splits.items()):
        for filename, length in zip(split.filenames, split.shard_lengths):
            listed.add(filename)
            report.files += 1
            entry = recorded.get(filename)
            if entry is None or not entry.get(DIGEST):
                report.unverified.append(filename)
                if shards is not None and not report.why_unverified:
                    report.why_unverified = f"{artifacts.SHARDS_NAME} records no checksum for {filename}"
            kind = "array_record" if array_record else ("tfrecord" if info.file_format in (None, tfds.core.FileFormat.TFRECORD) else None)
            problem, records = _check_file(os.path.join(data_path, filename), length, entry, parse, kind=kind)
            report.records += records
            if problem is not None:
                report.problems.append(problem)
    for name in sorted(set(recorded) - listed):
        # A shard the build wrote that dataset_info.json no longer lists is never read: a reader of that split
        # (or of `all`) silently gets fewer examples, so this is a failure, not a note.
        report.problems.append(Problem(os.path.join(data_path, name),
                                       f"is in {artifacts.SHARDS_NAME} but not in dataset_info.json, so no reader "
                                       "ever reads it (dataset_info.json lost a split or shard)"))
    return report


def _check_file(path: str, length: int, entry: dict[str, Any] | None, parse, *, kind: str | None) -> tuple[Problem | None, int]:
    """(the file's first problem or None, records read); `kind`: tfrecord, array_record or None (bytes only)."""
    if not tf.io.gfile.exists(path):
        return Problem(path, f"missing (dataset_info.json lists it with {length} examples)"), 0
    digest_problem = None
    if entry is not None and entry.get(DIGEST):
        digest, size = file_digest(path)
        if entry.get("num_bytes") is not None and size != entry["num_bytes"]:
            digest_problem = f"{size} bytes on disk, {entry['num_bytes']} written by the build"
        elif digest != entry[DIGEST]:
            digest_problem = f"{DIGEST} {digest[:16]}… differs from the build's {entry[DIGEST][:16]}…"
    if kind is None:
        return (Problem(path, digest_problem) if digest_problem else None), 0
    if kind == "tfrecord":
        count, end, problem = scan_records(path, parse)
    else:
        (count, problem), end = scan_array_records(path, parse), None
    if problem is not None:
        if digest_problem:
            problem.what += f"; {digest_problem}"
        return problem, count
    suffix = f"; {digest_problem}" if digest_problem else ""
    if count != length:
        short = count < length
        what = f"{count} records, {length} expected: " + (
            "the file ends early" if short else "it holds more than the build wrote (a reader takes only the first "
            f"{length}, so the file is not the one this build wrote)")
        return Problem(path, what + suffix, count if short else None, end if short else None), count
    if entry is not None and entry.get("examples") not in (None, length):
        return Problem(path, f"{length} examples in dataset_info.json, {entry['examples']} in {artifacts.SHARDS_NAME}{suffix}"), count
    if digest_problem:
        return Problem(path, f"every record reads, but the bytes changed since the build: {digest_problem}"), count
    return None, count


# ------------------------------------------------------------------------------------------------
# CLI: python -m vidvol verify NAME[/CONFIG][:VERSION] --data_dir DIR


def _versions(folder: str) -> list[str]:
    """Version folders (`1.0.0`) of a dataset (config) folder that hold a dataset_info.json, newest first."""
    if not tf.io.gfile.isdir(folder):
        return []
    found = [d.rstrip("/") for d in tf.io.gfile.listdir(folder)
             if re.fullmatch(r"\d+\.\d+\.\d+", d.rstrip("/"))
             and tf.io.gfile.exists(os.path.join(folder, d.rstrip("/"), "dataset_info.json"))]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)


def resolve(spec: str, data_dir: str) -> tuple[str, str]:
    """(data_path, NAME/CONFIG) of `NAME[/CONFIG][:VERSION]` in data_dir.

    A registered dataset resolves as `tfds.builder` does (its default config when none is given);
    otherwise the folders decide: the newest prepared version, the only config folder.
    """
    rest, _, version = spec.partition(":")
    name, _, config = rest.partition("/")
    if not name or "/" in config:
        raise ValueError(f"dataset {spec!r}: expected NAME, NAME/CONFIG or NAME/CONFIG:VERSION")
    try:
        builder = tfds.builder(f"{name}:{version}" if version else name, config=config or None, data_dir=data_dir)
        cfg = builder.builder_config.name if builder.builder_config else None
        path = os.fspath(builder.data_path)
        if version or tf.io.gfile.exists(os.path.join(path, "dataset_info.json")):
            return path, artifacts.dataset_spec(name, cfg)
        folder = os.path.dirname(path)
        versions = _versions(folder)
        return (os.path.join(folder, versions[0]) if versions else path), artifacts.dataset_spec(name, cfg)
    except tfds.core.registered.DatasetNotFoundError:  # not registered in this process: the folders decide
        pass
    base = os.path.join(data_dir, name)
    if not config and not _versions(base):
        configs = [d.rstrip("/") for d in (tf.io.gfile.listdir(base) if tf.io.gfile.isdir(base) else [])
                   if _versions(os.path.join(base, d.rstrip("/")))]
        if len(configs) != 1:
            raise ValueError(f"{base}: name the config to check, one of {sorted(configs)}" if configs
                             else f"{base}: no prepared dataset {name!r} here")
        config = configs[0]
    folder = os.path.join(base, config) if config else base
    versions = [version] if version else _versions(folder)
    if not versions:
        raise ValueError(f"{folder}: no prepared version of {artifacts.dataset_spec(name, config)} here")
    return os.path.join(folder, versions[0]), artifacts.dataset_spec(name, config)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vidvol verify NAME[/CONFIG] --data_dir DIR`: exit 0 verified, 1 broken, 3 not verified (no checksums)."""
    parser = argparse.ArgumentParser(
        prog="python -m vidvol verify",
        description="Check every shard of a prepared dataset: size, SHA-256 and example count as the build "
                    "recorded them, TFRecord CRCs, and that every record parses. Exit 0: verified; 1: something is "
                    "broken; 3: nothing broken found, but not verified (no checksums recorded for some shards).",
    )
    parser.add_argument("dataset", help="NAME, NAME/CONFIG or NAME/CONFIG:VERSION, e.g. mri_volumes/small_32")
    parser.add_argument("--data_dir", required=True, help="the TFDS data_dir the dataset was built into")
    args = parser.parse_args(argv)
    try:
        data_path, spec = resolve(args.dataset, args.data_dir)
    except ValueError as e:
        print(redact.text(f"error: {e}"), file=sys.stderr)
        return 1
    print(f"checking {spec} in {data_path}", flush=True)
    try:
        report = verify(data_path, dataset=spec, data_dir=args.data_dir)
    except (ValueError, OSError, tf.errors.OpError) as e:  # an unreadable folder: one line, no traceback
        print(redact.text(f"error: {data_path}: {type(e).__name__}: {_first_line(e)}"), file=sys.stderr)
        return 1
    for line in report.lines():
        print(redact.text(line), flush=True)
    return report.exit_code

