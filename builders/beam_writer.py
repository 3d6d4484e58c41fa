"""Beam wiring shared by every vidvol builder: sources in, TFRecord or ArrayRecord shards and a skip report out.

A builder declares, per split, a list of small picklable *sources* (a path and a label, an
experiment's frame list, ...) and a picklable *example function* that turns one source into
`(key, example)` pairs or `Skip` records. `StreamingBeamBuilder` then plans shards up front
(sources ordered by a stable hash, cut into contiguous chunks), and each Beam worker writes one
whole shard at a time, encoding and serializing one example at a time straight into the file.
A worker therefore holds one decoded example plus the record writer's small buffer, whatever
the dataset's size: TFDS's stock Beam writer instead groups every serialized example of a shard
(and, on the direct runner, of the whole split) in memory before writing.

`ExamplesFromSources` is also a regular TFDS `_generate_examples` PTransform, so the same
builders can be written by TFDS's stock writer (the benchmark compares the two).
The shards are written in the builder's TFDS file format (`file_format=`, `tfds build --file_format`)
through TFDS's own file adapter for it, fed one record at a time: `tfrecord` (the default, read by
`tfds.load` and `vidvol.load`) or `array_record` (random access: `tfds.data_source`, Grain, PyTorch).
Any other format is refused before anything is written (`check_file_format`).
Which Beam runner a build uses is not decided here: callers above (`vidvol.beam_jobs`) install a
resolver with `set_runner_resolver`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import math
import os
import pickle
import re
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
import cloudpickle
import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from tensorflow_datasets.core import file_adapters

from vidvol.builders import build_lock
from vidvol.builders import build_log
from vidvol.builders import example_bytes
from vidvol.builders import files
from vidvol.builders import integrity
from vidvol.builders import progress
from vidvol.core import artifacts
from vidvol.core import tfds_api

logger = logging.getLogger(__name__)

SKIP_REPORT_NAME = artifacts.SKIP_REPORT_NAME
DEFAULT_MAX_SHARD_SIZE = 256 * 2**20
DEFAULT_MIN_SHARDS = 4
# Errors an example function may raise for a bad input; they become skips, anything else fails.
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, EOFError)
# What a failed write raises: Python's OSError, TensorFlow's OpError (tf.io.gfile, the record writer).
WRITE_ERRORS: tuple[type[BaseException], ...] = (OSError, tf.errors.OpError)


@dataclasses.dataclass(frozen=True)
class Skip:
    """An input that did not become (all or part of) an example, and why."""

    source: str
    reason: str
    split: str = ""
    example: str = ""  # set when the example was still written (e.g. a frame masked out)

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form for the skip report."""
        return dataclasses.asdict(self)


KeyExample = tuple[str, Mapping[str, Any]]
ExampleFn = Callable[[Any], Iterable["KeyExample | Skip"]]
Source = tuple[str, Any]  # (stable source id, picklable record handed to the example function)
WorkerSetup = Callable[[], None]  # run once per Beam worker before its first example (e.g. thread limits)
# (beam_runner, beam_options, number of work items, **facts) -> (runner, options); the facts about the
# build (`num_sources`: inputs planned; `manual_dir`: where the workers read them) let a runner split
# the work (e.g. one Dask partition per shard task), size itself (one in-process worker for a small
# build) or check its workers before anything runs (they import vidvol and can read manual_dir). Each
# fact is passed by keyword, and only to a resolver that accepts it.
RunnerResolver = Callable[..., "tuple[Any, PipelineOptions]"]


def _as_given(runner: Any, options: PipelineOptions | None, num_tasks: int | None = None, **facts: Any) -> tuple[Any, PipelineOptions]:
    """The default resolver: Beam's own choice for the runner and options given."""
    del num_tasks, facts
    return runner, options or PipelineOptions([])


_runner_resolver: RunnerResolver = _as_given


def set_runner_resolver(resolver: RunnerResolver) -> None:
    """Installs the function that turns a build's (beam_runner, beam_options) into what the pipeline runs on."""
    global _runner_resolver
    _runner_resolver = resolver


def resolve_runner(
    runner: Any, options: PipelineOptions | None, num_tasks: int | None = None, **facts: Any
) -> tuple[Any, PipelineOptions]:
    """The (runner, options) a build's `beam_runner`/`beam_options` run with, by the installed resolver."""
    accepted = _accepted_keywords(_runner_resolver)
    given = {k: v for k, v in facts.items() if v is not None and (accepted is None or k in accepted)}
    return _runner_resolver(runner, options, num_tasks, **given)


def _accepted_keywords(resolver: RunnerResolver) -> set[str] | None:
    """The keyword names `resolver` takes (None: any, it has **kwargs)."""
    try:
        params = inspect.signature(resolver).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


class SourceError(RuntimeError):
    """A non-input error while turning one source into examples (its message names the source)."""


def _where(source: Source, split: str) -> str:
    """`[source 'ID' (PATH), split 'train']`: which input an error came from."""
    source_id, record = source
    path = getattr(record, "path", None) or getattr(record, "video", None)  # the file a record reads, if one
    path_part = f" ({path})" if isinstance(path, str) and path and path != source_id else ""
    return f"[source {source_id!r}{path_part}, split {split!r}]"


def naming_source(error: BaseException, source: Source, split: str) -> BaseException:
    """`error` again (same type where it can be rebuilt, else SourceError), its message naming the source.

    Input errors become skips; anything else fails the build, and the user must learn which input
    file did it: the runner shows this message (with the worker's traceback) as the build's error.
    """
    where = _where(source, split)
    try:
        if error.args and isinstance(error.args[0], str):
            again = type(error)(f"{error.args[0]} {where}", *error.args[1:])
            if where in str(again):
                return again
    except Exception:  # pylint: disable=broad-except  (exception types with other constructors)
        pass
    return SourceError(f"{type(error).__name__}: {error} {where}")


