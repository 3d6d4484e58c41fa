"""Beam runner defaults and option sets: the one place that knows about runners.

Builds never need the internet: apache-beam 2.77's `DirectRunner` first tries to download a
Prism binary, so "direct" here always means Beam's `FnApiRunner` (the engine behind the direct
runner), multi-process with one SDK worker per core — or, for a build of at most
`SMALL_BUILD_SOURCES` inputs whose worker count/mode the user did not choose, one in-process worker
(starting a worker process per core, each importing TensorFlow, costs more than such a build).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import io
import logging
from typing import Any
from collections.abc import Mapping, Sequence

from apache_beam.options import pipeline_options as po

from vidvol.builders.writer import build_log
from vidvol.core import system

logger = logging.getLogger(__name__)

# Runner names that mean "run it here"; all of them map to the FnApiRunner.
LOCAL_RUNNER_NAMES = ("", "direct", "directrunner", "fnapirunner", "bundlebasedrunner")
# Beam 2.77 knows the Dask runner only by its module path; these short names work too.
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RUNNER_ALIASES = {"dask": DASK_RUNNER, "daskrunner": DASK_RUNNER}
# A local build of at most this many inputs runs in this process, with one worker, unless the user
# chose `direct_num_workers` or `direct_running_mode`: starting one SDK worker process per core (each
# importing TensorFlow and Beam) costs more than such a build's work (the worker start-up, not the
# decoding, is what a build of a few inputs waits for).
SMALL_BUILD_SOURCES = 50
# Set on a FnApiRunner whose worker count and mode are vidvol's defaults rather than the user's choice
# (see `mark_default_workers`), so that a small build may still run in-process.
_DEFAULT_WORKERS_ATTR = "_vidvol_default_workers"


class UnknownOptionError(ValueError):
    """A flag that the installed Beam's PipelineOptions do not define (usually a misspelling)."""


class InvalidOptionError(ValueError):
    """A known option with a value Beam's parser rejects (not a choice, not a number, ...)."""


class MissingOptionError(ValueError):
    """A runner was picked without an option it cannot run without."""


@dataclasses.dataclass(frozen=True)
class RunnerRecipe:
    """What one runner choice means: Beam runner class, required options, how workers get vidvol.

    `RECIPES` names, per runner a user can pick (`direct`, `portable`, `dask`, `flink`, `spark`,
    `dataflow`), the Beam runner class, the options it cannot run without and what it needs so its
    workers can import vidvol; `pipeline_flags` turns a runner name plus user flags into a checked
    flag list, and `unknown_options` catches a misspelled option before a cluster job is submitted.
    """

    name: str  # the `--runner` choice of `python -m vidvol.beam_jobs.build`
    beam_runner: str  # the Beam `--runner` value
    required: tuple[str, ...] = ()  # option keys it cannot run without; "a|b": either will do
    worker_env: tuple[str, ...] = ()  # one of these ships vidvol + OpenCV + nibabel to the workers
    tested_here: bool = False  # run for real by `make test`
    note: str = ""
    flag_names: tuple[tuple[str, str], ...] = ()  # (option key, command-line flag) where they differ

    def flag(self, key: str) -> str:
        """The command-line spelling of a required entry: `--flag` (or `--a or --b` for "a|b")."""
        names = dict(self.flag_names)
        return " or ".join("--" + names.get(k, k) for k in key.split("|"))


