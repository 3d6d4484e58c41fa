"""Runner option sets: unknown/invalid/missing options, every recipe of docs/clusters.md parsed by Beam, counters."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import shlex

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from vidvol.beam_jobs import build
from vidvol.beam_jobs import runners
from vidvol.beam_jobs import worker_env

README = pathlib.Path(__file__).resolve().parents[2] / "docs" / "clusters.md"  # the cluster guide (not installed)


def _commands(text: str) -> list[str]:
    """Shell commands of the guide's ```sh blocks, backslash continuations joined."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands.extend(line.strip() for line in joined.splitlines() if line.strip())
    return commands


def _tfds_flags(command: str) -> list[str]:
    """The flags TFDS makes of a `tfds build ... --beam_pipeline_options=V` command (it splits V on commas)."""
    (value,) = [t.split("=", 1)[1] for t in shlex.split(command) if t.startswith("--beam_pipeline_options=")]
    return [f"--{opt}" for opt in value.split(",")]


def _runner_of(beam_runner: str) -> str:
    """Recipe name of a Beam runner class name."""
    beam_runner = runners.RUNNER_ALIASES.get(beam_runner.lower(), beam_runner)
    (name,) = [r.name for r in runners.RECIPES.values() if r.beam_runner == beam_runner]
    return name


def test_unknown_options_found_and_known_ones_pass():
    good = ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t",
            "--worker_machine_type=n2-standard-8", "--extra_package=a.whl", "--experiments=use_runner_v2",
            "--flink_master=h:8081", "--parallelism=4", "--spark_master_url=spark://m:7077", "--save_main_session"]
    assert runners.unknown_options(good) == []
    assert runners.unknown_options(good + ["--temp_locaton=gs://x", "--spark_master=spark://m:7077", "--flagx"]) == [
        "flagx", "spark_master", "temp_locaton"]
    with pytest.raises(runners.UnknownOptionError, match=r"--temp_locaton \(did you mean --temp_location"):
        runners.check_flags(good + ["--temp_locaton=gs://x"])
    with pytest.raises(runners.InvalidOptionError, match="flink_version"):
        runners.check_flags(["--flink_version=0.9"])
    with pytest.raises(runners.InvalidOptionError, match="parallelism"):
        runners.check_flags(["--parallelism=many"])


def test_pipeline_flags_per_runner():
    direct = runners.pipeline_flags("direct")
    values = PipelineOptions(direct).get_all_options()
    assert values["runner"] == "DirectRunner" and values["direct_running_mode"] == "multi_processing"
    assert values["direct_num_workers"] == runners.default_num_workers()
    assert PipelineOptions(runners.pipeline_flags("direct", ["--direct_num_workers=3"])).get_all_options()[
        "direct_num_workers"] == 3
    for name, spec in runners.RECIPES.items():
        if spec.required:
            with pytest.raises(runners.MissingOptionError, match=spec.flag(spec.required[0])):
                runners.pipeline_flags(name, [])
    flags = runners.pipeline_flags("flink", ["--flink_master=jm:8081", "--runner=SparkRunner"])
    assert flags[0] == "--runner=FlinkRunner" and "--runner=SparkRunner" not in flags
    with pytest.raises(ValueError, match="Unknown runner 'prism'"):
        runners.pipeline_flags("prism")


def test_ships_vidvol_needs_an_image_or_package_on_remote_runners():
    base = ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"]
    assert not runners.ships_vidvol("dataflow", base)
    assert runners.ships_vidvol("dataflow", base + ["--sdk_container_image=img"])
    assert runners.ships_vidvol("dataflow", base + ["--extra_package=dist/vidvol.whl"])
    assert not runners.ships_vidvol("flink", ["--flink_master=jm:8081", "--environment_type=DOCKER"])
    assert runners.ships_vidvol("flink", ["--flink_master=jm:8081", "--environment_type=EXTERNAL"])
    assert runners.ships_vidvol("direct", [])