def run_example_fn(example_fn: ExampleFn, source: Source, split: str) -> Iterator[KeyExample | Skip]:
    """Runs one source through the example function, turning input errors into skips."""
    source_id, record = source
    try:
        for item in example_fn(record):
            if isinstance(item, Skip):
                yield dataclasses.replace(item, split=split)
            else:
                yield item
    except INPUT_ERRORS as e:
        yield Skip(source=source_id, reason=f"{type(e).__name__}: {e}", split=split)


class _GenerateFn(beam.DoFn):
    """Examples to the main output, skips to the `skips` output."""

    def __init__(self, example_fn: ExampleFn, split: str, worker_setup: Sequence[WorkerSetup] = ()):
        self._example_fn = example_fn
        self._split = split
        self._worker_setup = tuple(worker_setup)

    def setup(self):
        for fn in self._worker_setup:
            fn()

    def process(self, source: Source):
        try:
            for item in run_example_fn(self._example_fn, source, self._split):
                if isinstance(item, Skip):
                    yield beam.pvalue.TaggedOutput("skips", item.as_dict())
                else:
                    yield item
        except Exception as e:  # pylint: disable=broad-except
            raise naming_source(e, source, self._split) from e


class ExamplesFromSources(beam.PTransform):
    """TFDS `_generate_examples` transform: one source per element, `(key, example)` out.

    `worker_setup` functions run once in each Beam worker before its first example (a video
    builder passes `video.single_threaded_opencv`: Beam's workers are the parallelism).
    A builder may return a split with no source, with `empty_reason` saying why: the streaming
    builder leaves it out of the dataset's splits and its summary says why.
    """

    def __init__(
        self, sources: Sequence[Source], example_fn: ExampleFn, *, split: str = "", worker_setup: Sequence[WorkerSetup] = (),
        empty_reason: str = "",
    ):
        super().__init__()
        self.sources = list(sources)
        self.example_fn = example_fn
        self.split = split
        self.worker_setup = tuple(worker_setup)
        # Why a split has no source at all (e.g. "7 subjects; hashing put none in test"), for the build's
        # summary: a split that ends without an example is not registered.
        self.empty_reason = empty_reason
        self.skip_report_path: str | None = None  # set by the builder for the stock TFDS writer

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "Sources" >> beam.Create(self.sources, reshuffle=False)
            | "Distribute" >> beam.Reshuffle()
            | "Examples" >> beam.ParDo(_GenerateFn(self.example_fn, self.split, self.worker_setup)).with_outputs("skips", main="examples")
        )
        if self.skip_report_path:
            _ = (
                outputs.skips
                | "CollectSkips" >> beam.combiners.ToList()
                | "WriteSkips" >> beam.Map(_write_json, path=self.skip_report_path)
            )
        return outputs.examples


def _write_json(obj: Any, path: str) -> None:
    """Writes a JSON document whole (temporary file, then rename) through tf.io.gfile (local, gs://, hdfs://)."""
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True))
    tf.io.gfile.rename(tmp, path, overwrite=True)


def _read_json(path: str) -> Any:
    """Reads a JSON document through tf.io.gfile."""
    with tf.io.gfile.GFile(path, "r") as f:
        return json.loads(f.read())


# The file formats the streaming writer honours, each written by TFDS's own file adapter, which takes an
# iterator of records and writes them as they come (tfrecord: tf.io.TFRecordWriter; array_record:
# ArrayRecordWriter with TFDS's `group_size:1`, one record per chunk, for random access).
STREAMING_FORMATS = (file_adapters.FileFormat.TFRECORD, file_adapters.FileFormat.ARRAY_RECORD)
# Why the other TFDS formats are refused (a flag we do not honour must never write a mislabelled dataset).
_REFUSED_WHY = {
    "parquet": "TFDS's Parquet adapter holds 100 serialized examples at a time in memory (hundreds of MiB "
               "for video or MRI examples), against the streaming writer's one-example bound",
    "riegeli": "TFDS reads Riegeli only through the `riegeli` TensorFlow ops, which are not installed here, "
               "and it offers no random access",
}
# File systems ArrayRecord's C++ writer and reader open (plain files only).
_ARRAY_RECORD_SCHEMES = ("", "file")


def check_file_format(file_format: "str | file_adapters.FileFormat | None", data_dir: "str | os.PathLike | None" = None) -> file_adapters.FileFormat:
    """The TFDS FileFormat a build writes (None: tfrecord); ValueError, before anything is written, for one we cannot honour."""
    fmt = file_adapters.FileFormat.from_value(file_format) if file_format else file_adapters.DEFAULT_FILE_FORMAT
    if fmt not in STREAMING_FORMATS:
        why = _REFUSED_WHY.get(fmt.value, "vidvol's streaming shard writer does not write it")
        raise ValueError(
            f"file_format {fmt.value!r} is not supported by vidvol builds ({why}); use "
            + " or ".join(repr(f.value) for f in STREAMING_FORMATS)
            + " (array_record for random access: tfds.data_source, Grain, PyTorch)"
        )
    if fmt is file_adapters.FileFormat.ARRAY_RECORD and data_dir is not None:
        s = files.scheme(data_dir)
        if s not in _ARRAY_RECORD_SCHEMES:
            raise ValueError(
                f"data_dir {os.fspath(data_dir)}: ArrayRecord files are written and read as local files only (no "
                f"{s}:// in array_record); build into a local data_dir and copy the result to {s}:// afterwards, or "
                "build file_format='tfrecord' there"
            )
    return fmt