RECIPES: dict[str, RunnerRecipe] = {
    r.name: r
    for r in (
        RunnerRecipe(
            "direct", "DirectRunner", tested_here=True,
            note="FnApiRunner, multi-process, one SDK worker per core; never downloads Prism",
        ),
        RunnerRecipe(
            "portable", "PortableRunner", required=("job_endpoint",), tested_here=True,
            note="any Beam job service; `--local_services` starts a loopback job service + worker pool here",
        ),
        RunnerRecipe(
            "dask", DASK_RUNNER, required=("address|scheduler_file",), tested_here=True,
            note="dask.distributed: an existing scheduler (`--dask_client_address`), or `--local_services`",
            flag_names=(("address", "dask_client_address"), ("scheduler_file", "dask_scheduler_file")),
        ),
        RunnerRecipe(
            "flink", "FlinkRunner", required=("flink_master",),
            worker_env=("sdk_container_image", "environment_type=EXTERNAL", "environment_type=PROCESS"),
            note="Beam starts a Flink job server (Maven jar, or --flink_job_server_jar) next to the driver",
        ),
        RunnerRecipe(
            "spark", "SparkRunner", required=("spark_master_url",),
            worker_env=("sdk_container_image", "environment_type=EXTERNAL", "environment_type=PROCESS"),
            note="Beam starts a Spark job server (Maven jar, or --spark_job_server_jar) next to the driver",
        ),
        RunnerRecipe(
            "dataflow", "DataflowRunner", required=("project", "region", "temp_location"),
            worker_env=("sdk_container_image", "setup_file", "extra_packages"),
            note="needs apache-beam[gcp] on the driver; manual_dir must be readable as a local path by workers",
        ),
    )
}


def default_num_workers() -> int:
    """Number of local SDK workers: all cores this process may use."""
    return system.num_cpus()


def register_dask_options() -> bool:
    """Imports Beam's Dask runner so PipelineOptions knows `--dask_client_address` & co.; False without dask."""
    try:
        from apache_beam.runners.dask import dask_runner  # noqa: F401
    except ImportError:
        return False
    return True


def _runner_name(options: po.PipelineOptions | None) -> str:
    """The runner an options object names ("" for none), aliases expanded."""
    if options is None:
        return ""
    runner = options.view_as(po.StandardOptions).runner
    if runner is None:
        return ""
    name = runner if isinstance(runner, str) else type(runner).__name__
    return RUNNER_ALIASES.get(name.lower(), name)


def is_local(options: po.PipelineOptions | None) -> bool:
    """True when the options ask for no particular runner or for the direct runner."""
    if options is None:
        return True
    runner = options.view_as(po.StandardOptions).runner
    if runner is None:
        return True
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.lower() in LOCAL_RUNNER_NAMES


def is_small_build(num_sources: int | None) -> bool:
    """Whether a local build of `num_sources` inputs runs in-process by default (see SMALL_BUILD_SOURCES)."""
    return num_sources is not None and num_sources <= SMALL_BUILD_SOURCES


def mark_default_workers(runner: Any) -> Any:
    """Marks a FnApiRunner resolved without the user choosing its workers (a small build may shrink it)."""
    setattr(runner, _DEFAULT_WORKERS_ATTR, True)
    return runner


def chooses_workers(flags: Sequence[str]) -> bool:
    """Whether `flags` set `direct_num_workers` or `direct_running_mode` (then a small build keeps them)."""
    options = po.PipelineOptions(list(flags))
    return _is_set(options, "direct_num_workers") or _is_set(options, "direct_running_mode")


