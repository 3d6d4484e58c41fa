"""The builder base every vidvol dataset stands on: `StreamingBeamBuilder`, and the `ExamplesFromSources` contract.

A builder declares, per split, a list of small picklable *sources* (a path and a label, an
experiment's frame list, ...) and a picklable *example function* that turns one source into
`(key, example)` pairs or `Skip` records (`vidvol.builders.example_io`); `StreamingBeamBuilder`
writes them (its docstring says how). Which Beam runner a build uses is not decided here: callers
above (`vidvol.beam_jobs`) install a resolver with `vidvol.builders.writer.runner.set_runner_resolver`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tensorflow_datasets.core.utils.lazy_imports_utils import apache_beam as beam  # imported on first use
from tensorflow_datasets.core.utils.lazy_imports_utils import tensorflow as tf  # imported on first use
import tensorflow_datasets as tfds
from tensorflow_datasets.core import file_adapters

from vidvol.builders.writer import bucket as bucket_target
from vidvol.builders.writer import build_lock, bucket_state, lease
from vidvol.builders.writer import build_record
from vidvol.builders.writer import build_log
from vidvol.builders.writer import grow as grow_lib
from vidvol.builders.writer import outputs
from vidvol.builders.writer import progress
from vidvol.builders.writer import resume as resume_lib
from vidvol.builders.writer import shards_file
from vidvol.builders.writer import sources_manifest
from vidvol.builders.writer.formats import check_build_options, check_data_dir, check_file_format
from vidvol.builders.writer.plan import DEFAULT_MAX_SHARD_SIZE, DEFAULT_MIN_SHARDS, PLAN_NAME, ShardTask
from vidvol.builders.writer.plan import num_shards_for, plan_shards, stable_order, write_plan
from vidvol.builders.writer.results import SplitResult, build_summary, collect_split
from vidvol.builders.writer.runner import resolve_runner
from vidvol.builders.writer.skip_report import SKIP_REPORT_NAME, write_skip_report
from vidvol.core import artifacts, dataset_copy
from vidvol.core import redact, store, system
from vidvol.core import tfds_api
from vidvol.core.version import VERSION as VIDVOL_VERSION

if TYPE_CHECKING:
    from vidvol.builders.examples_from_sources import ExamplesFromSources
    from vidvol.builders.writer.shard_writer import BuildWriteError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ResumeReport:
    """What a build kept of the shards dead builds of its config left: counts, and where they came from."""

    kept: int  # shards moved from dead builds' folders, not built again
    total: int  # shards planned
    folders: list[str]  # the dead builds' folders they came from (removed once moved)
    damaged: list[str] = dataclasses.field(default_factory=list)  # shards found there but rebuilt, with why
    changed: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # folder not resumed -> what changed

    @property
    def to_build(self) -> int:
        return self.total - self.kept

    def line(self) -> str:
        """`resuming: 37 of 52 shards kept, 15 to build`."""
        return f"resuming: {self.kept} of {self.total} shards kept, {self.to_build} to build"


def _interrupter():
    """What the build lock's heartbeat calls when it finds the lock lost: a SIGINT to this thread when it is the
    main thread (its blocking waits end, KeyboardInterrupt, which the build turns into BuildLockLostError), so
    that a build stops at once, not hours later at publish time; None elsewhere (the check before publishing
    still stops it)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None  # someone else's SIGINT handler: do not surprise it
    ident = threading.main_thread().ident
    return lambda: signal.pthread_kill(ident, signal.SIGINT)


class StreamingBeamBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """GeneratorBasedBuilder whose Beam workers stream examples straight into shard files.

    The contract with a subclass (what differs from a plain TFDS builder):

    - `_split_generators(dl_manager)` returns `{split name: self._generate_examples(...)}` as
      usual, but `_generate_examples` must return an `ExamplesFromSources(sources, example_fn)`,
      not a generator: the sources are small picklable records, one per input file, and
      `example_fn(record)` yields `(key, example)` pairs or `Skip`s. That is what lets shards be
      planned before anything is decoded; anything else raises TypeError naming the split.
    - `example_fn` raises ValueError/OSError/EOFError for a bad input: it becomes a skip in
      `skip_report.json`, and so do MemoryError and what a decoding library raises
      (`example_io.is_input_error`); any other exception fails the build. Wrapped in
      `isolation.InChild`, it runs in a child process, so a decoder crash is a skip too.
    - Optionally `_estimated_example_bytes()` (shard sizing) and a `max_shard_size` config field.

    The build honours TFDS's `file_format` (tfrecord or array_record, see `check_file_format`),
    `num_shards`, `max_shard_size` and `max_examples_per_split` download options and runs on the runner the installed resolver picks (see
    `set_runner_resolver`). While it runs, the terminal shows one progress bar per split (from the
    workers' progress records), warnings and errors; everything else goes to a build log next to
    the dataset folder; the per-split summary comes last (see `vidvol.builders.writer.build_log`).

    How a build runs: it plans shards up front (`vidvol.builders.writer.plan`) and runs one Beam
    pipeline in which each worker writes whole shards, one example at a time
    (`vidvol.builders.writer.shard_writer`), in the builder's TFDS file format
    (`vidvol.builders.writer.formats`); it collects the splits, writes the skip report and the shard
    list, and ends the build with its summary.
    """

    MIN_SHARDS = DEFAULT_MIN_SHARDS
    _summary_results: Sequence[SplitResult] | None = None
    reused_from: str | None = None  # set when this build waited for a concurrent one and reused its dataset
    _build_lock: build_lock.BuildLock | lease.BucketLease | None = None  # held while download_and_prepare builds
    # A bucket data_dir (`python -m vidvol build --data_dir s3://...`): the builder is rooted at the target's local
    # staging folder, the workers write the shards to the bucket, and the finished dataset is published there.
    bucket: bucket_target.BucketTarget | None = None
    _remote_incomplete: str | None = None
    # Resuming a dead build of this config (`vidvol.builders.writer.resume`): None leaves it to VIDVOL_RESUME (on
    # by default) and VIDVOL_HASH_INPUTS (off); `python -m vidvol.beam_jobs.build --no_resume/--hash_inputs` set them.
    resume: bool | None = None
    hash_inputs: bool | None = None
    resumed: ResumeReport | None = None  # what the last build kept of dead builds' shards
    # Growing a prepared dataset whose manual_dir gained, changed or lost sources (`vidvol.builders.writer.grow`):
    # None leaves it to VIDVOL_GROW (on by default); False stops such a build with StaleDatasetError (--no_grow).
    grow: bool | None = None
    _grow_from: grow_lib.GrowFrom | None = None  # on the builder building a grow beside the prepared dataset
    _checked: tuple[tuple, grow_lib.GrowFrom | None] | None = None  # check_up_to_date's last (manual_dir...), answer
    _published = _grow_line = _log_dir = None  # where that grow is published, its summary line, its build log's folder
    _shard_files: set[str] | None = None  # the shard files this builder's build wrote into its manifest

    def _out(self, path: str) -> str:
        """Where a worker writes a file of the build folder: the path itself, or its URL in the bucket."""
        return self.bucket.remote(path) if self.bucket is not None else path

    def _display_name(self) -> str:
        return f"{self.name}/{self.builder_config.name}" if self.builder_config else self.name

    def download_and_prepare(self, *, download_dir=None, download_config=None, **kwargs):
        """TFDS's download_and_prepare inside a build session (quiet terminal, build log, summary last).

        A dataset that is already prepared (and not being overwritten) is left to TFDS as is. A
        `file_format` (here or the builder's) the streaming writer cannot honour fails first, and so
        does a TFDS build option it ignores (`check_build_options`). Only one build of a config
        writes into a data_dir at a time (`vidvol.builders.writer.build_lock`): a second one waits and
        reuses the first one's dataset (`reused_from` says whose), or stops at once when
        `VIDVOL_BUILD_LOCK=fail`.
        """
        mode = download_config.download_mode if download_config else None
        overwrite = mode is not None and mode.overwrite_dataset
        in_bucket = self.bucket is not None and self.bucket.is_published(os.fspath(self.data_path))
        if (self._is_prepared() or in_bucket) and not overwrite:
            grow = self.check_up_to_date(download_config, download_dir)  # a build given a manual_dir: never stale
            if grow is not None or in_bucket:  # sources added, changed or removed: only those are decoded
                return grow and grow_lib.run(self, grow, download_dir, download_config, **kwargs)
            return super().download_and_prepare(download_dir=download_dir, download_config=download_config, **kwargs)
        try:
            return self._prepare_locked(overwrite, download_dir, download_config, **kwargs)
        except BaseException as e:
            redact.exception(e)  # in place: whoever shows it (a traceback, a CLI, a notebook) shows no URL secret
            raise

    def _prepare_locked(self, overwrite: bool, download_dir, download_config, **kwargs) -> None:
        """The build under the config's build lock (or the reuse of what the build it waited for prepared)."""
        check_file_format(kwargs.get("file_format") or self.info.file_format, self.data_dir)
        check_build_options(download_config)
        name = self._display_name()
        self.reused_from = None
        # A bucket build's lock is a lease in the bucket (`bucket_state`): any host may finish what a dead driver left.
        with bucket_state.hold(self.data_path, what=name, target=self.bucket) as lock:
            self._build_lock = lock
            if lock.waited_for is not None and self._waited_for_prepared() and not overwrite:
                # The build this one waited for prepared the dataset: reuse it, as TFDS reuses a prepared one.
                self.reused_from = (lease.describe(lock.waited_for, lock.path) if isinstance(lock, lease.BucketLease)
                                    else build_lock.describe(lock.waited_for, lock.path))
                logger.warning("%s: reusing the dataset prepared by the build it waited for (%s)", name, self.reused_from)
                self.info.read_from_directory(self.data_path)
                return None
            lock.on_lost = _interrupter()
            try:
                try:
                    self._prepare_in_session(name, download_dir, download_config, **kwargs)
                except BaseException as e:
                    # The heartbeat's SIGINT (a KeyboardInterrupt, which Beam may wrap in a RuntimeError), or any
                    # error after the lock was lost: the lost lock is what stopped this build.
                    lock.stop_interrupts()
                    if lock.lost_to is None or isinstance(e, build_lock.BuildLockLostError):
                        raise
                    lock.check_held()  # the BuildLockLostError naming who has the lock, or why nobody does
                    raise
                finally:
                    lock.stop_interrupts()
            except BaseException as e:
                if self._remote_incomplete is not None and not isinstance(e, bucket_target.PublishConflictError):
                    with contextlib.suppress(Exception):  # the failed build's shards in the bucket go with it
                        store.remove_tree(self._remote_incomplete)
                raise
            finally:
                self._build_lock = None
        return None

    def _is_prepared(self) -> bool:
        return tf.io.gfile.exists(os.path.join(os.fspath(self.data_path), "dataset_info.json"))

    def _compare_sources(self, download_config, download_dir=None):
        """How the manual_dir's sources differ from those the prepared dataset was built from.

        The sources are planned again (files listed, lists and CSVs read; nothing decoded) and compared with
        the dataset's `sources.json` (`vidvol.builders.writer.sources_manifest`).

        Returns:
          (the prepared dataset's manifest, the changes, the planning: `GrowFrom.planned`), or None when the
          dataset has no manifest (built by vidvol 0.2.0 or earlier).
        """
        old = sources_manifest.read(self._out(os.fspath(self.data_path)))
        if old is None:
            return None
        dl_manager = self._make_download_manager(download_dir=download_dir, download_config=download_config)
        generators = self._generators(dl_manager, download_config)
        content = old.get("inputs") == "content"
        manual_dir = tfds_api.given_manual_dir(dl_manager)
        new = sources_manifest.document({split: g.sources for split, g in generators.items()}, manual_dir, content=content)
        return old, sources_manifest.compare(old, new), (grow_lib.plan_key(manual_dir, download_config, content), new)

    def check_up_to_date(self, download_config, download_dir=None) -> grow_lib.GrowFrom | None:
        """Compares a build's manual_dir with the sources the prepared dataset was built from.

        Returns:
          None when up to date (or nothing to compare with); else what a grow starts from (`writer.grow`).

        Raises:
          StaleDatasetError: sources changed and the dataset is not grown (`grow_lib.why_not` says why).
        """
        if download_config is None or not download_config.manual_dir:
            return None  # tfds.load of a prepared dataset: no manual_dir to compare with
        key = (os.fspath(download_config.manual_dir), download_dir and os.fspath(download_dir))
        if self._checked is not None and self._checked[0] == key:
            return self._checked[1]  # `python -m vidvol build` checked first with this builder: not planned twice
        grow = self._check_up_to_date(download_config, download_dir)
        self._checked = (key, grow)
        return grow

    def _check_up_to_date(self, download_config, download_dir=None) -> grow_lib.GrowFrom | None:
        name, where = self._display_name(), redact.url(self._out(os.fspath(self.data_path)))
        manual_dir = redact.url(os.fspath(download_config.manual_dir))
        compared = self._compare_sources(download_config, download_dir)
        old, changes, planned = compared if compared is not None else (None, None, None)
        if changes is None:
            logger.warning("%s in %s has no sources.json (built by vidvol 0.2.0 or earlier), so whether %s still "
                           "holds what it was built from cannot be told; --overwrite rebuilds it", name, where, manual_dir)
            return None
        if not changes.any:
            logger.info("%s in %s is up to date with %s (%s sources)", name, where, manual_dir, changes.counts())
            return None
        if not (why := grow_lib.why_not(self, old)):
            return grow_lib.GrowFrom(self._out(os.fspath(self.data_path)), old, changes, planned)
        raise sources_manifest.StaleDatasetError(grow_lib.stale_message(name, where, manual_dir, changes, why))

    def _waited_for_prepared(self) -> bool:
        """Whether the build waited for prepared the dataset (in a bucket: published it; its metadata then copied here)."""
        if self.bucket is None:
            return self._is_prepared()
        here = os.fspath(self.data_path)
        if not self.bucket.is_published(here):
            return False
        dataset_copy.pull(self.bucket.remote(here), here, splits=set())  # the metadata only, for self.info
        return True

    def _prepare_in_session(self, name: str, download_dir, download_config, **kwargs) -> None:
        """TFDS's download_and_prepare with the build log, the quiet terminal, one clear write error, summary last."""
        from vidvol.builders.writer.shard_writer import NO_ROOM, WRITE_ERRORS, BuildWriteError, write_failure

        log_dir = self._log_dir or os.fspath(self.data_path.parent)
        with build_log.session(name, log_dir, version=str(self.version)) as session:
            self._summary_results = None
            try:
                super().download_and_prepare(download_dir=download_dir, download_config=download_config, **kwargs)
                if self.bucket is not None and self._remote_incomplete is not None:
                    mode = download_config.download_mode if download_config else None
                    self.bucket.publish(os.fspath(self.data_path), self._remote_incomplete,
                                        overwrite=bool(mode is not None and mode.overwrite_dataset),
                                        lease=self._build_lock if isinstance(self._build_lock, lease.BucketLease) else None)
            except BuildWriteError:
                raise
            except Exception as e:
                failure = write_failure(e)
                if failure is None and isinstance(e, WRITE_ERRORS) and NO_ROOM.search(str(e)):
                    failure = {"path": "", "error": f"{type(e).__name__}: {e}"}  # TFDS's own metadata files
                if failure is None:
                    raise
                logger.info("the build's error, as raised: %s", e)  # the whole story stays in the build log
                raise self._write_error(failure) from None
            if self._summary_results is not None:
                lines = build_summary(name, self._summary_results, self._published or self._out(os.fspath(self.data_path)))
                session.add_summary(lines + ([self._grow_line] if self._grow_line else []))

    def _write_error(self, failure: Mapping[str, str]) -> BuildWriteError:
        """One clear error for a build whose writes failed, once TFDS removed its `incomplete.*` folder."""
        from vidvol.builders.writer.shard_writer import BuildWriteError, write_hint

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
        from vidvol.builders.examples_from_sources import ExamplesFromSources

        generators = self._split_generators(dl_manager)
        for split, gen in generators.items():
            if not isinstance(gen, ExamplesFromSources):
                raise TypeError(
                    f"{self.name}: split {split!r}: _generate_examples must return "
                    f"vidvol.builders.dataset_builder.ExamplesFromSources(sources, example_fn), got {type(gen).__name__}"
                )
            gen.split = split
            if download_config.max_examples_per_split:
                gen.sources = stable_order(gen.sources, split)[: download_config.max_examples_per_split]
        return generators

    def _download_and_prepare(self, dl_manager, download_config):  # pytype: disable=signature-mismatch
        if download_config.max_examples_per_split == 0:
            return
        self._build_started, self._build_runner, self._build_workers = time.time(), "none (nothing to build)", None
        check_data_dir(self.data_dir)
        self._file_format()  # before anything is written
        content = resume_lib.hash_inputs() if self.hash_inputs is None else self.hash_inputs
        manual_dir = tfds_api.given_manual_dir(dl_manager)
        generators = self._generators(dl_manager, download_config)  # planned on this builder (its features too)
        # What this dataset is built from (a rebuild compares with it, or grows): a grow takes the digests its
        # comparison made of the same sources, not made again.
        manifest = grow_lib.planned_manifest(self._grow_from, grow_lib.plan_key(manual_dir, download_config, content),
                                             generators) or sources_manifest.document(
            {split: g.sources for split, g in generators.items()}, manual_dir, content=content)
        manifest["build"] = sources_manifest.build_digest(self._fingerprint({}, download_config, content=False))
        if self._grow_from is not None:  # beside a prepared dataset: keep its unchanged shards, decode the rest
            results, templates, generation = grow_lib.build_splits(self, generators, manifest, download_config)
        else:
            (results, templates), generation = self._build_splits(generators, download_config), 0
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
        sources_manifest.add_shards(manifest, {r.name: list(zip(r.shard_paths, r.shard_sources)) for r in results},
                                    generation)
        sources_manifest.write(manifest, self._out(os.fspath(self.data_path)))
        self._shard_files = sources_manifest.shard_files(manifest)  # what a grow publishes (not read back)
        # Every shard is in place: the fingerprint goes (it is no part of the dataset), and with it the chance
        # that a build killed from here on is resumed (its shards then have their final names).
        outputs.remove(self._out(os.path.join(os.fspath(self.data_path), resume_lib.FINGERPRINT_NAME)))
        if self._build_lock is not None:  # last step before TFDS renames incomplete.* into the version folder
            self._build_lock.check_held()

    def _build_splits(self, generators, download_config) -> tuple[list[SplitResult], dict]:
        """Plans, resumes and writes every split's shards; each split's result and file name template."""
        templates = {split: tfds_api.filename_template(self, split) for split in generators}
        self._remote_incomplete = self._out(os.fspath(self.data_path)) if self.bucket is not None else None
        tasks = self._plan(generators, templates, download_config)
        kept = self._resume(tasks, download_config)
        all_tasks = [t for ts in tasks.values() for t in ts if t.path not in kept]
        if all_tasks:
            num_sources = sum(len(t.sources) for t in all_tasks)
            runner, options = resolve_runner(
                download_config.beam_runner, download_config.beam_options, len(all_tasks), num_sources=num_sources,
                manual_dir=os.fspath(download_config.manual_dir) if download_config.manual_dir else None,
            )
            self._build_runner = build_record.runner_name(runner)  # for build.json
            self._build_workers = options.get_all_options().get("direct_num_workers") if options else None
            self._run_pipeline(all_tasks, generators, runner, options, tasks, kept=kept)
        for leftover in tf.io.gfile.glob(os.path.join(os.fspath(self.data_path), "*.tmp")):
            tf.io.gfile.remove(leftover)  # attempts of tasks that a runner retried elsewhere (a worker died)
        # (A bucket build's attempts live in each worker's scratch, never in the bucket.)
        results = []
        for split, template in templates.items():
            final = lambda i, n, t=template: self._out(os.fspath(t.sharded_filepath(shard_index=i, num_shards=n)))
            results.append(collect_split(split, tasks[split], final, empty_reason=generators[split].empty_reason))
        return results, templates

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
            planned = lambda i, n, t=templates[split]: self._out(os.fspath(t.sharded_filepath(shard_index=i, num_shards=n))) + ".partial"
            tasks[split] = plan_shards(split, gen.sources, n, planned)
            logger.info("%s %s: %d sources in %d shards", self.name, split, len(gen.sources), n)
        return tasks

    def _fingerprint(self, tasks: Mapping[str, Sequence[ShardTask]], download_config, *, content: bool) -> dict:
        """What decides this build's output (`resume.fingerprint`): config, versions, format, options, inputs."""
        cfg = self.builder_config
        if cfg is not None and dataclasses.is_dataclass(cfg):
            config = {f.name: repr(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
                      if f.name not in ("description", "release_notes", "tags")}
        else:
            config = {"name": repr(getattr(cfg, "name", None))}
        try:
            features = json.dumps(self.info.features.to_json(), sort_keys=True)
        except Exception:  # a feature without a JSON form: its repr
            features = repr(self.info.features)
        options = {"num_shards": download_config.num_shards, "max_shard_size": self._max_shard_size(download_config),
                   "max_examples_per_split": download_config.max_examples_per_split, "min_shards": self.MIN_SHARDS,
                   "example_bytes": self._estimated_example_bytes()}
        return resume_lib.fingerprint(
            dataset=self._display_name(), version=str(self.version), vidvol_version=VIDVOL_VERSION,
            tfds_version=tfds.__version__, file_format=self._file_format().value, config=config, features=features,
            options=options, tasks=tasks, content=content,
        )

    def _resume(self, tasks: Mapping[str, Sequence[ShardTask]], download_config) -> dict[str, dict]:
        """Records this build's fingerprint, then keeps the whole shards of dead builds with the same one.

        Only a build holding the config's build lock resumes (then no other build of it runs: the
        `incomplete.*` folders beside its own are dead builds'). A folder whose fingerprint differs is
        left alone with a warning saying what changed; one that holds no file at all (a build killed
        while planning) is removed.

        Returns:
          Shard path -> sidecar of each shard kept (already in this build's folder with its sidecar).
        """
        self.resumed = None
        resume = resume_lib.resume_enabled() if self.resume is None else self.resume
        content = resume_lib.hash_inputs() if self.hash_inputs is None else self.hash_inputs
        name = self._display_name()
        here = os.fspath(self.data_path)
        doc = self._fingerprint(tasks, download_config, content=content)
        resume_lib.write_fingerprint(self._out(here), doc)
        if not resume or self._build_lock is None:
            return {}
        same, changed = [], {}
        previous = (bucket_state.previous_folders(self.bucket, here) if bucket_state.in_bucket(self.bucket)
                    else resume_lib.previous_folders(here))  # a bucket build: the prefixes in the bucket, from any host
        for folder in previous:
            where = self._out(folder)
            old = resume_lib.read_fingerprint(where)
            if old is None:
                if not resume_lib.folder_files(where) and not resume_lib.folder_files(folder):
                    resume_lib.remove_folder(folder)  # a build killed while planning: nothing in it
                    continue
                changed[where] = ["it holds no fingerprint (an older vidvol's build, or one killed while planning)"]
            elif resume_lib.canonical(old) == resume_lib.canonical(doc):
                same.append(folder)
            else:
                changed[where] = resume_lib.differences(old, doc) or ["its fingerprint differs"]
        for where, why in changed.items():
            logger.warning("%s: not resuming from %s, which another build of this config left: %s. Building afresh; "
                           "that folder is left as it is (--remove_incomplete deletes it)", name, where, "; ".join(why))
        if not same:
            return {}
        flat = [t for ts in tasks.values() for t in ts]
        kept = resume_lib.keep_shards(flat, [self._out(f) for f in same])
        for folder in same:
            resume_lib.remove_folder(self._out(folder))
            if self._out(folder) != folder:
                resume_lib.remove_folder(folder)  # a bucket build's local staging folder
        self.resumed = ResumeReport(kept.count, len(flat), [self._out(f) for f in same], kept.damaged,
                                    {w: list(v) for w, v in changed.items()})
        logger.info("%s: %s", name, self.resumed.line(), extra=build_log.CONSOLE)
        logger.info("%s: kept from %s (same fingerprint: config, versions, file format, options, inputs)",
                    name, ", ".join(self.resumed.folders))
        for why in kept.damaged:
            logger.warning("%s: not keeping %s; it is built again", name, why)
        return kept.infos

    def _run_pipeline(self, all_tasks, generators, runner, options, tasks_by_split=None, kept=None) -> None:
        """One Beam pipeline: shard tasks spread over the workers, each written whole by one worker.

        While it runs, a background thread reads the workers' progress records and shows one bar
        (or plain line) per split; `kept` (shard path -> sidecar) are shards a dead build finished,
        counted as done.
        """
        from apache_beam.runners.runner import PipelineState

        from vidvol.builders.writer.shard_writer import WriteShardFn, shard_pipeline

        system.release_freed_memory()  # planning's garbage is not held through the decode
        fns = {split: gen.example_fn for split, gen in generators.items()}
        setup = [fn for gen in generators.values() for fn in gen.worker_setup]
        plan = self._out(os.path.join(os.fspath(self.data_dir), PLAN_NAME))
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
        kept = kept or {}
        done = {progress.progress_path(t.path): {"done": len(t.sources), "examples": len(kept[t.path]["keys"]),
                                                 "skips": sum(1 for k in kept[t.path]["skips"] if not k.get("example"))}
                for ts in by_split.values() for t in ts if t.path in kept}
        try:
            with progress.ProgressMonitor(shards, display, done=done):
                state = pipeline.run().wait_until_finish()
        finally:
            outputs.remove(plan)
        if state is not None and str(state) != PipelineState.DONE:
            raise RuntimeError(f"{self.name}: Beam pipeline ended in state {state}, not DONE")

    def _report(self, data_dir: str, results: Sequence[SplitResult], manual_dir: str | None = None) -> None:
        """Writes the skip report and the shard list (`shards.json`) next to the shards; the summary lines are
        shown when the build ends.

        Inside a build session (`download_and_prepare`) they are the last lines the user sees,
        with the skip report's final path; called otherwise, they are logged at WARNING.
        """
        from vidvol.builders.writer.shard_writer import writing

        report_path = os.path.join(data_dir, SKIP_REPORT_NAME)
        with writing(report_path):
            write_skip_report(report_path, self.name, results)
        shards_path = os.path.join(data_dir, artifacts.SHARDS_NAME)
        with writing(shards_path):
            shards_file.write_shards_file(
                shards_path, dataset=self._display_name(), version=str(self.version), manual_dir=manual_dir,
                entries=[e for r in results for e in r.shard_files],
            )
        record_path = os.path.join(data_dir, build_record.BUILD_RECORD_NAME)
        with writing(record_path):  # the build's date, duration, runner and vidvol version (the report's card)
            build_record.write(data_dir, dataset=self._display_name(), version=str(self.version),
                               started=getattr(self, "_build_started", None) or time.time(),
                               runner=getattr(self, "_build_runner", "unknown"), workers=getattr(self, "_build_workers", None))
        if build_log.current() is not None:
            self._summary_results = list(results)
        else:
            build_log.summary(build_summary(self._display_name(), results, data_dir))


def __getattr__(name: str):
    """`ExamplesFromSources` (a Beam `PTransform`, in `vidvol.builders.examples_from_sources`), imported on first use: Beam only when asked for."""
    if name == "ExamplesFromSources":
        from vidvol.builders.examples_from_sources import ExamplesFromSources

        return ExamplesFromSources
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
