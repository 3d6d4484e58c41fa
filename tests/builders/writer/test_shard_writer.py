"""The write step's failures: a worker's write error reaches the driver from its message, with what to do; a
MemoryError making or serializing one source's example is that source's skip."""

import numpy as np
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.builders import dataset_builder
from vidvol.builders.writer import shard_writer
from vidvol.builders.writer import skip_report


def test_a_workers_write_failure_reaches_the_driver_from_its_message():
    error = shard_writer.shard_write_error(OSError(27, "File too large"), "/d/ds/incomplete.X_1.0.0/ds-train.tfrecord-00001-of-00004.partial")
    assert isinstance(error, OSError) and "Cannot write /d/ds/incomplete.X_1.0.0/ds-train" in str(error)
    # What a multi-process runner hands the driver: the worker's traceback as text, inside other errors.
    wrapped = RuntimeError(f"Pipeline failed: Traceback (most recent call last):\n  ...\n{type(error).__name__}: {error} [while running 'WriteShards']")
    try:
        try:
            raise wrapped
        except RuntimeError as e:
            raise KeyError("unrelated") from e
    except KeyError as outer:
        failure = shard_writer.write_failure(outer)
    assert failure == {"path": "/d/ds/incomplete.X_1.0.0/ds-train.tfrecord-00001-of-00004.partial",
                       "error": "OSError: [Errno 27] File too large"}
    assert shard_writer.write_failure(ValueError("no marker")) is None
    assert "file size limit" in shard_writer.write_hint(failure["error"])
    assert "disk or the quota is full" in shard_writer.write_hint("ResourceExhaustedError: /x; No space left on device")
    assert "disk or the quota is full" in shard_writer.write_hint("OSError: [Errno 122] Disk quota exceeded")
    assert "not writable" in shard_writer.write_hint("PermissionDeniedError: /x; Permission denied")


# ----------------------------------------------------------------------------------------------
# MemoryError is an input's skip, never a failed write


def _sized_examples(record):
    """`big` allocates nothing itself: a 1 PiB read-only view, which serializing cannot copy (a real MemoryError)."""
    name, memory = record
    if memory == "decode":
        np.zeros((2**40, 2**20), np.uint8)  # the example function itself runs out of memory
    x = np.broadcast_to(np.uint8(7), (2**50,)) if memory == "serialize" else np.full((4,), 7, np.uint8)
    yield name, {"x": x, "name": name}


class SizedBuilder(dataset_builder.StreamingBeamBuilder, skip_registration=True):
    name = "vidvol_toy_sized"
    VERSION = tfds.core.Version("1.0.0")
    MIN_SHARDS = 1

    def _info(self):
        x = tfds.features.Tensor(shape=(None,), dtype=np.uint8, encoding=tfds.features.Encoding.BYTES)
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"x": x, "name": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        records = [("a", ""), ("huge", "serialize"), ("b", ""), ("greedy", "decode")]
        return {"train": self._generate_examples([(name, (name, memory)) for name, memory in records])}

    def _generate_examples(self, sources):
        return dataset_builder.ExamplesFromSources(sources, _sized_examples)


def test_memory_errors_decoding_or_serializing_one_source_are_its_skips(tmp_path):
    builder = SizedBuilder(data_dir=str(tmp_path))
    opts = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(beam_options=opts, num_shards=1))
    assert sorted(ex["name"].decode() for ex in tfds.as_numpy(builder.as_dataset(split="train"))) == ["a", "b"]
    skips = {s["source"]: s["reason"] for s in skip_report.read_skip_report(builder.data_dir)["skipped"]}
    assert skips["huge"] == "MemoryError: its example 'huge' is too large to serialize in this worker's memory"
    assert skips["greedy"].startswith("MemoryError: Unable to allocate 1.00 EiB")