def _small_build_flags(flags: Sequence[str], num_sources: int) -> list[str]:
    """`flags` with one in-process worker instead of the default worker processes; logs the choice."""
    logger.info(
        "small build (%d sources): one in-process worker (set --direct_num_workers or --direct_running_mode "
        "to choose)", num_sources, extra=build_log.CONSOLE,
    )
    kept = [f for f in flags if not f.startswith(("--direct_num_workers", "--direct_running_mode"))]
    return kept + ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def resolve(
    runner: Any = None, options: po.PipelineOptions | None = None, num_tasks: int | None = None,
    num_sources: int | None = None, manual_dir: str | None = None,
) -> tuple[Any, po.PipelineOptions]:
    """Returns the (runner, options) a build runs with, replacing the direct runner by the FnApiRunner.

    Local runs default to multi-process, one SDK worker per core, WARNING-level worker logs; any of
    these the caller set explicitly (even to Beam's default, e.g. `direct_running_mode=in_memory`
    or `direct_num_workers=1`) is kept. When neither the worker count nor the mode was chosen and
    the build plans at most SMALL_BUILD_SOURCES inputs (`num_sources`), it runs in this process
    with one worker (logged once). On Dask, `num_tasks` work items get one partition each (Beam's
    DaskRunner otherwise puts up to 128 elements in one partition, i.e. on one worker); once the
    shard tasks are known (`num_tasks`), every Dask worker is asked first whether it imports vidvol
    and can read `manual_dir` (`dask_cluster.check_workers`: one error naming each worker that
    cannot, and the fix, instead of failed or hanging tasks).
    """
    if runner is not None and not isinstance(runner, str):
        from vidvol.beam_jobs import dask_runner

        if isinstance(runner, dask_runner.DaskRunner):  # resolved before the shard tasks were known
            return runner, _dask_options(options or po.PipelineOptions([]), num_tasks, manual_dir)
        if getattr(runner, _DEFAULT_WORKERS_ATTR, False) and is_small_build(num_sources):
            from apache_beam.runners.portability.fn_api_runner import FnApiRunner

            return FnApiRunner(), po.PipelineOptions(_small_build_flags(_flags(options), num_sources))
        return runner, options or po.PipelineOptions([])
    original = options
    if runner is not None:
        options = po.PipelineOptions([f"--runner={runner}"] + _flags(options))
    if _runner_name(options) == DASK_RUNNER:
        from vidvol.beam_jobs import dask_runner

        return dask_runner.DaskRunner(), _dask_options(options, num_tasks, manual_dir)
    if not is_local(options):
        return None, options
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    flags = [f for f in _flags(options) if not f.startswith("--runner")]
    given = original.get_all_options(retain_unknown_options=True) if original is not None else {}
    defaults = {
        "direct_num_workers": default_num_workers(),
        "direct_running_mode": "multi_processing",
        "default_sdk_harness_log_level": "WARNING",
    }
    chosen = _is_set(original, "direct_num_workers") or _is_set(original, "direct_running_mode")
    for name, default in defaults.items():
        value = given.get(name) if _is_set(original, name) else default
        flags = [f for f in flags if not (f == f"--{name}" or f.startswith(f"--{name}="))]
        flags.append(f"--{name}={value}")
    if not chosen and is_small_build(num_sources):
        return FnApiRunner(), po.PipelineOptions(_small_build_flags(flags, num_sources))
    fn_runner = FnApiRunner()
    return (fn_runner if chosen else mark_default_workers(fn_runner)), po.PipelineOptions(flags)


def _dask_options(
    options: po.PipelineOptions, num_tasks: int | None = None, manual_dir: str | None = None
) -> po.PipelineOptions:
    """Options for Beam's DaskRunner: full runner path, a partition per task, the scheduler checked to answer
    (and, when the tasks are known, its workers checked to import vidvol and read manual_dir)."""
    if not register_dask_options():
        raise ImportError("the dask runner needs `pip install 'apache-beam[dask]'` (dask and distributed)")
    flags = [f for f in _flags(options) if not f.startswith("--runner")]
    given = options.get_all_options(drop_default=True, retain_unknown_options=True)
    if num_tasks and not ({"npartitions", "partition_size", "dask_npartitions", "dask_partition_size"} & set(given)):
        flags.append(f"--dask_npartitions={num_tasks}")
    options = po.PipelineOptions([f"--runner={DASK_RUNNER}", *flags])
    address = options.get_all_options().get("address")
    if address:
        from vidvol.beam_jobs import dask_cluster

        dask_cluster.check_reachable(address)
        if num_tasks is not None:
            dask_cluster.check_workers(address, manual_dir)
    return options


def _is_set(options: po.PipelineOptions | None, name: str) -> bool:
    """Whether option `name` was set explicitly: given as a flag, or changed from its default."""
    if options is None:
        return False
    raw = getattr(options, "_flags", None) or []
    if any(f == f"--{name}" or f.startswith(f"--{name}=") for f in raw):
        return True
    return name in options.get_all_options(drop_default=True, retain_unknown_options=True)