# TFDS build options (DownloadConfig fields) the streaming writer does not honour, with why and what to
# use instead: a build that sets one fails before anything is written, rather than ignoring it.
# Honoured: manual_dir, download_mode (reuse / --overwrite), max_examples_per_split, beam_runner,
# beam_options, num_shards, max_shard_size, file_format (see check_file_format). Without effect on what
# is written, so accepted: nondeterministic_order (vidvol's order is deterministic either way),
# compute_stats (TFDS 4.9 computes no statistics), the download-only fields (extract_dir,
# register_checksums, force_checksums_validation, try_download_gcs, verify_ssl,
# override_max_simultaneous_downloads: vidvol's datasets download nothing).
UNHONOURED_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "min_shard_size": (
        lambda v: v != tfds_api.DEFAULT_MIN_SHARD_SIZE,
        "shards are planned before anything is decoded from num_shards or max_shard_size; set one of those",
    ),
    "ignore_duplicates": (
        bool,
        "example keys are source ids, unique by construction; a duplicate is an error in the inputs and "
        "fails the build naming it",
    ),
}


def check_build_options(download_config: Any) -> None:
    """ValueError listing every set TFDS build option in UNHONOURED_OPTIONS, before anything is written."""
    if download_config is None:
        return
    refused = [
        f"{name}={getattr(download_config, name)!r} ({why})"
        for name, (is_set, why) in UNHONOURED_OPTIONS.items()
        if hasattr(download_config, name) and is_set(getattr(download_config, name))
    ]
    if refused:
        raise ValueError(
            "vidvol builds do not honour these TFDS build options, so nothing was built: " + "; ".join(refused)
            + ". Remove them (e.g. from --download_config) and build again."
        )


