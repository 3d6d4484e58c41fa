"""Study: TFDS's stock Beam writer for vidvol's builders, to compare build memory with the streaming writer."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import tensorflow as tf
import tensorflow_datasets as tfds

import vidvol  # noqa: F401  (registers the datasets)
from vidvol.builders import dataset_builder
from vidvol.builders.writer import results as writer_results
from vidvol.builders.writer import runner as writer_runner
from vidvol.builders.writer import skip_report

logger = logging.getLogger(__name__)


def _skip_file(data_dir: str, split: str) -> str:
    """Where a split's transform writes the skips it collected (removed once the report is written)."""
    return os.path.join(data_dir, f"skips-{split}.json")


def prepare_with_tfds_writer(builder: dataset_builder.StreamingBeamBuilder, dl_manager: Any,
                             download_config: tfds.download.DownloadConfig) -> None:
    """Prepares `builder` with TFDS's stock Beam writer over its own transforms; writes its skip report."""
    data_dir = os.fspath(builder.data_path)
    generators = builder._generators(dl_manager, download_config)
    for split, gen in generators.items():
        gen.skip_report_path = _skip_file(data_dir, split)
    builder._split_generators = lambda *_args, **_kwargs: generators
    try:
        tfds.core.GeneratorBasedBuilder._download_and_prepare(builder, dl_manager, download_config)
    finally:
        del builder._split_generators  # back to the class's method
    results = []
    for split, info in builder.info.splits.items():
        with tf.io.gfile.GFile(_skip_file(data_dir, split), "r") as f:
            skips = json.loads(f.read())
        tf.io.gfile.remove(_skip_file(data_dir, split))
        paths = [os.fspath(p) for p in info.filepaths]
        results.append(writer_results.SplitResult(split, paths, list(info.shard_lengths), int(info.num_bytes), [], skips))
    skip_report.write_skip_report(os.path.join(data_dir, skip_report.SKIP_REPORT_NAME), builder.name, results)
    name = f"{builder.name}/{builder.builder_config.name}" if builder.builder_config else builder.name
    for result in results:
        logger.warning("%s", writer_results.summary_line(name, result))


def resolve_runner(runner: Any, options: Any) -> tuple[Any, Any]:
    """The (runner, options) vidvol's builders run a build's `beam_runner`/`beam_options` with."""
    return writer_runner.resolve_runner(runner, options)


def _download_and_prepare(self: dataset_builder.StreamingBeamBuilder, dl_manager: Any,
                          download_config: tfds.download.DownloadConfig) -> None:
    """Stands in for `StreamingBeamBuilder._download_and_prepare`: same runner, TFDS's stock writer."""
    if download_config.max_examples_per_split == 0:
        return
    runner, options = resolve_runner(download_config.beam_runner, download_config.beam_options)
    prepare_with_tfds_writer(self, dl_manager,
                             dataclasses.replace(download_config, beam_runner=runner, beam_options=options))


def use_tfds_writer() -> None:
    """Makes every vidvol builder in this process write with TFDS's stock writer."""
    dataset_builder.StreamingBeamBuilder._download_and_prepare = _download_and_prepare


def main() -> None:
    """`tfds` with the stock writer: TFDS's CLI (`launch_cli`, as `-m ...cli.main` runs it) on sys.argv."""
    from tensorflow_datasets.scripts.cli import main as tfds_cli

    use_tfds_writer()
    tfds_cli.launch_cli()


if __name__ == "__main__":
    main()