@functools.lru_cache(maxsize=1)
def _beam_actions() -> tuple[tuple[tuple[str, ...], str, bool], ...]:
    """(long flags, option key, takes a value) of every option the installed Beam's PipelineOptions define."""
    register_dask_options()
    parser = po._BeamArgumentParser(allow_abbrev=False)
    todo, seen = list(po.PipelineOptions.__subclasses__()), set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        try:
            cls._add_argparse_args(parser)
        except Exception:  # an option class registered twice, ...
            continue
    out = []
    for action in parser._actions:
        longs = tuple(o[2:] for o in action.option_strings if o.startswith("--"))
        if longs:
            out.append((longs, action.dest, action.nargs != 0))
    return tuple(out)


def _dest_flags() -> dict[str, str]:
    """{option key: command-line flag} where Beam names them differently (Dask: address <- dask_client_address)."""
    return {dest: longs[0] for longs, dest, _ in _beam_actions() if dest not in longs}


def split_beam_flags(argv: Sequence[str], own: Mapping[str, bool]) -> tuple[list[str], list[str]]:
    """A command line -> (the command's own arguments, Beam options as `--name=value` / bare `--flag`).

    `own` maps the command's own flags (`--manual_dir`) to whether each takes a value. Every other
    `--name` is a Beam pipeline option, written `--name value` or `--name=value` as argparse and
    Beam's PipelineOptions take them, booleans (`--save_main_session`) alone, before or after the
    positional arguments. An option that is neither raises UnknownOptionError with the closest names
    among both; a Beam option that needs a value and has none raises ValueError. Words that follow
    no option stay with the command's arguments (its positionals).
    """
    beam = {flag: takes for longs, _, takes in _beam_actions() for flag in longs}
    cli, flags, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        name, eq, _ = token[2:].partition("=")
        if not token.startswith("--") or token == "--" or token in ("-h", "--help"):
            cli.append(token)
            i += 1
            continue
        if "--" + name in own:
            takes = own["--" + name] and not eq and i + 1 < len(argv)
            cli.extend(argv[i:i + 2] if takes else [token])
            i += 2 if takes else 1
            continue
        if name not in beam:
            close = difflib.get_close_matches(name, sorted(set(beam) | {f[2:] for f in own}), n=2)
            hint = f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""
            raise UnknownOptionError(f"Unknown option --{name}{hint}: neither an option of this command nor a Beam "
                                     "pipeline option of the installed apache-beam")
        if eq or not beam[name]:
            flags.append(token)
            i += 1
            continue
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            raise ValueError(f"--{name} needs a value: --{name} VALUE or --{name}=VALUE")
        flags.append(f"--{name}={argv[i + 1]}")
        i += 2
    return cli, flags


def _flags(options: po.PipelineOptions | None) -> list[str]:
    """Flag list of an options object (drops unset values), spelled as Beam parses them back."""
    if options is None:
        return []
    names = _dest_flags()
    out = []
    for dest, value in options.get_all_options(drop_default=True, retain_unknown_options=True).items():
        key = names.get(dest, dest)
        if value is None or value is False:
            continue
        if value is True:
            out.append(f"--{key}")
        elif isinstance(value, list):
            out.extend(f"--{key}={v}" for v in value)
        else:
            out.append(f"--{key}={value}")
    return out


def known_option_names() -> set[str]:
    """Every option name (PipelineOptions key) the installed Beam defines (Dask's too, when installed)."""
    register_dask_options()
    return set(po.PipelineOptions([]).get_all_options())


def _parse(flags: Sequence[str], **kwargs: Any) -> dict[str, Any]:
    """`PipelineOptions(flags).get_all_options(**kwargs)`, with argparse's exit turned into InvalidOptionError."""
    register_dask_options()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return po.PipelineOptions(list(flags)).get_all_options(**kwargs)
    except SystemExit:
        lines = err.getvalue().strip().splitlines() or ["invalid pipeline options"]
        raise InvalidOptionError(f"{lines[-1].split('error: ', 1)[-1]} (in {list(flags)})") from None


