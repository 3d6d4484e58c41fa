"""`python -m vidvol verify NAME[/CONFIG][:VERSION] --data_dir DIR`: check every shard of a prepared dataset.

`verify` checks the folder against `shards.json` (`builders.writer.shards_file`): it is well formed and names this
dataset and version; every shard listed in `dataset_info.json` exists with the recorded size, SHA-256 and example
count, its records pass their format's framing checks (TFRecord CRCs through `core.tfrecord`, ArrayRecord's own
reader) and parse as the dataset's `tf.train.Example`; no shard `shards.json` records is missing from
`dataset_info.json`. The verdict: `OK` (exit 0), `BROKEN` (exit 1, each broken file named with the record and
byte offset where it breaks, and the rebuild command) or `NOT VERIFIED` (exit 3: nothing broken found, but some
shards have no recorded checksum, e.g. a dataset built before vidvol wrote `shards.json`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds

from vidvol.builders.writer.shards_file import DIGEST, file_digest, first_line, load_shards_file
from vidvol.core import artifacts
from vidvol.core import redact
from vidvol.core import store
from vidvol.core import tfds_api
from vidvol.core import tfrecord

_PARSE_BATCH_RECORDS = 64
_PARSE_BATCH_BYTES = 32 << 20
DATASET_INFO = "dataset_info.json"
_METADATA_FILES = (artifacts.SHARDS_NAME, DATASET_INFO)  # problems that are not of a shard file


@dataclasses.dataclass
class Problem:
    """One broken file (a shard, `shards.json` or `dataset_info.json`): what is wrong and, where known, the record
    where it breaks."""

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
    files: int = 0  # shard files looked at: those dataset_info.json lists and those only shards.json records
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
        if self.problems:
            out.append(self._broken_line())
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

    def _broken_line(self) -> str:
        """The BROKEN verdict: how many of the shard files are broken, and which metadata files."""
        broken = {p.file for p in self.problems}
        metadata = [name for name in _METADATA_FILES if os.path.join(self.data_path, name) in broken]
        shards = len(broken) - len(metadata)
        what = ([f"{shards} of {self.files} shard files"] if shards else []) + metadata
        verb = "is" if len(what) == 1 and not shards else "are"
        why = "a shard is not rebuilt alone (its contents depend on every input): " if shards else ""
        return (f"{' and '.join(what)} of {self.dataset} in {self.data_path} {verb} broken; {why}rebuild the config "
                f"with\n  {self.rebuild}")


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
    except Exception:
        pass
    for i, record in enumerate(batch):
        try:
            parse([record])
        except Exception as e:
            return i, f"{type(e).__name__}: {first_line(e)}"
    return 0, "the batch does not parse, though each record does"


def scan_records(path: str, parse: Callable[[list[bytes]], None]) -> tuple[int, int, Problem | None]:
    """Reads a TFRecord file through `core.tfrecord` (both CRC32Cs of every frame), then parses its records.

    Args:
      path: the shard file (local, or `scheme://` through tf.io.gfile).
      parse: raises on a batch of serialized records that do not parse (`_record_parser`).

    Returns:
      (records read, byte offset after the last record read, the first problem or None).
    """
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

    try:
        f, size = tfrecord.open_file(path)
    except (OSError, tf.errors.OpError) as e:
        return 0, 0, Problem(path, f"{type(e).__name__}: {first_line(e)}")
    try:
        for start, record in tfrecord.records(f, size):
            batch.append(record)
            batch_start.append((count, start))
            batch_bytes += len(record)
            count += 1
            offset = start + tfrecord.OVERHEAD + len(record)
            if len(batch) >= _PARSE_BATCH_RECORDS or batch_bytes >= _PARSE_BATCH_BYTES:
                problem = flush()
                if problem is not None:
                    return count, offset, problem
    except tfrecord.FrameError as e:
        # Named as TensorFlow's reader names it (`DataLossError: corrupted record at N`), then which check failed.
        kind = "truncated" if e.truncated else "corrupted"
        return count, offset, flush() or Problem(path, f"DataLossError: {kind} record at {e.offset}: {e}", count, e.offset)
    except (OSError, tf.errors.OpError) as e:
        return count, offset, flush() or Problem(path, f"{type(e).__name__}: {first_line(e)}", count, offset)
    finally:
        f.close()
    return count, offset, flush()


def scan_array_records(path: str, parse: Callable[[list[bytes]], None]) -> tuple[int, Problem | None]:
    """Reads an ArrayRecord file with ArrayRecord's own reader (its chunk checks), then parses its records.

    Args:
      path: the shard file.
      parse: raises on a batch of serialized records that do not parse (`_record_parser`).

    Returns:
      (records in the file, the first problem or None).
    """
    from array_record.python import array_record_module

    try:
        reader = array_record_module.ArrayRecordReader(path)
    except Exception as e:  # the reader raises RuntimeError/ValueError on damage
        return 0, Problem(path, f"ArrayRecord cannot open it: {first_line(e)}")
    try:
        count = reader.num_records()
        for start in range(0, count, _PARSE_BATCH_RECORDS):
            indices = list(range(start, min(count, start + _PARSE_BATCH_RECORDS)))
            try:
                batch = reader.read(indices)
            except Exception as e:
                return count, Problem(path, f"ArrayRecord cannot read records {start}-{indices[-1]}: {first_line(e)}", start)
            bad = _parse_error(parse, batch)
            if bad is not None:
                return count, Problem(path, f"the record does not parse as an example of this dataset ({bad[1]})",
                                      start + bad[0])
        return count, None
    finally:
        reader.close()


def _load_info(data_path: str) -> tfds.core.DatasetInfo:
    return tfds.builder_from_directory(data_path).info


def verify(data_path: str, *, dataset: str, data_dir: str,
           fetch: Callable[[str], contextlib.AbstractContextManager[tuple[str, str]]] | None = None) -> Report:
    """Checks every shard of the prepared dataset in `data_path` (what is checked: the module docstring).

    Args:
      data_path: the dataset's version folder (`DATA_DIR/NAME/CONFIG/VERSION`).
      dataset: `NAME/CONFIG`, as `shards.json` names it.
      data_dir: the TFDS data_dir, for the rebuild command.
      fetch: for a dataset in a bucket (`data_path` then holds its metadata only): shard file name -> a context
        giving (a local copy of the shard, the name to report it by), the copy removed afterwards.

    Returns:
      The `Report`: its `lines()` are what the command prints, its `exit_code` what it exits with.
    """
    data_path = os.fspath(data_path)
    shards_path = os.path.join(data_path, artifacts.SHARDS_NAME)
    shards, shards_problem = load_shards_file(data_path, dataset=dataset, version=os.path.basename(data_path.rstrip("/")))
    manual_dir = shards["manual_dir"] if shards else None
    report = Report(dataset, data_path, artifacts.rebuild_command(dataset, data_dir, manual_dir))
    if shards_problem:
        report.problems.append(Problem(shards_path, shards_problem))
    info_path = os.path.join(data_path, DATASET_INFO)
    if not tf.io.gfile.exists(info_path):
        report.problems.append(Problem(info_path, "missing: the dataset is not prepared here"))
        return report
    try:
        info = _load_info(data_path)
    except Exception as e:  # a damaged dataset_info.json or features.json
        report.problems.append(Problem(info_path, f"unreadable: {type(e).__name__}: {first_line(e)}"))
        return report
    # What it says it is must be what this folder holds (a hand edit, a copy of another config's metadata); a
    # missing name would fail to make the shards' names (both found by the fuzz lane, tests/test_fuzz.py).
    said = f"{info.name}/{info.config_name}" if info.config_name else str(info.name)
    folder_version = os.path.basename(data_path.rstrip("/"))
    if said != dataset or str(info.version) != folder_version:
        report.problems.append(Problem(info_path, f"describes {said} {info.version}, but this folder holds {dataset} "
                                                  f"{folder_version} (dataset_info.json was edited or copied here)"))
        return report
    try:
        shard_names = {name: list(split.filenames) for name, split in info.splits.items()}
    except (ValueError, KeyError, TypeError) as e:
        report.problems.append(Problem(info_path, f"its splits name no shard files: {first_line(e)}"))
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
    for _, split in sorted(info.splits.items()):
        for filename, length in zip(shard_names[split.name], split.shard_lengths):
            listed.add(filename)
            report.files += 1
            entry = recorded.get(filename)
            if entry is None or not entry.get(DIGEST):
                report.unverified.append(filename)
                if shards is not None and not report.why_unverified:
                    report.why_unverified = f"{artifacts.SHARDS_NAME} records no checksum for {filename}"
            kind = "array_record" if array_record else ("tfrecord" if info.file_format in (None, tfds.core.FileFormat.TFRECORD) else None)
            with (fetch(filename) if fetch else contextlib.nullcontext((os.path.join(data_path, filename),) * 2)) as (
                    path, shown):
                problem, records = _check_file(path, length, entry, parse, kind=kind)
            if problem is not None and problem.file != shown:
                problem.file = shown
            report.records += records
            if problem is None and entry is not None and entry.get("split") != split.name:
                # The two files disagree on which split the shard holds (found by the fuzz lane, tests/test_fuzz.py).
                problem = Problem(shown, f"{artifacts.SHARDS_NAME} files it under split {entry.get('split')!r}, "
                                         f"dataset_info.json under {split.name!r}")
            if problem is not None:
                report.problems.append(problem)
    for name in sorted(set(recorded) - listed):
        report.files += 1
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
# The command: python -m vidvol verify NAME[/CONFIG][:VERSION] --data_dir DIR


def _versions(folder: str) -> list[str]:
    """Version folders (`1.0.0`) of a dataset (config) folder that hold a dataset_info.json, newest first."""
    if not tf.io.gfile.isdir(folder):
        return []
    found = [d.rstrip("/") for d in tf.io.gfile.listdir(folder)
             if re.fullmatch(r"\d+\.\d+\.\d+", d.rstrip("/"))
             and tf.io.gfile.exists(os.path.join(folder, d.rstrip("/"), "dataset_info.json"))]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True)


def resolve(spec: str, data_dir: str) -> tuple[str, str]:
    """Finds the prepared dataset a `NAME[/CONFIG][:VERSION]` names in `data_dir`.

    A registered dataset resolves as `tfds.builder` does (its default config when none is given);
    otherwise the folders decide: the newest prepared version, the only config folder.

    Args:
      spec: `NAME`, `NAME/CONFIG` or `NAME/CONFIG:VERSION`.
      data_dir: the TFDS data_dir it was built into.

    Returns:
      (the version folder, `NAME/CONFIG`).

    Raises:
      ValueError: a malformed spec, or no (or no single) prepared dataset of that name there.
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


