"""What a command imports: `import vidvol`, registering the datasets, `--help` and the light commands import no TF or Beam.

Each check runs in a fresh interpreter through `import_probe.py`, which names, on failure, the stack that
imported TensorFlow, Apache Beam or OpenCV. OpenCV is allowed only where `import tensorflow_datasets` itself
imports it (TFDS's Image feature does, whenever OpenCV is installed): vidvol adds no import of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import import_probe

TESTS_DIR = pathlib.Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
HEAVY = import_probe.WATCHED  # tensorflow, apache_beam, cv2


def probe(tmp_path, *command: str, timeout: int = 300) -> dict:
    """Runs `command` (`-c CODE` or `-m MODULE ARGS...`) in a fresh interpreter; what it imported, and its exit code."""
    out = tmp_path / f"probe-{len(list(tmp_path.glob('probe-*')))}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "import_probe.py"), str(out), *command], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0 and out.exists(), f"{command}: the probe failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text(encoding="utf-8"))


def by_tfds_import(stack: list[str]) -> bool:
    """Whether a module was imported while `import tensorflow_datasets` ran (TFDS's own imports, not vidvol's)."""
    return any(line.split(":")[0].endswith(os.path.join("tensorflow_datasets", "__init__.py")) for line in stack)


def unwanted(result: dict, allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The heavy modules a run imported beyond `allowed` and TFDS's own import of OpenCV, with their importing stacks."""
    return {m: stack for m, stack in result["imported"].items()
            if m not in allowed and not (m == "cv2" and by_tfds_import(stack))}


def explain(found: dict[str, list[str]]) -> str:
    """Each module with the frames that imported it, vidvol's marked: the failure message."""
    lines = []
    for module, stack in found.items():
        lines.append(f"{module} imported by:")
        lines += [("  > " if line.startswith(str(ROOT)) and "/.venv/" not in line else "    ") + line for line in stack[-14:]]
    return "\n".join(lines)


def assert_light(result: dict, command: str, allowed: tuple[str, ...] = ()) -> None:
    found = unwanted(result, allowed)
    assert not found, f"`{command}` imports {sorted(found)}, which it does not need:\n{explain(found)}"


def test_import_vidvol_imports_no_tensorflow_beam_or_opencv(tmp_path):
    result = probe(tmp_path, "-c", "import vidvol")
    assert_light(result, "import vidvol")


def test_registered_builders_and_their_info_need_no_tensorflow(tmp_path):
    code = ("import vidvol, tensorflow_datasets as tfds\n"
            "for name in ('hmdb51', 'fire_hrr', 'mri_volumes', 'video_folder'):\n"
            "    builder = tfds.builder(name)\n"
            "    assert builder.info.features and builder.__module__.startswith('vidvol.datasets'), name\n")
    result = probe(tmp_path, "-c", code)
    assert result["exit"] == 0
    assert_light(result, "tfds.builder(NAME).info")


def test_help_imports_no_tensorflow_beam_or_opencv(tmp_path):
    result = probe(tmp_path, "-m", "vidvol", "--help")
    assert result["exit"] == 0
    assert_light(result, "python -m vidvol --help")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["verify", "pull", "push", "report"])
def test_command_help_imports_no_tensorflow_beam_or_opencv(tmp_path, command):
    result = probe(tmp_path, "-m", "vidvol", command, "--help")
    assert result["exit"] == 0
    assert_light(result, f"python -m vidvol {command} --help")


@pytest.mark.slow
def test_verify_of_a_dataset_imports_no_beam(tmp_path):
    """A real verify parses records as the dataset's `tf.train.Example` (TensorFlow), and needs no Beam."""
    from conftest import in_process_config

    from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder as mri
    from vidvol.testing import samples

    manual, data_dir = tmp_path / "manual", tmp_path / "data"
    samples.write_mri_volumes(str(manual), num_subjects=4, shape=(8, 8, 8))
    mri.Builder(data_dir=str(data_dir), config="small_32").download_and_prepare(
        download_config=in_process_config(manual_dir=str(manual)))
    result = probe(tmp_path, "-m", "vidvol", "verify", "mri_volumes/small_32", "--data_dir", str(data_dir))
    assert result["exit"] == 0
    assert_light(result, "python -m vidvol verify", allowed=("tensorflow",))
    assert "tensorflow" in result["imported"]  # the parse check ran


# The check itself: it must see an import and name who made it, or the tests above prove nothing.


@pytest.mark.slow  # imports Beam (seconds)
def test_the_probe_names_the_module_that_imports_beam(tmp_path):
    result = probe(tmp_path, "-c", "import vidvol.builders.examples_from_sources")
    found = unwanted(result)
    assert "apache_beam" in found
    assert any("builders/examples_from_sources.py" in line for line in found["apache_beam"]), explain(found)
    assert "examples_from_sources.py" in explain(found)


@pytest.mark.slow
def test_the_read_side_imports_tensorflow_on_first_use(tmp_path):
    result = probe(tmp_path, "-c", "import vidvol\nvidvol.load")
    found = unwanted(result)
    assert "tensorflow" in found and "apache_beam" not in found, explain(found)
    assert any(line.startswith(str(ROOT / "__init__.py")) for line in found["tensorflow"]), explain(found)


def test_a_probe_of_find_spec_is_no_import(tmp_path):
    result = probe(tmp_path, "-c", "import importlib.util\nassert importlib.util.find_spec('apache_beam')")
    assert result["imported"] == {}