def test_tfds_pipeline_options_round_trip():
    flags = runners.pipeline_flags("portable", ["--job_endpoint=localhost:8099", "--environment_type=EXTERNAL",
                                                "--environment_config=127.0.0.1:5"])
    value = runners.tfds_beam_pipeline_options(flags)
    # What `tfds build --beam_pipeline_options=VALUE` does with it (cli_utils.download_and_prepare):
    again = PipelineOptions([f"--{opt}" for opt in value.split(",")]).get_all_options(drop_default=True)
    assert again == PipelineOptions(flags).get_all_options(drop_default=True)
    assert again["environment_config"] == "127.0.0.1:5"
    with pytest.raises(ValueError, match="comma"):
        runners.tfds_beam_pipeline_options(["--experiments=a,b"])


def test_every_readme_recipe_parses_with_the_installed_beam():
    commands = _commands(README.read_text())
    ours = [c for c in commands if c.startswith("python -m vidvol.beam_jobs.build ") and "NAME" not in c]
    tfds_cmds = [c for c in commands if c.startswith("tfds build ")]
    assert len(ours) >= 9 and len(tfds_cmds) >= 5
    seen = set()
    for command in ours:
        args, beam_flags = build.parse_args(shlex.split(command)[3:])
        if args.local_services:
            runners.check_flags(beam_flags)
        else:
            flags = runners.pipeline_flags(args.runner, beam_flags)
            assert runners.ships_vidvol(args.runner, flags), command
        seen.add(args.runner)
        assert args.data_dir and args.manual_dir
    for command in tfds_cmds:
        flags = _tfds_flags(command)
        runner = _runner_of(runners.option_values(flags)["runner"])
        assert runners.pipeline_flags(runner, flags)[0].endswith(runners.RECIPES[runner].beam_runner), command
        seen.add(runner)
    assert seen == set(runners.RECIPES)


def test_readme_table_lists_every_runner_and_what_ran():
    text = README.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `(\w+)`", r).group(1) for r in rows] == list(runners.RECIPES)
    for row, spec in zip(rows, runners.RECIPES.values()):
        assert row.rstrip(" |").split("|")[-1].strip().startswith("yes" if spec.tested_here else "options checked only")


