"""`ExamplesFromSources`: the `_generate_examples` transform of every vidvol builder (one source in, examples out).

It subclasses Beam's `PTransform`, so it lives apart from `dataset_builder`: registering the datasets imports
that module, not Beam. `vidvol.builders.dataset_builder.ExamplesFromSources` names this class (imported on first use).
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from vidvol.builders.example_io import ExampleFn, Skip, Source, WorkerSetup, naming_source, run_example_fn
from vidvol.builders.writer import json_files
from vidvol.core import redact


class _GenerateFn(beam.DoFn):
    """Examples to the main output, skips to the `skips` output."""

    def __init__(self, example_fn: ExampleFn, split: str, worker_setup: Sequence[WorkerSetup] = ()):
        self._example_fn = example_fn
        self._split = split
        self._worker_setup = tuple(worker_setup)

    def setup(self):
        redact.install_log_redaction()  # this worker's log lines name inputs, which may be URLs with credentials
        for fn in self._worker_setup:
            fn()

    def process(self, source: Source):
        try:
            for item in run_example_fn(self._example_fn, source, self._split):
                if isinstance(item, Skip):
                    yield beam.pvalue.TaggedOutput("skips", item.as_dict())
                else:
                    yield item
        except Exception as e:
            raise naming_source(e, source, self._split) from e


class ExamplesFromSources(beam.PTransform):
    """TFDS `_generate_examples` transform: one source per element, `(key, example)` out.

    `worker_setup` functions run once in each Beam worker before its first example (a video
    builder passes `video.single_threaded_opencv`: Beam's workers are the parallelism).
    A builder may return a split with no source, with `empty_reason` saying why: the streaming
    builder leaves it out of the dataset's splits and its summary says why.

    Being a regular TFDS `_generate_examples` PTransform, it lets the same builders be written by
    TFDS's stock writer (the benchmark compares the two).
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
        tagged = (
            pbegin
            | "Sources" >> beam.Create(self.sources, reshuffle=False)
            | "Distribute" >> beam.Reshuffle()
            | "Examples" >> beam.ParDo(_GenerateFn(self.example_fn, self.split, self.worker_setup)).with_outputs("skips", main="examples")
        )
        if self.skip_report_path:
            _ = (
                tagged.skips
                | "CollectSkips" >> beam.combiners.ToList()
                | "WriteSkips" >> beam.Map(json_files.write_json, path=self.skip_report_path)
            )
        return tagged.examples