def unknown_options(flags: Sequence[str]) -> list[str]:
    """Option names in `flags` that no PipelineOptions class of the installed Beam defines.

    Beam itself only logs "Discarding unparseable args" and runs on without them, so a misspelled
    `--temp_locaton` would otherwise surface as a failed cluster job. A known option with a bad
    value (`--flink_version=9.9`) raises InvalidOptionError.
    """
    given = _parse(flags, retain_unknown_options=True)
    return sorted(set(given) - known_option_names())


def check_flags(flags: Sequence[str]) -> None:
    """Raises UnknownOptionError naming each unknown flag (with the closest known names)."""
    bad = unknown_options(flags)
    if bad:
        known = sorted(known_option_names())
        hints = []
        for name in bad:
            close = difflib.get_close_matches(name, known, n=2)
            hints.append(f"--{name}" + (f" (did you mean {', '.join('--' + c for c in close)}?)" if close else ""))
        raise UnknownOptionError(f"Unknown Beam pipeline options: {'; '.join(hints)}")


def option_values(flags: Sequence[str]) -> dict[str, Any]:
    """The options `flags` set, by PipelineOptions key (defaults dropped)."""
    return _parse(flags, drop_default=True, retain_unknown_options=True)


def missing_options(runner: str, flags: Sequence[str]) -> list[str]:
    """Required options of `runner` that `flags` leave unset."""
    values = option_values(flags)
    return [
        key for key in recipe(runner).required
        if all(values.get(name) in (None, "", []) for name in key.split("|"))
    ]


def ships_vidvol(runner: str, flags: Sequence[str]) -> bool:
    """Whether `flags` give the runner's workers a way to import vidvol (its `worker_env` options)."""
    spec = recipe(runner)
    if not spec.worker_env:
        return True
    values = option_values(flags)
    for need in spec.worker_env:
        name, _, wanted = need.partition("=")
        value = values.get(name)
        if value not in (None, "", []) and (not wanted or str(value) == wanted):
            return True
    return False


def recipe(runner: str) -> RunnerRecipe:
    """The recipe of a runner choice; ValueError naming the valid choices otherwise."""
    try:
        return RECIPES[runner]
    except KeyError:
        raise ValueError(f"Unknown runner {runner!r}: expected one of {sorted(RECIPES)}") from None


def pipeline_flags(runner: str, flags: Sequence[str] = (), *, num_workers: int | None = None) -> list[str]:
    """`--runner=...` plus `flags`, checked: no unknown option, no missing required option.

    For `direct`, `num_workers` (default: all cores) sets `--direct_num_workers` and the run is
    multi-process; for other runners the flags pass through as given.
    """
    spec = recipe(runner)
    flags = [f for f in flags if not f.startswith("--runner=") and f != "--runner"]
    if runner == "direct":
        given = po.PipelineOptions(flags)
        if num_workers is not None or not _is_set(given, "direct_num_workers"):
            flags = [f for f in flags if not f.startswith("--direct_num_workers")]
            flags.append(f"--direct_num_workers={num_workers or default_num_workers()}")
        if not _is_set(given, "direct_running_mode"):
            flags.append("--direct_running_mode=multi_processing")
    out = [f"--runner={spec.beam_runner}", *flags]
    check_flags(out)
    missing = missing_options(runner, out)
    if missing:
        raise MissingOptionError(f"Runner {runner!r} needs {', '.join(spec.flag(m) for m in missing)}")
    if not ships_vidvol(runner, out):
        logger.warning(
            "Runner %r: none of %s is set, so its workers get Beam's stock SDK image, which cannot import vidvol",
            runner, ", ".join("--" + n for n in spec.worker_env),
        )
    return out


def tfds_beam_pipeline_options(flags: Sequence[str]) -> str:
    """The `tfds build --beam_pipeline_options=` value for `flags` (TFDS splits it on commas)."""
    parts = []
    for flag in flags:
        if not flag.startswith("--"):
            raise ValueError(f"Expected a --name[=value] flag, got {flag!r}")
        if "," in flag:
            raise ValueError(f"{flag!r} holds a comma, which `tfds build --beam_pipeline_options` cannot carry")
        parts.append(flag[2:])
    return ",".join(parts)
