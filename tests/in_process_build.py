"""Builds a dataset config in the test process with the project's Beam writer (one in-memory worker)."""

from __future__ import annotations

import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions


def build(builder_cls, config: str, manual_dir, data_dir, num_shards: int | None = None):
    """Builds one config of `builder_cls` from `manual_dir` into `data_dir` and returns the prepared builder."""
    builder = builder_cls(data_dir=str(data_dir), config=config)
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(
            manual_dir=str(manual_dir), beam_options=options, num_shards=num_shards
        )
    )
    return builder