def write_records(file_format: "str | file_adapters.FileFormat", path: str, records: Iterable[tuple[str, bytes]]) -> None:
    """Writes `(key, serialized example)` pairs to `path` as they come, in `file_format` (TFDS's adapter)."""
    fmt = check_file_format(file_format)
    file_adapters.ADAPTER_FOR_FORMAT[fmt].write_examples(path, records)


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to write: which split, where, and the sources that go in it, in order."""

    split: str
    index: int
    path: str
    sources: tuple[Source, ...]


PLAN_NAME = "shard_plan.pickles"  # in the build's incomplete folder while the pipeline runs


@dataclasses.dataclass(frozen=True)
class ShardRef:
    """A ShardTask as the pipeline carries it: where its sources lie in the build's plan file, not the sources.

    The driver writes every task's sources to one plan file (`write_plan`) and the pipeline's
    elements are these small records, so the pipeline (Beam's runner-API proto, a Dask graph) stays
    small however many sources a build has: a Kinetics-size build (~650k videos, ~1,800 shards)
    does not ship every source record through Beam's and Dask's graph machinery. A worker reads its
    shard's byte range of the plan file (local or gs://, like the shards themselves) and nothing else.
    """

    split: str
    index: int
    path: str
    plan: str
    offset: int
    length: int
    num_sources: int

    def load(self) -> ShardTask:
        with tf.io.gfile.GFile(self.plan, "rb") as f:
            f.seek(self.offset)
            data = f.read(self.length)
        if len(data) != self.length:
            raise OSError(f"{self.plan}: the shard plan is shorter than expected (shard {self.index} of {self.split}); "
                          "was the build's incomplete folder removed while it ran?")
        return ShardTask(self.split, self.index, self.path, tuple(cloudpickle.loads(data)))


def write_plan(tasks: Sequence[ShardTask], path: str) -> list[ShardRef]:
    """Writes every task's sources to the plan file `path` (one pickle per task, back to back); their refs."""
    refs = []
    offset = 0
    with tf.io.gfile.GFile(path, "wb") as f:
        for t in tasks:
            data = cloudpickle.dumps(t.sources, protocol=pickle.HIGHEST_PROTOCOL)
            f.write(data)
            refs.append(ShardRef(t.split, t.index, t.path, path, offset, len(data), len(t.sources)))
            offset += len(data)
    return refs


def shard_pipeline(pipeline: beam.Pipeline, num_shards: int, write: beam.PTransform) -> beam.PCollection:
    """The build's pipeline: shard numbers 0..num_shards-1 spread over the workers, each shard written whole by `write`.

    The elements are plain ints (`write` holds the ShardRefs): decoding them imports nothing, so no
    worker loads TensorFlow in the first stage while another waits for the second, and every worker
    starts writing at the same time (with vidvol classes as elements, the one worker that ran the
    first stage had its imports done ~4 s ahead of the others: on a short build, that start lag was
    most of the writing phase).
    """
    return (
        pipeline
        | "ShardTasks" >> beam.Create(list(range(num_shards)), reshuffle=False)
        | "Distribute" >> beam.Reshuffle()
        | "WriteShards" >> write
    )


def stable_order(sources: Sequence[Source], salt: str) -> list[Source]:
    """Sources in a pseudo-random but reproducible order (mixes classes across shards)."""

    def key(source: Source) -> bytes:
        return hashlib.sha256(f"{salt}/{source[0]}".encode()).digest()

    ids = [s[0] for s in sources]
    dupes = [k for k, n in collections.Counter(ids).items() if n > 1]
    if dupes:
        raise ValueError(f"Duplicate source ids in split {salt!r}: {dupes[:5]}")
    return sorted(sources, key=key)


def num_shards_for(
    num_sources: int,
    example_bytes: int,
    *,
    max_shard_size: int = DEFAULT_MAX_SHARD_SIZE,
    min_shards: int = DEFAULT_MIN_SHARDS,
    num_shards: int | None = None,
) -> int:
    """Shard count: enough to keep shards under max_shard_size, at least min_shards, at most one per source.

    The count is rounded up to a multiple of `min_shards` so that 2 or 4 workers get the same number
    of shards each (a worker writes whole shards; 5 shards on 2 workers leave one idle for a fifth
    of the build). It depends only on the input, never on the machine, so builds are reproducible.
    """
    if num_sources == 0:
        return 0
    if num_shards:
        return max(1, min(num_shards, num_sources))
    by_size = math.ceil(num_sources * max(1, example_bytes) / max(1, max_shard_size))
    wanted = max(by_size, min_shards)
    if min_shards > 1:
        wanted = math.ceil(wanted / min_shards) * min_shards
    return max(1, min(num_sources, wanted))


def plan_shards(split: str, sources: Sequence[Source], num_shards: int, path_fn: Callable[[int, int], str]) -> list[ShardTask]:
    """Cuts a split's sources (in stable order) into contiguous shard tasks."""
    ordered = stable_order(sources, salt=split)
    tasks = []
    for index in range(num_shards):
        lo = index * len(ordered) // num_shards
        hi = (index + 1) * len(ordered) // num_shards
        tasks.append(ShardTask(split, index, path_fn(index, num_shards), tuple(ordered[lo:hi])))
    return tasks


class ShardWriteError(OSError):
    """A worker could not write its shard or its sidecar (disk full, quota, file size limit, permissions).

    The message carries a `VIDVOL_WRITE_FAILURE {json} END` marker, so the driver can turn whatever
    the runner makes of it (the same exception in-process, a worker's traceback text elsewhere)
    into one `BuildWriteError`.
    """


class BuildWriteError(OSError):
    """A build stopped because it could not write to its data_dir; its partial files were removed."""


_FAILURE_MARK = "VIDVOL_WRITE_FAILURE"
_FAILURE_RE = re.compile(_FAILURE_MARK + r" (\{.*?\}) END")
# Messages (Python's strerror, TensorFlow's status text) of the writes that fail for want of room.
_NO_ROOM = re.compile(r"No space left|Disk quota|quota exceeded|File too large|too large|EFBIG|ENOSPC|EDQUOT", re.I)


def write_hint(error_text: str) -> str:
    """What to do about a failed write, from its error text."""
    if re.search(r"File too large|EFBIG", error_text, re.I):
        return ("a file size limit was reached (`ulimit -f`, or the filesystem's largest file): raise it, or write "
                "smaller shards (--max_shard_size_mb)")
    if _NO_ROOM.search(error_text):
        return "the disk or the quota is full: free space, or build into another --data_dir"
    if re.search(r"Permission denied|Read-only", error_text, re.I):
        return "the data_dir is not writable: fix its permissions, or build into another --data_dir"
    return "check the data_dir's filesystem"


def shard_write_error(error: BaseException, path: str) -> ShardWriteError:
    """The error a worker raises when writing `path` failed (its message names the file and the cause)."""
    text = f"{type(error).__name__}: {error}"
    mark = json.dumps({"path": path, "error": text}, sort_keys=True)
    return ShardWriteError(f"Cannot write {path}: {text}; {write_hint(text)} [{_FAILURE_MARK} {mark} END]")


def write_failure(error: BaseException) -> dict[str, str] | None:
    """`{"path", "error"}` of the first shard write failure an exception (or its causes) reports, else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        match = _FAILURE_RE.search(str(error))
        if match:
            try:
                return json.loads(match.group(1))
            except ValueError:
                return None
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """Turns a failed write of `path` into a ShardWriteError (an input's errors are not caught here)."""
    try:
        yield
    except ShardWriteError:
        raise
    except WRITE_ERRORS as e:
        raise shard_write_error(e, path) from e


class WriteShardFn(beam.DoFn):
    """Writes one shard: example by example, encoded and serialized straight into the file."""

    def __init__(
        self, features: tfds.features.FeatureConnector, example_fns: Mapping[str, ExampleFn],
        worker_setup: Sequence[WorkerSetup] = (), file_format: str = file_adapters.DEFAULT_FILE_FORMAT.value,
        refs: Sequence[ShardRef] = (),
    ):
        self._features = features
        self._refs = tuple(refs)  # element i of the pipeline is shard refs[i]
        self._example_fns = dict(example_fns)
        self._worker_setup = tuple(dict.fromkeys(worker_setup))
        self._file_format = check_file_format(file_format).value
        self._serializer = None

    def setup(self):
        for fn in self._worker_setup:
            fn()
        self._serializer = example_bytes.Serializer(self._features)

    def process(self, task: "int | ShardTask | ShardRef"):
        start = time.monotonic()
        if isinstance(task, int):
            task = self._refs[task]
        if isinstance(task, ShardRef):
            task = task.load()
        keys: list[str] = []
        skips: list[dict[str, str]] = []
        sizes: list[int] = []
        # A task may run twice (a runner retrying it after a worker died): each attempt writes its own
        # file and renames it into place whole, then its sidecar, so a rerun never sees half a shard.
        attempt = f"{task.path}.{uuid.uuid4().hex[:12]}.tmp"
        # Progress for the driver's display: inputs done so far, rewritten now and then (progress.py).
        recorder = progress.ProgressRecorder(progress.progress_path(task.path), len(task.sources))
        # A failed write (disk full, quota, file size limit) is a ShardWriteError naming the file, never a skip;
        # an error of the example function (named after its source by `_records`) passes through as it is.
        source_failed: list[bool] = []
        try:
            write_records(self._file_format, attempt, self._records(task, keys, skips, sizes, recorder, source_failed))
        except BaseException as e:
            with contextlib.suppress(Exception):
                if tf.io.gfile.exists(attempt):
                    tf.io.gfile.remove(attempt)
            if not source_failed and not isinstance(e, ShardWriteError) and isinstance(e, WRITE_ERRORS):
                raise shard_write_error(e, task.path) from e
            raise
        with _writing(task.path):
            # The checksum of the bytes on disk, read once before the rename (whatever wrote them).
            digest, file_bytes = integrity.file_digest(attempt)
            tf.io.gfile.rename(attempt, task.path, overwrite=True)
        recorder.write()  # the final count, before the sidecar that marks the shard done
        num_bytes = sum(sizes)
        info = {"split": task.split, "index": task.index, "path": task.path, "keys": keys, "num_bytes": num_bytes,
                "skips": skips, "file_bytes": file_bytes, integrity.DIGEST: digest}
        with _writing(task.path + ".info.json"):
            _write_json(info, task.path + ".info.json")
        logger.info(
            "%s shard %d: %d examples, %d skips, %.1f MiB in %.1f s",
            task.split, task.index, len(keys), len(skips), num_bytes / 2**20, time.monotonic() - start,
        )
        yield task.split, len(keys)

    def _records(self, task: ShardTask, keys: list[str], skips: list[dict[str, str]], sizes: list[int],
                 recorder: progress.ProgressRecorder, source_failed: list[bool]) -> Iterator[tuple[str, bytes]]:
        """The shard's `(key, serialized example)` records, one at a time; keys, skips and sizes noted on the way.

        An error making an example (not writing it) appends to `source_failed` before it propagates.
        """
        example_fn = self._example_fns[task.split]
        for source in task.sources:
            try:
                for item in run_example_fn(example_fn, source, task.split):
                    if isinstance(item, Skip):
                        skips.append(item.as_dict())
                        continue
                    key, example = item
                    # The bytes of TFDS's tf.train.Example with deterministic map order (the same input
                    # gives the same bytes in every process), written in one join (example_bytes).
                    record = self._serializer(example)
                    del example
                    keys.append(str(key))
                    sizes.append(len(record))
                    yield str(key), record
                    del record
            except GeneratorExit:
                raise
            except Exception as e:  # pylint: disable=broad-except  (not an input error: fails the build)
                source_failed.append(True)
                raise naming_source(e, source, task.split) from e
            recorder.source_done(len(keys), sum(1 for s in skips if not s.get("example")))


@dataclasses.dataclass
class SplitResult:
    """What a split's shards hold once written: lengths, bytes, keys and skips (and why it is empty, if it is)."""

    name: str
    shard_paths: list[str]
    shard_lengths: list[int]
    num_bytes: int
    keys: list[str]
    skips: list[dict[str, str]]
    num_sources: int = 0  # inputs planned for the split
    empty_reason: str = ""  # the builder's word on why a split has no input at all
    # Per shard file, as its worker wrote it: file name, examples, bytes on disk, SHA-256 (see `integrity`).
    shard_files: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    def why_empty(self) -> str:
        """Why the split has no example ("" when it has some): the builder's reason, or what its inputs became."""
        if self.num_examples:
            return ""
        if not self.num_sources:
            return self.empty_reason or "no input is listed for it"
        whole = [s for s in self.skips if not s.get("example")]
        if not whole:
            return f"its {self.num_sources} inputs gave no example"
        reasons = collections.Counter(_reason_kind(s["reason"]) for s in whole)
        causes = ", ".join(_counted(n, kind) for kind, n in reasons.most_common())
        every = "every input skipped" if len(whole) >= self.num_sources else f"{len(whole)} of {self.num_sources} inputs skipped"
        return f"{every}: {causes}"


# Skip reasons (`ExceptionName: message`) in plain words, for the summary of an empty split.
_REASON_WORDS = {
    "FileNotFoundError": ("missing file", "missing files"),
    "IsADirectoryError": ("folder instead of a file", "folders instead of files"),
    "PermissionError": ("unreadable file (permissions)", "unreadable files (permissions)"),
    "EOFError": ("truncated file", "truncated files"),
}


def _reason_kind(reason: str) -> str:
    return reason.split(":")[0]


def _counted(n: int, kind: str) -> str:
    one, many = _REASON_WORDS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def collect_split(
    split: str, tasks: Sequence[ShardTask], final_path_fn: Callable[[int, int], str], *, empty_reason: str = ""
) -> SplitResult:
    """Reads the shards' sidecar infos, drops empty shards, renames the rest to their final names."""
    infos = [_read_json(t.path + ".info.json") for t in tasks]
    for t in tasks:
        tf.io.gfile.remove(t.path + ".info.json")
        if tf.io.gfile.exists(progress.progress_path(t.path)):
            tf.io.gfile.remove(progress.progress_path(t.path))
    nonempty = [(t, i) for t, i in zip(tasks, infos) if i["keys"]]
    for t, i in zip(tasks, infos):
        if not i["keys"]:
            tf.io.gfile.remove(t.path)
    paths, lengths, keys, skips, shard_files = [], [], [], [], []
    for new_index, (task, info) in enumerate(nonempty):
        final = final_path_fn(new_index, len(nonempty))
        if final != task.path:
            tf.io.gfile.rename(task.path, final, overwrite=True)
        paths.append(final)
        lengths.append(len(info["keys"]))
        keys.extend(info["keys"])
        shard_files.append(integrity.shard_entry(final, split, len(info["keys"]), info.get("file_bytes"), info.get(integrity.DIGEST)))
    for info in infos:
        skips.extend(info["skips"])
    dupes = [k for k, n in collections.Counter(keys).items() if n > 1]
    if dupes:
        raise ValueError(f"Split {split!r}: duplicate example keys {dupes[:5]}")
    return SplitResult(
        split, paths, lengths, sum(i["num_bytes"] for i in infos), keys, skips,
        num_sources=sum(len(t.sources) for t in tasks), empty_reason=empty_reason, shard_files=shard_files,
    )


def empty_split_line(name: str, split: str, why: str) -> str:
    """The summary line of a split left without an example: `NAME test: empty — WHY; not registered`."""
    return f"{name} {split}: empty — {why}; not registered (loading it lists the splits there are)"


def summary_line(name: str, result: SplitResult) -> str:
    """One line per split: examples, shards, bytes, and skips grouped by reason (or why the split is empty)."""
    whole = [s for s in result.skips if not s.get("example")]
    partial = [s for s in result.skips if s.get("example")]
    if not result.num_examples:
        return empty_split_line(name, result.name, result.why_empty())
    reasons = collections.Counter(_reason_kind(s["reason"]) for s in whole)
    why = ", ".join(f"{n} {r}" for r, n in reasons.most_common())
    line = (
        f"{name} {result.name}: {result.num_examples} examples in {len(result.shard_paths)} shards "
        f"({result.num_bytes / 2**20:.1f} MiB), {len(whole)} inputs skipped"
    )
    if why:
        line += f" ({why})"
    if partial:
        line += f", {len(partial)} parts masked inside written examples"
    return line


def skips_line(results: Sequence[SplitResult], data_dir: str) -> str:
    """`3 inputs skipped: see DIR/skip_report.json` (counts over every split; masked parts too)."""
    skipped = sum(1 for r in results for s in r.skips if not s.get("example"))
    masked = sum(1 for r in results for s in r.skips if s.get("example"))
    path = os.path.join(data_dir, SKIP_REPORT_NAME)
    what = f"{skipped} inputs skipped" + (f", {masked} parts masked" if masked else "")
    return f"{what}: see {path}" if skipped or masked else f"{what} (skip report: {path})"


def build_summary(name: str, results: Sequence[SplitResult], data_dir: str) -> list[str]:
    """What a build ends with: one `summary_line` per split, then the skips and the skip report's path."""
    return [summary_line(name, r) for r in results] + [skips_line(results, data_dir)]


def write_skip_report(path: str, dataset: str, results: Sequence[SplitResult]) -> dict[str, Any]:
    """Writes the machine-readable skip report (always, even when nothing was skipped).

    `empty_splits` maps each split left without an example (and so not registered) to why.
    """
    report = {
        "dataset": dataset,
        "skipped": [s for r in results for s in r.skips],
        "splits": {
            r.name: {
                "examples": r.num_examples,
                "shards": len(r.shard_paths),
                "num_bytes": r.num_bytes,
                "skipped_inputs": sum(1 for s in r.skips if not s.get("example")),
                "masked_parts": sum(1 for s in r.skips if s.get("example")),
            }
            for r in results
        },
        "empty_splits": {r.name: r.why_empty() for r in results if not r.num_examples},
    }
    _write_json(report, path)
    return report


def read_skip_report(data_dir: str) -> dict[str, Any]:
    """Reads the skip report of a prepared dataset directory."""
    return _read_json(os.path.join(os.fspath(data_dir), SKIP_REPORT_NAME))


class StreamingBeamBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """GeneratorBasedBuilder whose Beam workers stream examples straight into shard files.

    The contract with a subclass (what differs from a plain TFDS builder):

    - `_split_generators(dl_manager)` returns `{split name: self._generate_examples(...)}` as
      usual, but `_generate_examples` must return an `ExamplesFromSources(sources, example_fn)`,
      not a generator: the sources are small picklable records, one per input file, and
      `example_fn(record)` yields `(key, example)` pairs or `Skip`s. That is what lets shards be
      planned before anything is decoded; anything else raises TypeError naming the split.
    - `example_fn` raises ValueError/OSError/EOFError for a bad input: it becomes a skip in
      `skip_report.json`; any other exception fails the build.
    - Optionally `_estimated_example_bytes()` (shard sizing) and a `max_shard_size` config field.

    The build honours TFDS's `file_format` (tfrecord or array_record, see `check_file_format`),
    `num_shards`, `max_shard_size` and `max_examples_per_split` download options and runs on the runner the installed resolver picks (see
    `set_runner_resolver`). While it runs, the terminal shows one progress bar per split (from the
    workers' progress records), warnings and errors; everything else goes to a build log next to
    the dataset folder; the per-split summary comes last (see `vidvol.builders.build_log`).
    """

    MIN_SHARDS = DEFAULT_MIN_SHARDS
    _summary_results: Sequence[SplitResult] | None = None
    reused_from: str | None = None  # set when this build waited for a concurrent one and reused its dataset

    def _display_name(self) -> str:
        return f"{self.name}/{self.builder_config.name}" if self.builder_config else self.name

    def download_and_prepare(self, *, download_dir=None, download_config=None, **kwargs):  # pylint: disable=arguments-differ
        """TFDS's download_and_prepare inside a build session (quiet terminal, build log, summary last).

        A dataset that is already prepared (and not being overwritten) is left to TFDS as is. A
        `file_format` (here or the builder's) the streaming writer cannot honour fails first, and so
        does a TFDS build option it ignores (`check_build_options`). Only one build of a config
        writes into a data_dir at a time (`vidvol.builders.build_lock`): a second one waits and
        reuses the first one's dataset (`reused_from` says whose), or stops at once when
        `VIDVOL_BUILD_LOCK=fail`.
        """
        mode = download_config.download_mode if download_config else None
        overwrite = mode is not None and mode.overwrite_dataset
        if self._is_prepared() and not overwrite:
            return super().download_and_prepare(download_dir=download_dir, download_config=download_config, **kwargs)
        check_file_format(kwargs.get("file_format") or self.info.file_format, self.data_dir)
        check_build_options(download_config)
        name = self._display_name()
        self.reused_from = None
        with build_lock.hold(self.data_path, what=name) as lock:
            if lock.waited_for is not None and self._is_prepared() and not overwrite:
                # The build this one waited for prepared the dataset: reuse it, as TFDS reuses a prepared one.
                self.reused_from = build_lock.describe(lock.waited_for, lock.path)
                logger.warning("%s: reusing the dataset prepared by the build it waited for (%s)", name, self.reused_from)
                self.info.read_from_directory(self.data_path)
                return None
            self._prepare_in_session(name, download_dir, download_config, **kwargs)
        return None

    def _is_prepared(self) -> bool:
        return tf.io.gfile.exists(os.path.join(os.fspath(self.data_path), "dataset_info.json"))

    def _prepare_in_session(self, name: str, download_dir, download_config, **kwargs) -> None:
        """TFDS's download_and_prepare with the build log, the quiet terminal, one clear write error, summary last."""
        log_dir = os.fspath(self.data_path.parent)
        with build_log.session(name, log_dir, version=str(self.version)) as session:
            self._summary_results = None
            try:
                super().download_and_prepare(download_dir=download_dir, download_config=download_config, **kwargs)
            except BuildWriteError:
                raise
            except Exception as e:  # pylint: disable=broad-except
                failure = write_failure(e)
                if failure is None and isinstance(e, WRITE_ERRORS) and _NO_ROOM.search(str(e)):
                    failure = {"path": "", "error": f"{type(e).__name__}: {e}"}  # TFDS's own metadata files
                if failure is None:
                    raise
                logger.info("the build's error, as raised: %s", e)  # the whole story stays in the build log
                raise self._write_error(failure) from None
            if self._summary_results is not None:
                session.add_summary(build_summary(name, self._summary_results, os.fspath(self.data_path)))

    def _write_error(self, failure: Mapping[str, str]) -> BuildWriteError:
        """One clear error for a build whose writes failed, once TFDS removed its `incomplete.*` folder."""
        data_dir = artifacts.data_dir_of(self.data_path, self.builder_config is not None)
        path = failure.get("path") or ""
        shard = os.path.basename(path[: -len(".partial")] if path.endswith(".partial") else path)
        what = f"shard {shard}" if ".tfrecord" in shard or path.endswith(".partial") else (shard or "its files")
        # TFDS removed the build's `incomplete.*` folder (every shard, attempt and sidecar in it) on the way out.
        state = ("nothing of this build was kept and the dataset is not prepared"
                 if not tf.io.gfile.exists(os.fspath(self.data_path)) else "its partial files were removed")
        hint = write_hint(failure.get("error", ""))
        return BuildWriteError(
            f"{self._display_name()}: the build could not write to data_dir {data_dir} while writing {what} "
            f"({failure.get('error', '?')}). {hint[0].upper()}{hint[1:]}, then run the build again; {state}."
        )

    def _file_format(self) -> file_adapters.FileFormat:
        """The file format this build writes (the builder's `file_format`, tfrecord by default); checked."""
        return check_file_format(self.info.file_format, self.data_dir)

    def _estimated_example_bytes(self) -> int:
        """Rough serialized size of one example, used to size shards before anything is decoded."""
        return 1 << 20

    def _max_shard_size(self, download_config: tfds.download.DownloadConfig) -> int:
        """Shard size cap: `--max_shard_size_mb` if given, else the config's, else 256 MiB."""
        if download_config.max_shard_size != tfds_api.DEFAULT_MAX_SHARD_SIZE:
            return download_config.max_shard_size
        return getattr(self.builder_config, "max_shard_size", None) or DEFAULT_MAX_SHARD_SIZE

    def _generators(self, dl_manager, download_config) -> dict[str, ExamplesFromSources]:
        """Calls `_split_generators` and checks every split is an `ExamplesFromSources`."""
        generators = self._split_generators(dl_manager)
        for split, gen in generators.items():
            if not isinstance(gen, ExamplesFromSources):
                raise TypeError(
                    f"{self.name}: split {split!r}: _generate_examples must return "
                    f"vidvol.builders.beam_writer.ExamplesFromSources(sources, example_fn), got {type(gen).__name__}"
                )
            gen.split = split
            if download_config.max_examples_per_split:
                gen.sources = stable_order(gen.sources, split)[: download_config.max_examples_per_split]
        return generators

    def _download_and_prepare(self, dl_manager, download_config):  # pytype: disable=signature-mismatch
        if download_config.max_examples_per_split == 0:
            return
        files.check_data_dir(self.data_dir)
        self._file_format()  # before anything is written
        generators = self._generators(dl_manager, download_config)
        templates = {split: tfds_api.filename_template(self, split) for split in generators}
        tasks = self._plan(generators, templates, download_config)
        all_tasks = [t for ts in tasks.values() for t in ts]
        if all_tasks:
            num_sources = sum(len(t.sources) for t in all_tasks)
            runner, options = resolve_runner(
                download_config.beam_runner, download_config.beam_options, len(all_tasks), num_sources=num_sources,
                manual_dir=os.fspath(download_config.manual_dir) if download_config.manual_dir else None,
            )
            self._run_pipeline(all_tasks, generators, runner, options, tasks)
        for leftover in tf.io.gfile.glob(os.path.join(os.fspath(self.data_path), "*.tmp")):
            tf.io.gfile.remove(leftover)  # attempts of tasks that a runner retried elsewhere (a worker died)
        results = []
        for split, template in templates.items():
            final = lambda i, n, t=template: os.fspath(t.sharded_filepath(shard_index=i, num_shards=n))
            results.append(collect_split(split, tasks[split], final, empty_reason=generators[split].empty_reason))
        # A split without an example is not registered: `tfds.load(split=...)` then lists the splits there are.
        filled = [r for r in results if r.num_examples]
        if not filled:
            raise ValueError(self._nothing_built(results))
        self.info.set_splits(
            tfds.core.SplitDict(
                [
                    tfds.core.SplitInfo(
                        name=r.name, shard_lengths=r.shard_lengths, num_bytes=r.num_bytes, filename_template=templates[r.name]
                    )
                    for r in filled
                ]
            )
        )
        # The manual_dir the user gave (recorded for the rebuild command `verify` prints), not TFDS's default.
        manual_dir = tfds_api.given_manual_dir(dl_manager) if download_config.manual_dir else None
        self._report(os.fspath(self.data_path), results, manual_dir)

    def _nothing_built(self, results: Sequence[SplitResult]) -> str:
        """The error of a build in which no split got an example: why, per split, with the first skips."""
        lines = [f"{self._display_name()}: no split has an example, so there is nothing to prepare:"]
        for r in results:
            lines.append(f"  {r.name}: {r.why_empty()}")
            lines.extend(f"    {s['source']}: {s['reason']}" for s in r.skips[:3] if not s.get("example"))
        if not results:
            lines.append("  the builder declared no split")
        return "\n".join(lines)

    def _plan(self, generators, templates, download_config) -> dict[str, list[ShardTask]]:
        """Shard tasks per split, written to `<final name>.partial` until the whole build succeeded."""
        max_shard_size = self._max_shard_size(download_config)
        tasks: dict[str, list[ShardTask]] = {}
        for split, gen in generators.items():
            n = num_shards_for(
                len(gen.sources), self._estimated_example_bytes(),
                max_shard_size=max_shard_size, min_shards=self.MIN_SHARDS, num_shards=download_config.num_shards,
            )
            planned = lambda i, n, t=templates[split]: os.fspath(t.sharded_filepath(shard_index=i, num_shards=n)) + ".partial"
            tasks[split] = plan_shards(split, gen.sources, n, planned)
            logger.info("%s %s: %d sources in %d shards", self.name, split, len(gen.sources), n)
        return tasks

    def _run_pipeline(self, all_tasks, generators, runner, options, tasks_by_split=None) -> None:
        """One Beam pipeline: shard tasks spread over the workers, each written whole by one worker.

        While it runs, a background thread reads the workers' progress records and shows one bar
        (or plain line) per split.
        """
        fns = {split: gen.example_fn for split, gen in generators.items()}
        setup = [fn for gen in generators.values() for fn in gen.worker_setup]
        plan = os.path.join(os.fspath(self.data_dir), PLAN_NAME)
        refs = write_plan(all_tasks, plan)
        pipeline = beam.Pipeline(runner=runner, options=options)
        write = WriteShardFn(self.info.features, fns, setup, self._file_format().value, refs=refs)
        shard_pipeline(pipeline, len(refs), beam.ParDo(write))
        by_split = tasks_by_split or {t.split: [x for x in all_tasks if x.split == t.split] for t in all_tasks}
        shards = {split: [(progress.progress_path(t.path), len(t.sources)) for t in ts] for split, ts in by_split.items()}
        session = build_log.current()
        states = [progress.SplitProgress(split, sum(n for _, n in items)) for split, items in shards.items()]
        display = (session.progress_display(states) if session is not None
                   else progress.LineDisplay(self._display_name(), lambda line: logger.info("%s", line)))
        try:
            with progress.ProgressMonitor(shards, display):
                state = pipeline.run().wait_until_finish()
        finally:
            with contextlib.suppress(tf.errors.NotFoundError):
                tf.io.gfile.remove(plan)
        if state is not None and str(state) != PipelineState.DONE:
            raise RuntimeError(f"{self.name}: Beam pipeline ended in state {state}, not DONE")

    def _report(self, data_dir: str, results: Sequence[SplitResult], manual_dir: str | None = None) -> None:
        """Writes the skip report and the shard list (`shards.json`) next to the shards; the summary lines are
        shown when the build ends.

        Inside a build session (`download_and_prepare`) they are the last lines the user sees,
        with the skip report's final path; called otherwise, they are logged at WARNING.
        """
        report_path = os.path.join(data_dir, SKIP_REPORT_NAME)
        with _writing(report_path):
            write_skip_report(report_path, self.name, results)
        shards_path = os.path.join(data_dir, artifacts.SHARDS_NAME)
        with _writing(shards_path):
            integrity.write_shards_file(
                shards_path, dataset=self._display_name(), version=str(self.version), manual_dir=manual_dir,
                entries=[e for r in results for e in r.shard_files],
            )
        if build_log.current() is not None:
            self._summary_results = list(results)
        else:
            build_log.summary(build_summary(self._display_name(), results, data_dir))