def _in_bucket(spec: str, url: str):
    """(its metadata's local folder, `NAME/CONFIG`, a shard fetch for `verify`, its URL) of a bucket dataset.

    Its metadata is copied into the reader cache (`readers.bucket`); each shard is then downloaded into a
    temporary file, checked, and removed: one shard on local disk at a time, the bucket's own bytes.
    """
    from vidvol.readers import bucket  # the readers' cache (this module is also imported by builds)

    rest, _, version = spec.partition(":")
    name, _, config = rest.partition("/")
    try:
        builder = bucket.open_builder(name + (f"/{config}" if config else "") + (f":{version}" if version else ""), url)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ValueError(f"{spec}: not a registered dataset ({first_line(e)})") from None
    remote = bucket.version_of(builder)
    cfg = builder.builder_config.name if builder.builder_config else None

    @contextlib.contextmanager
    def fetch(filename: str):
        fd, tmp = tempfile.mkstemp(prefix=".verify-", suffix=".shard")
        os.close(fd)
        try:
            store.download(remote.url_of(filename), tmp)
            yield tmp, redact.url(remote.url_of(filename))
        except FileNotFoundError:
            yield os.path.join(tempfile.gettempdir(), "missing-" + filename), redact.url(remote.url_of(filename))
        finally:
            os.remove(tmp)

    return os.fspath(builder.data_path), artifacts.dataset_spec(name, cfg), fetch, redact.url(remote.url)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vidvol verify NAME[/CONFIG] --data_dir DIR`.

    Args:
      argv: the command's options (default: `sys.argv[1:]` as argparse reads them).

    Returns:
      0 verified, 1 broken (or nothing to check there), 3 not verified (no checksums recorded for some shards).
    """
    parser = argparse.ArgumentParser(
        prog="python -m vidvol verify",
        description="Check every shard of a prepared dataset: size, SHA-256 and example count as the build "
                    "recorded them, TFRecord CRCs, and that every record parses. Exit 0: verified; 1: something is "
                    "broken; 3: nothing broken found, but not verified (no checksums recorded for some shards).",
    )
    parser.add_argument("dataset", help="NAME, NAME/CONFIG or NAME/CONFIG:VERSION, e.g. mri_volumes/small_32")
    parser.add_argument("--data_dir", required=True, help="the TFDS data_dir the dataset was built into")
    args = parser.parse_args(argv)
    fetch = None
    try:
        if store.is_bucket(args.data_dir):
            data_path, spec, fetch, shown = _in_bucket(args.dataset, args.data_dir)
        else:
            data_path, spec = resolve(args.dataset, args.data_dir)
            shown = data_path
    except (ValueError, OSError, RuntimeError) as e:
        print(redact.text(f"error: {e}"), file=sys.stderr)
        return 1
    print(redact.text(f"checking {spec} in {shown}"), flush=True)
    try:
        report = verify(data_path, dataset=spec, data_dir=args.data_dir, fetch=fetch)
    except (ValueError, OSError, tf.errors.OpError) as e:  # an unreadable folder: one line, no traceback
        print(redact.text(f"error: {data_path}: {type(e).__name__}: {first_line(e)}"), file=sys.stderr)
        return 1
    for line in report.lines():
        print(redact.text(line), flush=True)
    return report.exit_code

