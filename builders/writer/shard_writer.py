"""The write step: each Beam worker writes whole shards, one example at a time straight into the file.

The pipeline is shard numbers spread over the workers (`shard_pipeline`); `WriteShardFn` turns
one into its shard, so a worker holds one decoded example plus the record writer's small buffer
whatever the dataset's size. Each attempt is renamed into place whole, then its sidecar
(`<shard>.info.json`: keys, skips, sizes, checksum) marks it done. A failed write (disk full,
quota, file size limit) is a `ShardWriteError` naming the file, which the driver turns into one
`BuildWriteError`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

import apache_beam as beam
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import file_adapters

from vidvol.builders.example_io import ExampleFn, Skip, WorkerSetup, naming_source, run_example_fn
from vidvol.builders.writer import example_bytes
from vidvol.builders.writer import json_files, outputs
from vidvol.builders.writer import progress
from vidvol.builders.writer import shards_file
from vidvol.builders.writer.formats import check_file_format, write_records
from vidvol.builders.writer.plan import ShardRef, ShardTask
from vidvol.core import redact, store

logger = logging.getLogger(__name__)

# What a failed write raises: Python's OSError, TensorFlow's OpError (tf.io.gfile, the record writer).
WRITE_ERRORS: tuple[type[BaseException], ...] = (OSError, tf.errors.OpError)


def shard_pipeline(pipeline: beam.Pipeline, num_shards: int, write: beam.PTransform) -> beam.PCollection:
    """The build's pipeline: shard numbers 0..num_shards-1 spread over the workers, each shard written whole by `write`.

    The elements are plain ints (`write` holds the ShardRefs): decoding them imports nothing, so no
    worker loads TensorFlow in the first stage while another waits for the second, and every worker
    starts writing at the same time (with vidvol classes as elements, the one worker that ran the
    first stage finished its imports well ahead of the others, and on a short build that start lag
    was most of the writing phase).
    """
    return (
        pipeline
        | "ShardTasks" >> beam.Create(list(range(num_shards)), reshuffle=False)
        | "Distribute" >> beam.Reshuffle()
        | "WriteShards" >> write
    )

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
NO_ROOM = re.compile(r"No space left|Disk quota|quota exceeded|File too large|too large|EFBIG|ENOSPC|EDQUOT", re.I)


def write_hint(error_text: str) -> str:
    """What to do about a failed write, from its error text."""
    if re.search(r"File too large|EFBIG", error_text, re.I):
        return ("a file size limit was reached (`ulimit -f`, or the filesystem's largest file): raise it, or write "
                "smaller shards (--max_shard_size_mb)")
    if NO_ROOM.search(error_text):
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
def writing(path: str) -> Iterator[None]:
    """Turns a failed write of `path` into a ShardWriteError (an input's errors are not caught here)."""
    try:
        yield
    except ShardWriteError:
        raise
    except WRITE_ERRORS as e:
        raise shard_write_error(e, path) from e


class WriteShardFn(beam.DoFn):
    """Writes one shard: example by example, encoded and serialized straight into the file.

    It reads the shard's sources from the plan file, runs each through the example function,
    serializes every example as it comes (`example_bytes`) and feeds the records to TFDS's file
    adapter, so a worker holds one decoded example plus the record writer's small buffer whatever
    the dataset's size (TFDS's stock Beam writer instead groups every serialized example of a shard,
    and on the direct runner of the whole split, in memory before writing).
    """

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
        redact.install_log_redaction()  # this worker's log lines name inputs, which may be URLs with credentials
        for fn in self._worker_setup:
            fn()
        self._serializer = example_bytes.Serializer(self._features)

    def teardown(self):
        # Example functions that keep something between sources (a decoding child process) let go of it.
        for fn in self._example_fns.values():
            close = getattr(fn, "close", None)
            if callable(close):
                close()

    def process(self, task: int | ShardTask | ShardRef):
        start = time.monotonic()
        if isinstance(task, int):
            task = self._refs[task]
        if isinstance(task, ShardRef):
            task = task.load()
        keys: list[str] = []
        skips: list[dict[str, str]] = []
        sizes: list[int] = []
        per_source: list[list] = []  # [source id, examples, record bytes], in write order (a later grow reads it)
        # A task may run twice (a runner retrying it after a worker died): each attempt writes its own
        # file and renames it into place whole, then its sidecar, so a rerun never sees half a shard.
        # A shard bound for a bucket is written to this worker's local scratch and uploaded when complete.
        with contextlib.ExitStack() as scratch:
            attempt = (scratch.enter_context(outputs.scratch_file(task.path)) if outputs.is_bucket(task.path)
                       else f"{task.path}.{uuid.uuid4().hex[:12]}.tmp")
            digest, file_bytes, recorder = self._write_attempt(task, attempt, keys, skips, sizes, per_source)
        recorder.write()  # the final count, before the sidecar that marks the shard done
        num_bytes = sum(sizes)
        info = {"split": task.split, "index": task.index, "path": task.path, "keys": keys, "num_bytes": num_bytes,
                "skips": skips, "file_bytes": file_bytes, shards_file.DIGEST: digest, "sources": per_source}
        with writing(task.path + ".info.json"):
            json_files.write_json(info, task.path + ".info.json")
        logger.info(
            "%s shard %d: %d examples, %d skips, %.1f MiB in %.1f s",
            task.split, task.index, len(keys), len(skips), num_bytes / 2**20, time.monotonic() - start,
        )
        yield task.split, len(keys)

    def _write_attempt(self, task: ShardTask, attempt: str, keys: list[str], skips: list[dict[str, str]],
                       sizes: list[int], per_source: list[list] | None = None) -> tuple[str, int, progress.ProgressRecorder]:
        """Writes the shard to `attempt`, then puts it in place whole (a rename, or an upload to a bucket).

        Returns:
          The shard's digest, its size in bytes, and its progress recorder.
        """
        # Progress for the driver's display: inputs done so far, rewritten now and then (progress.py).
        recorder = progress.ProgressRecorder(progress.progress_path(task.path), len(task.sources))
        # A failed write (disk full, quota, file size limit) is a ShardWriteError naming the file, never a skip;
        # an error of the example function (named after its source by `_records`) passes through as it is.
        source_failed: list[bool] = []
        try:
            write_records(self._file_format, attempt,
                          self._records(task, keys, skips, sizes, recorder, source_failed, per_source))
        except BaseException as e:
            with contextlib.suppress(Exception):
                if tf.io.gfile.exists(attempt):
                    tf.io.gfile.remove(attempt)
            if not source_failed and not isinstance(e, ShardWriteError) and isinstance(e, WRITE_ERRORS):
                raise shard_write_error(e, task.path) from e
            raise
        with writing(task.path):
            # The checksum of the bytes on disk, read once before they move (whatever wrote them).
            digest, file_bytes = shards_file.file_digest(attempt)
            if outputs.is_bucket(task.path):
                store.upload(attempt, task.path)  # the object appears only once the upload completes
            else:
                tf.io.gfile.rename(attempt, task.path, overwrite=True)
        return digest, file_bytes, recorder

    def _records(self, task: ShardTask, keys: list[str], skips: list[dict[str, str]], sizes: list[int],
                 recorder: progress.ProgressRecorder, source_failed: list[bool],
                 per_source: list[list] | None = None) -> Iterator[tuple[str, bytes]]:
        """The shard's `(key, serialized example)` records, one at a time; keys, skips and sizes noted on the way
        (and per source, in `per_source`, its id, example count and record bytes).

        An error making an example (not writing it) appends to `source_failed` before it propagates.
        """
        example_fn = self._example_fns[task.split]
        for source in task.sources:
            first, bytes_before = len(keys), sum(sizes)
            try:
                for item in run_example_fn(example_fn, source, task.split):
                    if isinstance(item, Skip):
                        skips.append(item.as_dict())
                        continue
                    key, example = item
                    # The bytes of TFDS's tf.train.Example with deterministic map order (the same input
                    # gives the same bytes in every process), written in one join (example_bytes).
                    try:
                        record = self._serializer(example)
                    except MemoryError:  # this example does not fit once serialized: its skip, not a failed build
                        record = None
                    del example
                    if record is None:
                        skips.append(Skip(
                            source=source[0], split=task.split,
                            reason=f"MemoryError: its example {key!r} is too large to serialize in this worker's memory",
                        ).as_dict())
                        continue
                    keys.append(str(key))
                    sizes.append(len(record))
                    yield str(key), record
                    del record
            except GeneratorExit:
                raise
            except Exception as e:  # not an input error: fails the build
                source_failed.append(True)
                raise naming_source(e, source, task.split) from e
            if per_source is not None:
                per_source.append([str(source[0]), len(keys) - first, sum(sizes) - bytes_before])
            recorder.source_done(len(keys), sum(1 for s in skips if not s.get("example")))
