"""Build one vidvol dataset config on a chosen Beam runner, through the TFDS builder API.

    python -m vidvol.beam_jobs.build hmdb51/split1_20x64x64 --manual_dir DIR --data_dir OUT [OPTIONS]

Every option this parser does not know is a Beam pipeline option, checked against the installed
Beam before anything starts. The full usage, what the terminal and the build log show, and how
concurrent builds of one config behave are in `main`'s docstring and docs/building.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import sys
from typing import Any
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

import vidvol.datasets  # noqa: F401  (registers the datasets)
from vidvol.beam_jobs import local_cluster
from vidvol.beam_jobs import runners
from vidvol.builders.writer import bucket, bucket_state
from vidvol.builders.writer import build_lock
from vidvol.builders.writer import build_log
from vidvol.builders.writer import formats, outputs
from vidvol.builders.writer import results
from vidvol.builders.writer import shard_writer
from vidvol.builders.writer import skip_report
from vidvol.core import redact, store

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class BuildResult:
    """What a build left in data_dir: per-split counts and skips, as the workers wrote them (no runner metrics)."""

    dataset: str  # e.g. "hmdb51/split1_20x64x64/1.0.0"
    data_path: str
    built: bool  # False: the dataset was already prepared and nothing ran
    splits: dict[str, dict[str, int]]  # split -> examples, shards, num_bytes, skipped_inputs, masked_parts
    skipped: list[dict[str, str]]
    empty_splits: dict[str, str] = dataclasses.field(default_factory=dict)  # split left without example -> why
    reused_from: str | None = None  # the concurrent build this one waited for and whose dataset it reuses
    grown: str | None = None  # a grow's line: sources kept, added, changed and removed; shards kept, rewritten, decoded


def parse_dataset(spec: str) -> tuple[str, str | None, str | None]:
    """`NAME[/CONFIG][:VERSION]` -> (name, config, version)."""
    rest, _, version = spec.partition(":")
    name, _, config = rest.partition("/")
    if not name or "/" in config:
        raise ValueError(f"Dataset {spec!r}: expected NAME, NAME/CONFIG or NAME/CONFIG:VERSION")
    return name, config or None, version or None


def make_builder(dataset: str, data_dir: str, file_format: str | None = None) -> tfds.core.DatasetBuilder:
    """The TFDS builder of `NAME[/CONFIG][:VERSION]` rooted at data_dir (writing `file_format`, default tfrecord)."""
    name, config, version = parse_dataset(dataset)
    kwargs = {"file_format": file_format} if file_format else {}
    return tfds.builder(f"{name}:{version}" if version else name, config=config, data_dir=data_dir, **kwargs)


def incomplete_dirs(builder: tfds.core.DatasetBuilder) -> list[str]:
    """Leftovers of interrupted builds of this config/version (TFDS's `incomplete.*_<version>` dirs)."""
    parent = os.fspath(builder.data_path.parent)
    if not tf.io.gfile.isdir(parent):
        return []
    suffix = "_" + builder.data_path.name
    return sorted(
        os.path.join(parent, d.rstrip("/"))
        for d in tf.io.gfile.listdir(parent)
        if d.startswith("incomplete.") and d.rstrip("/").endswith(suffix)
    )


def download_config(
    *,
    manual_dir: str | None,
    flags: Sequence[str],
    overwrite: bool = False,
    num_shards: int | None = None,
    max_shard_size_mb: int | None = None,
    default_workers: bool = False,
) -> tfds.download.DownloadConfig:
    """The DownloadConfig of a build: manual_dir, Beam runner/options, shard sizing, overwrite mode.

    `default_workers`: the direct runner's worker count/mode in `flags` are defaults the user did not
    choose, so a small build may still run in-process (`runners.SMALL_BUILD_SOURCES`).
    """
    runner, options = runners.resolve(None, PipelineOptions(list(flags)))
    if default_workers and type(runner).__name__ == "FnApiRunner":
        runners.mark_default_workers(runner)
    kwargs: dict[str, Any] = {}
    if num_shards:
        kwargs["num_shards"] = num_shards
    if max_shard_size_mb:
        kwargs["max_shard_size"] = max_shard_size_mb << 20
    if overwrite:
        kwargs["download_mode"] = tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS
    return tfds.download.DownloadConfig(manual_dir=manual_dir, beam_runner=runner, beam_options=options, **kwargs)


def read_result(builder: tfds.core.DatasetBuilder, *, built: bool, target: bucket.BucketTarget | None = None) -> BuildResult:
    """BuildResult of a prepared builder, from its skip report (or its split infos if there is none)."""
    data_path = os.fspath(builder.data_path)
    where = target.remote(data_path) if target else data_path
    try:
        report = skip_report.read_skip_report(where)
        splits = {name: dict(s) for name, s in report["splits"].items()}
        skipped = list(report["skipped"])
        empty = dict(report.get("empty_splits", {}))
    except (tf.errors.NotFoundError, FileNotFoundError):
        splits = {
            name: {"examples": s.num_examples, "shards": s.num_shards, "num_bytes": s.num_bytes,
                   "skipped_inputs": 0, "masked_parts": 0}
            for name, s in builder.info.splits.items()
        }
        skipped = []
        empty = {}
    return BuildResult(builder.info.full_name, where, built, splits, skipped, empty)


def _local_dask_cluster():
    """A scheduler and one worker process per core on 127.0.0.1, for one build."""
    from vidvol.beam_jobs import dask_cluster

    return dask_cluster.LocalDaskCluster(n_workers=runners.default_num_workers(), secure=True)  # mutual TLS (#36)


# `--local_services`: what a runner gets started here for the build (and stopped after it).
LOCAL_SERVICES = {"portable": local_cluster.local_portable_services, "dask": _local_dask_cluster}


def build(
    dataset: str,
    *,
    manual_dir: str | None,
    data_dir: str,
    runner: str = "direct",
    beam_flags: Sequence[str] = (),
    overwrite: bool = False,
    num_shards: int | None = None,
    max_shard_size_mb: int | None = None,
    download_dir: str | None = None,
    local_services: bool = False,
    remove_incomplete: bool = False,
    file_format: str | None = None,
    resume: bool | None = None,
    hash_inputs: bool | None = None,
    grow: bool | None = None,
) -> BuildResult:
    """Builds `NAME[/CONFIG]` into data_dir on `runner` (a no-op if already prepared, unless overwrite).

    A build of this config that died (killed, preempted) is resumed: its finished shards are kept when
    nothing that decides the output changed (`vidvol.builders.writer.resume`). `resume=False` builds
    afresh (None: `VIDVOL_RESUME`, on by default); `hash_inputs=True` fingerprints the inputs' bytes
    rather than their sizes and mtimes (None: `VIDVOL_HASH_INPUTS`, off by default). A prepared dataset whose
    manual_dir gained, changed or lost sources is grown (only those are decoded: `vidvol.builders.writer.grow`);
    `grow=False` stops with StaleDatasetError instead (None: `VIDVOL_GROW`, on by default).
    """
    flags = list(beam_flags)
    formats.check_file_format(file_format, data_dir)  # before any service starts or anything is written
    if local_services and runner not in LOCAL_SERVICES:
        raise ValueError(
            f"--local_services starts a local cluster for --runner portable (job service + worker pool) or "
            f"--runner dask (scheduler + workers), not {runner!r}"
        )
    if not local_services:
        flags = runners.pipeline_flags(runner, flags)
    else:
        runners.check_flags(flags)
    formats.check_data_dir(data_dir, bucket_ok=True)
    target = bucket.BucketTarget.for_url(data_dir) if store.is_bucket(data_dir) else None
    builder = _builder(dataset, data_dir, file_format, target)
    in_bucket = bucket_state.in_bucket(target)  # an s3:// build's lease and incomplete.* prefixes are in the bucket
    stale = (bucket_state.incomplete_prefixes(target, builder.data_path) if in_bucket else incomplete_dirs(builder))
    running = bucket_state.running_build(target, builder.data_path) if in_bucket else _running_build(builder)
    if stale and running:
        logger.warning("A build of this config is running (%s); its folder %s is left alone",
                       running, ", ".join(stale))
    elif stale and remove_incomplete:
        for path in stale + (incomplete_dirs(builder) if in_bucket else []):  # a bucket build's: and their staging
            if in_bucket and store.is_bucket(path):
                bucket_state.remove_prefix(path)
                continue
            logger.warning("Removing %s (left by an interrupted build)", path)
            tf.io.gfile.rmtree(path)
    elif stale and resume is False:
        logger.warning("Leftovers of interrupted builds, not resumed (--no_resume; safe to delete when no build of "
                       "this config runs: --remove_incomplete does it): %s", ", ".join(stale))
    elif stale:  # the builder resumes from them, or says what changed
        logger.info("Leftovers of interrupted builds (resumed if nothing changed): %s", ", ".join(stale))
    prepared = target.is_published(os.fspath(builder.data_path)) if target else builder.is_prepared()
    # Never silently stale: a manual_dir that gained, changed or lost sources since the build grows the dataset
    # (the builder does it below) or stops here.
    grower = _check_up_to_date(dataset, data_dir, target, manual_dir, download_dir, grow) if prepared and not overwrite else None
    if grower is not None:
        builder = grower  # the dataset's code (a named config's prepared dataset otherwise loads read-only)
    elif prepared and not overwrite:
        where = target.remote(os.fspath(builder.data_path)) if target else os.fspath(builder.data_path)
        logger.warning("%s is already prepared in %s: nothing to do (--overwrite rebuilds it)",
                       builder.info.full_name, redact.url(where))
        return read_result(builder, built=False, target=target)
    if prepared and overwrite and target is None:  # --overwrite: as `tfds build --overwrite`, delete, then a fresh builder
        logger.warning("Deleting the prepared %s in %s (--overwrite)", builder.info.full_name, os.fspath(builder.data_path))
        builder.data_path.rmtree()
        builder = make_builder(dataset, data_dir, file_format)
    # (In a bucket, --overwrite replaces the published dataset when the new one is complete: bucket.publish.)
    default_workers = runner == "direct" and not local_services and not runners.chooses_workers(beam_flags)
    services_context = LOCAL_SERVICES[runner]() if local_services else contextlib.nullcontext()
    name = builder.name + (f"/{builder.builder_config.name}" if builder.builder_config else "")
    with services_context as services:
        if services is not None:
            flags = runners.pipeline_flags(runner, services.flags(runners.default_num_workers()) + flags)
        config = download_config(  # checks the runner (e.g. a Dask scheduler answers) before anything is written
            manual_dir=manual_dir, flags=flags, overwrite=overwrite, num_shards=num_shards,
            max_shard_size_mb=max_shard_size_mb, default_workers=default_workers,
        )
        # The build log and quiet terminal of the builder's session; this command prints the summary itself.
        with build_log.session(name, os.fspath(builder.data_path.parent), version=str(builder.version),
                               print_summary=False):
            logger.info("Building %s on %s with %s", builder.info.full_name, runner, " ".join(flags))
            builder.resume, builder.hash_inputs, builder.grow = resume, hash_inputs, grow
            builder.download_and_prepare(download_dir=download_dir, download_config=config)
    reused = getattr(builder, "reused_from", None)
    return dataclasses.replace(read_result(builder, built=not reused, target=target), reused_from=reused,
                               grown=getattr(builder, "_grow_line", None))


def _builder(dataset: str, data_dir: str, file_format: str | None, target: bucket.BucketTarget | None):
    """The builder of a build: rooted at data_dir, or for a bucket at its staging folder, the bucket its target."""
    if target is None:
        return make_builder(dataset, data_dir, file_format)
    builder = make_builder(dataset, target.staging, file_format)
    # The staging folder holds the metadata of the last build published from here; the bucket says what is built.
    bucket.clear_staging(os.fspath(builder.data_path))
    builder = make_builder(dataset, target.staging, file_format)
    builder.bucket = target
    return builder


def _check_up_to_date(dataset: str, data_dir: str, target: bucket.BucketTarget | None, manual_dir: str | None,
                      download_dir: str | None, grow: bool | None = None) -> tfds.core.DatasetBuilder | None:
    """The builder that grows the prepared dataset when its manual_dir gained, changed or lost sources; None when
    it is up to date; StaleDatasetError when it is not grown (`check_up_to_date`).

    Through the dataset's code (a config TFDS would read from files gives a ReadOnlyBuilder, which cannot plan).
    """
    name, config, version = parse_dataset(dataset)
    kwargs = {"config": config} if config else {}
    if version:
        kwargs["version"] = version
    builder = tfds.builder_cls(name)(data_dir=target.staging if target else data_dir, **kwargs)
    if not hasattr(builder, "check_up_to_date"):
        return None  # a builder that is no vidvol builder: nothing recorded to compare with
    builder.bucket, builder.grow = target, grow
    return builder if builder.check_up_to_date(tfds.download.DownloadConfig(manual_dir=manual_dir), download_dir) else None


def _running_build(builder: tfds.core.DatasetBuilder) -> str | None:
    """Who holds this config's build lock, if a live build does (see vidvol.builders.writer.build_lock)."""
    path = build_lock.lock_path(builder.data_path)
    holder = build_lock.read(path)
    if holder is None or (holder and build_lock.stale_reason(holder, stale_s=build_lock.STALE_S)):
        return None
    return build_lock.describe(holder, path)


def summary_lines(result: BuildResult) -> list[str]:
    """One line per split: examples, shards, bytes, skipped inputs by reason, masked parts."""
    lines = []
    for split, s in sorted(result.splits.items()):
        if split in result.empty_splits:
            lines.append(results.empty_split_line(result.dataset, split, result.empty_splits[split]))
            continue
        whole = [k for k in result.skipped if k.get("split") == split and not k.get("example")]
        reasons = collections.Counter(k["reason"].split(":")[0] for k in whole)
        line = (f"{result.dataset} {split}: {s['examples']} examples in {s['shards']} shards "
                f"({s['num_bytes'] / 2**20:.1f} MiB), {s['skipped_inputs']} inputs skipped")
        if reasons:
            line += " (" + ", ".join(f"{n} {r}" for r, n in reasons.most_common()) + ")"
        if s.get("masked_parts"):
            line += f", {s['masked_parts']} parts masked inside written examples"
        lines.append(line)
    if result.reused_from:
        lines.append(f"{result.dataset}: prepared in {result.data_path} by the concurrent build this one waited for "
                     f"({result.reused_from}); nothing rebuilt")
    elif not result.built:
        lines.append(f"{result.dataset}: already prepared in {result.data_path}; nothing rebuilt (use --overwrite)")
    return lines


def skips_line(result: BuildResult) -> str | None:
    """`N inputs skipped: see DATA_PATH/skip_report.json` (None when the dataset has no skip report)."""
    path = os.path.join(result.data_path, skip_report.SKIP_REPORT_NAME)
    if not outputs.exists(path):
        return None
    skipped = sum(s.get("skipped_inputs", 0) for s in result.splits.values())
    masked = sum(s.get("masked_parts", 0) for s in result.splits.values())
    what = f"{skipped} inputs skipped" + (f", {masked} parts masked" if masked else "")
    return f"{what}: see {path}" if skipped or masked else f"{what} (skip report: {path})"


def tfds_command(
    dataset: str, *, manual_dir: str | None, data_dir: str, flags: Sequence[str], overwrite: bool = False,
    num_shards: int | None = None, max_shard_size_mb: int | None = None, file_format: str | None = None,
) -> list[str]:
    """The `tfds build` command line equivalent to a build (for runners whose flags hold no commas)."""
    formats.check_data_dir(data_dir)  # a bucket: `tfds build` cannot write it here (the error says what can)
    cmd = ["tfds", "build", dataset, "--imports", "vidvol", "--data_dir", data_dir]
    if manual_dir:
        cmd += ["--manual_dir", manual_dir]
    cmd.append("--beam_pipeline_options=" + runners.tfds_beam_pipeline_options(flags))
    if overwrite:
        cmd.append("--overwrite")
    if num_shards:
        cmd += ["--num_shards", str(num_shards)]
    if max_shard_size_mb:
        cmd += ["--max_shard_size_mb", str(max_shard_size_mb)]
    if file_format:
        cmd += ["--file_format", file_format]
    return cmd


def make_parser() -> argparse.ArgumentParser:
    """The CLI's own options (anything else of the form --name[=value] is a Beam pipeline option)."""
    parser = argparse.ArgumentParser(
        prog="python -m vidvol.beam_jobs.build", description=__doc__.split("\n")[0], allow_abbrev=False,
        epilog="Any other --name value (or --name=value) is passed to Beam as a pipeline option (checked against "
               "the installed Beam's PipelineOptions; booleans like --save_main_session take no value).",
    )
    parser.add_argument("dataset", help="NAME, NAME/CONFIG or NAME/CONFIG:VERSION, e.g. hmdb51/split1_20x64x64")
    parser.add_argument("--manual_dir", help="folder holding the manually downloaded inputs")
    parser.add_argument("--data_dir", required=True, help="TFDS data_dir to write to (local, gs://, ...)")
    parser.add_argument("--download_dir", help="TFDS download_dir (archive extraction); default DATA_DIR/downloads")
    parser.add_argument("--runner", default="direct", choices=sorted(runners.RECIPES), help="where the Beam job runs")
    parser.add_argument("--overwrite", action="store_true", help="rebuild even if the dataset is already prepared")
    parser.add_argument("--num_shards", type=int, help="shards per split (default: sized by --max_shard_size_mb)")
    parser.add_argument("--max_shard_size_mb", type=int, help="shard size cap in MiB (default: the config's)")
    parser.add_argument("--file_format", choices=[f.value for f in tfds.core.FileFormat],
                        help="shard file format: tfrecord (default; vidvol.load, tfds.load) or array_record (random "
                             "access: vidvol.data_source, Grain, PyTorch); the others are refused before anything is written")
    parser.add_argument("--local_services", action="store_true",
                        help="with --runner portable: start a loopback job service + worker pool for this build; "
                             "with --runner dask: a dask scheduler + one worker process per core")
    parser.add_argument("--remove_incomplete", action="store_true",
                        help="delete leftovers of interrupted builds of this config first (so nothing is resumed)")
    parser.add_argument("--no_resume", action="store_true",
                        help="build afresh even if a dead build of this config left finished shards (default: keep "
                             "them when nothing that decides the output changed); same as VIDVOL_RESUME=0")
    parser.add_argument("--hash_inputs", action="store_true",
                        help="fingerprint the inputs by their SHA-256 (every byte read) instead of their sizes and "
                             "modification times, to decide whether a dead build can be resumed; same as "
                             "VIDVOL_HASH_INPUTS=1")
    parser.add_argument("--no_grow", action="store_true",
                        help="stop (StaleDatasetError) instead of growing a prepared dataset whose manual_dir gained, "
                             "changed or lost sources (default: grow it, decoding only those); same as VIDVOL_GROW=0")
    parser.add_argument("--if_building", choices=build_lock.MODES, default=None,
                        help="when another build of this config is writing into the same data_dir: wait for it and "
                             "reuse its dataset (default), or fail at once (exit code 75); same as "
                             f"{build_lock.ENV_MODE}=wait|fail")
    parser.add_argument("--dry_run", action="store_true", help="print the checked Beam options and the tfds command; build nothing")
    parser.add_argument("--verbose", action="store_true",
                        help=f"keep Beam's, TensorFlow's and the workers' output on the terminal (no build log); "
                             f"same as {build_log.VERBOSE_ENV}=1")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The CLI's namespace and the Beam flags, each as `--name=value` or `--flag`.

    Every option this parser does not define is a Beam pipeline option, written `--name value` or
    `--name=value` (booleans such as `--save_main_session` alone), anywhere on the line
    (`runners.split_beam_flags`); an unknown one raises UnknownOptionError naming the closest known
    option, a stray word ValueError.
    """
    parser = make_parser()
    own = {o: action.nargs != 0 for action in parser._actions for o in action.option_strings}
    cli, flags = runners.split_beam_flags(list(sys.argv[1:] if argv is None else argv), own)
    args, stray = parser.parse_known_args(cli)
    if stray:
        raise ValueError(f"Unexpected arguments {stray}: one dataset, then options (--name value or --name=value)")
    return args, flags


EXIT_BUILD_IN_PROGRESS = 75  # EX_TEMPFAIL: try again later


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: builds, then prints the JSON result (stdout) and, last, the per-split summary (stderr).

    Usage::

        python -m vidvol.beam_jobs.build hmdb51/split1_20x64x64 --manual_dir DIR --data_dir OUT \\
            [--runner direct|portable|dask|flink|spark|dataflow] [--overwrite] [--num_shards N] \\
            [--max_shard_size_mb N] [--file_format tfrecord|array_record] [--local_services] [--dry_run] [--verbose]
            [--if_building wait|fail] [--remove_incomplete] [--no_resume] [--hash_inputs] [--no_grow]
            [--BEAM_OPTION VALUE | --BEAM_OPTION=VALUE | --BEAM_FLAG ...]

    Every option this parser does not know (`--name value` or `--name=value`) is a Beam pipeline
    option (`--flink_master=`, `--project=`, `--sdk_container_image=`, `--direct_num_workers=`,
    ...): it is checked against the installed Beam's PipelineOptions (a misspelling stops the build
    before anything starts) and passed to the runner. The default runner is Beam's FnApiRunner,
    multi-process, one SDK worker per core, offline; a build of at most
    `runners.SMALL_BUILD_SOURCES` inputs runs in-process with one worker unless
    `--direct_num_workers`/`--direct_running_mode` is given. A dataset that is already prepared is
    left alone unless `--overwrite`.

    While it runs, the terminal shows one progress bar per split, warnings and errors; Beam's,
    TensorFlow's and the SDK workers' output goes to a build log next to the dataset folder
    (`DATA_DIR/NAME/CONFIG/build-VERSION-TIMESTAMP.log`, path printed at the start; `--verbose` or
    `VIDVOL_VERBOSE=1` keeps everything on the terminal). The build ends with a JSON line on stdout,
    then, last, one summary line per split (examples, shards, bytes, skips by reason) and where the
    skip report is, on stderr, taken from what the workers wrote, so they are the same on every
    runner (some, like Dask, report no metrics).

    `--dry_run` prints the checked options and the equivalent `tfds build` command. `--file_format
    array_record` writes ArrayRecord shards (random access: `vidvol.data_source`, Grain, PyTorch)
    instead of TFRecord (`vidvol.load`, `tfds.load`); a format the streaming writer cannot honour
    stops the build before anything is written. One build of a config writes into a data_dir at a
    time: a second one waits for it and reuses its dataset, or with `--if_building fail` exits at
    once with code 75 naming the running build (host, pid, start). A build that died is resumed by the
    same command (its finished shards kept, "resuming: K of N shards kept, M to build"); `--no_resume`
    builds afresh, `--remove_incomplete` deletes what dead builds left first. A prepared dataset whose
    manual_dir gained, changed or lost sources is grown: only those are decoded, and a last line says how many
    sources were kept, added, changed and removed; `--no_grow` stops instead.
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    redact.install_log_redaction()  # a manual_dir may be a URL with credentials: no log line shows them
    try:
        args, beam_flags = parse_args(argv)
        if args.verbose:
            os.environ[build_log.VERBOSE_ENV] = "1"  # for this process's build session (and its workers)
        if args.if_building:
            os.environ[build_lock.ENV_MODE] = args.if_building
        if not build_log.is_verbose():  # INFO goes to the build log; outside it, what a quiet build shows
            for handler in logging.getLogger().handlers:
                handler.setLevel(logging.WARNING)
                handler.addFilter(build_log.for_terminal)
        return _run(args, beam_flags)
    except shard_writer.BuildWriteError as e:  # disk full, quota, file size limit: one clear line, no traceback
        print(redact.text(f"error: {e}"), file=sys.stderr)
        return 1
    except build_lock.BuildInProgressError as e:  # another build of this config holds the lock (--if_building fail)
        print(redact.text(f"error: {e}"), file=sys.stderr)
        return EXIT_BUILD_IN_PROGRESS
    except ValueError as e:  # bad flags, unknown options, missing runner options, bad inputs
        print(redact.text(f"error: {e}"), file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, beam_flags: list[str]) -> int:
    """Dry run or build, then the summary."""
    if args.dry_run:
        if args.local_services and args.runner not in LOCAL_SERVICES:
            raise ValueError(f"--local_services needs --runner portable or --runner dask, not {args.runner!r}")
        if args.local_services:
            runners.check_flags(beam_flags)
            what = {"portable": "a local job service + worker pool", "dask": "a local dask scheduler + workers"}[args.runner]
            print(f"runner: {args.runner} on {what} (started by --local_services), plus {beam_flags}")
            return 0
        flags = runners.pipeline_flags(args.runner, beam_flags)
        print("beam options: " + " ".join(shlex.quote(f) for f in flags))
        try:
            formats.check_file_format(args.file_format, args.data_dir)
            cmd = tfds_command(args.dataset, manual_dir=args.manual_dir, data_dir=args.data_dir, flags=flags,
                               overwrite=args.overwrite, num_shards=args.num_shards, max_shard_size_mb=args.max_shard_size_mb,
                               file_format=args.file_format)
            print("tfds equivalent: " + " ".join(shlex.quote(c) for c in cmd))
        except ValueError as e:
            print(f"tfds equivalent: none ({e})")
        return 0
    result = build(
        args.dataset, manual_dir=args.manual_dir, data_dir=args.data_dir, runner=args.runner, beam_flags=beam_flags,
        overwrite=args.overwrite, num_shards=args.num_shards, max_shard_size_mb=args.max_shard_size_mb,
        download_dir=args.download_dir, local_services=args.local_services, remove_incomplete=args.remove_incomplete,
        file_format=args.file_format, resume=False if args.no_resume else None, hash_inputs=True if args.hash_inputs else None,
        grow=False if args.no_grow else None,
    )
    print(redact.text(json.dumps({"dataset": result.dataset, "data_path": result.data_path, "built": result.built,
                      "splits": result.splits, "empty_splits": result.empty_splits, "reused_from": result.reused_from},
                     sort_keys=True)), flush=True)
    # Last: what was built and what was skipped (stderr, so stdout's last line stays the JSON).
    lines = summary_lines(result)
    skips = skips_line(result) if result.built else None
    for line in lines + ([skips] if skips else []) + ([result.grown] if result.grown else []):
        print(redact.text(line), file=sys.stderr)
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