def test_cli_parse_args_and_dry_run(capsys):
    args, flags = build.parse_args(["hmdb51/split1_20x64x64", "--data_dir", "/d", "--runner", "dataflow",
                                    "--project=p", "--region=r", "--temp_location=gs://b/t", "--num_shards", "8"])
    assert args.runner == "dataflow" and args.num_shards == 8
    assert flags == ["--project=p", "--region=r", "--temp_location=gs://b/t"]
    with pytest.raises(ValueError, match=r"Unexpected arguments \['stray'\]"):
        build.parse_args(["hmdb51", "--data_dir", "/d", "stray"])
    assert build.main(["hmdb51", "--data_dir", "/d", "--runner", "dataflow", "--project=p", "--region=r",
                       "--temp_location=gs://b/t", "--sdk_container_image=img", "--max_shard_size_mb", "64",
                       "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "--runner=DataflowRunner" in out
    assert ("--beam_pipeline_options=runner=DataflowRunner,project=p,region=r,temp_location=gs://b/t,"
            "sdk_container_image=img") in out and "--max_shard_size_mb 64" in out
    assert build.main(["hmdb51", "--data_dir", "/d", "--runner", "dataflow", "--project=p", "--dry_run"]) == 2
    assert "needs --region, --temp_location" in capsys.readouterr().err


def test_parse_dataset():
    assert build.parse_dataset("hmdb51") == ("hmdb51", None, None)
    assert build.parse_dataset("hmdb51/split2_16x112x112:1.0.0") == ("hmdb51", "split2_16x112x112", "1.0.0")
    with pytest.raises(ValueError, match="NAME/CONFIG"):
        build.parse_dataset("a/b/c")


def test_worker_requirements_pin_the_driver_versions():
    pins = dict(p.split("==") for p in worker_env.pinned_requirements())
    assert pins["apache-beam"] == beam.__version__
    assert pins["opencv-python-headless"] == importlib.metadata.version("opencv-python-headless")
    assert pins["nibabel"] == importlib.metadata.version("nibabel")
    assert pins["tensorflow-datasets"] == importlib.metadata.version("tensorflow-datasets")
    assert "not-a-real-dist" not in dict(p.split("==") for p in worker_env.pinned_requirements(["not-a-real-dist", "numpy"]))


def _resolved(runner, flags):
    run, options = runners.resolve(runner, PipelineOptions(flags) if flags is not None else None)
    values = options.get_all_options()
    return type(run).__name__, values["direct_num_workers"], values["direct_running_mode"]


def test_resolve_defaults_to_all_cores_but_keeps_explicit_choices():
    cores = runners.default_num_workers()
    assert _resolved(None, None) == ("FnApiRunner", cores, "multi_processing")
    assert _resolved(None, ["--runner=DirectRunner"]) == ("FnApiRunner", cores, "multi_processing")
    # Explicitly asking for Beam's own defaults (1 worker, in memory) must not be overridden.
    assert _resolved(None, list(IN_MEMORY_FLAGS)) == ("FnApiRunner", 1, "in_memory")
    assert _resolved("DirectRunner", list(IN_MEMORY_FLAGS)) == ("FnApiRunner", 1, "in_memory")
    assert _resolved(None, ["--direct_num_workers=3"]) == ("FnApiRunner", 3, "multi_processing")
    run, options = runners.resolve(None, PipelineOptions(["--runner=PortableRunner", "--job_endpoint=localhost:1"]))
    assert run is None and options.get_all_options()["job_endpoint"] == "localhost:1"


IN_MEMORY_FLAGS = ("--direct_num_workers=1", "--direct_running_mode=in_memory")


def test_pipeline_flags_keep_an_explicit_in_memory_run():
    values = PipelineOptions(runners.pipeline_flags("direct", list(IN_MEMORY_FLAGS))).get_all_options()
    assert (values["direct_num_workers"], values["direct_running_mode"]) == (1, "in_memory")


SPACED = ["--runner", "dask", "--dask_client_address", "tcp://127.0.0.1:8786", "--save_main_session",
          "--experiments", "a", "--experiments", "b", "--direct_num_workers", "2"]
JOINED = ["--runner=dask", "--dask_client_address=tcp://127.0.0.1:8786", "--save_main_session",
          "--experiments=a", "--experiments=b", "--direct_num_workers=2"]


@pytest.mark.parametrize("argv", [
    ["mri_volumes/small_32", "--data_dir", "/d", "--manual_dir", "/m", *SPACED],
    ["mri_volumes/small_32", "--data_dir=/d", "--manual_dir=/m", *JOINED],
    [*SPACED, "mri_volumes/small_32", "--manual_dir", "/m", "--data_dir", "/d"],  # options before the dataset
], ids=["spaced", "joined", "before-positional"])
def test_beam_options_as_users_type_them(argv):
    args, flags = build.parse_args(argv)
    assert (args.dataset, args.data_dir, args.manual_dir, args.runner) == ("mri_volumes/small_32", "/d", "/m", "dask")
    assert flags == ["--dask_client_address=tcp://127.0.0.1:8786", "--save_main_session", "--experiments=a",
                     "--experiments=b", "--direct_num_workers=2"]
    values = runners.option_values(flags)  # what Beam itself parses out of them
    assert values["address"] == "tcp://127.0.0.1:8786" and values["save_main_session"] is True
    assert values["experiments"] == ["a", "b"] and values["direct_num_workers"] == 2


def test_unknown_or_incomplete_beam_options_name_the_fix(capsys):
    base = ["mri_volumes/small_32", "--data_dir", "/d"]
    with pytest.raises(runners.UnknownOptionError, match=r"--dask_client_adress \(did you mean --dask_client_address"):
        build.parse_args(base + ["--runner", "dask", "--dask_client_adress", "tcp://127.0.0.1:8786"])
    with pytest.raises(runners.UnknownOptionError, match=r"--manual_dri \(did you mean --manual_dir\?"):
        build.parse_args(base + ["--manual_dri", "/m"])
    with pytest.raises(ValueError, match="--project needs a value"):
        build.parse_args(base + ["--project", "--region=r"])
    assert build.main(base + ["--runner", "dask", "--dask_client_adress", "tcp://127.0.0.1:8786", "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown option --dask_client_adress (did you mean --dask_client_address")
    assert "Traceback" not in err


def test_dry_run_is_the_same_for_both_spellings(capsys):
    outs = []
    for form in (["--project", "p", "--region", "r", "--temp_location", "gs://b/t", "--sdk_container_image", "img"],
                 ["--project=p", "--region=r", "--temp_location=gs://b/t", "--sdk_container_image=img"]):
        assert build.main(["hmdb51", "--data_dir", "/d", "--runner", "dataflow", *form, "--dry_run"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and "--project=p" in outs[0]
