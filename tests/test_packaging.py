"""vidvol as users install it: the wheel and the sdist, in fresh venvs that do not see the checkout.

Each distribution is built from a clean copy of the checkout, installed with `--no-deps` into a
venv that borrows its dependencies through a `.pth` path entry (never the editable finder), and
used from a folder outside the repository: `import vidvol`, `tfds.list_builders()`, the `vidvol`
console script, `tfds build` of every dataset from the dummy data *inside the installed package*
(so a missing data file fails the build), and `vidvol.load` of every split built.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

import installed

pytestmark = pytest.mark.slow  # builds distributions and venvs, runs tfds build in subprocesses

# What each dataset is built as from its installed dummy data: (tfds build spec, manual_dir inside the package).
BUILDS = {
    "hmdb51": ("hmdb51", "hmdb51/dummy_data"),  # the default config, as `tfds build hmdb51` gives
    "fire_hrr": ("fire_hrr/161x135x240", "fire_hrr/dummy_data"),
    "mri_volumes": ("mri_volumes/small_32", "mri_volumes/dummy_data"),
    "video_folder": ("video_folder", "video_folder/dummy_data/folders"),
}
assert set(BUILDS) == set(installed.DATASETS)

CHECK_IMPORT = r"""
import json, sys, tensorflow_datasets as tfds, vidvol
print(json.dumps({"file": vidvol.__file__, "version": vidvol.__version__,
                  "builders": sorted(set(tfds.list_builders(with_community_datasets=False)) & set(sys.argv[1:])),
                  "checkout_on_path": [p for p in sys.path if p.rstrip("/") == sys.argv[0]]}))
"""

READ_BACK = r"""
import json, sys
import numpy as np, tensorflow_datasets as tfds, vidvol
data_dir, specs = sys.argv[1], sys.argv[2:]
out = {}
for spec in specs:
    builder = tfds.builder(spec, data_dir=data_dir)
    for split, info in builder.info.splits.items():
        ds = vidvol.load(builder.info.full_name.rsplit("/", 1)[0], split, batch_size=2, data_dir=data_dir,
                         training=False)
        n, shapes = 0, None
        for (x, mask), y in ds.as_numpy_iterator():
            n += x.shape[0]
            assert np.isfinite(x).all() and mask.shape[0] == x.shape[0] == y.shape[0]
            shapes = [list(x.shape[1:]), list(mask.shape[1:])]
        out[f"{spec}:{split}"] = {"read": n, "recorded": info.num_examples, "shapes": shapes}
print(json.dumps(out))
"""


def test_wheel_holds_every_module_and_data_file(distributions):
    files = set(installed.wheel_files(distributions["wheel"]))
    expected = {f"vidvol/{p}" for p in installed.installable_files()}
    assert expected - files == set(), "files of the package missing from the wheel"
    assert "vidvol/datasets/video_folder/video_folder_dataset_builder.py" in files
    for name in installed.DATASETS:
        assert any(f.startswith(f"vidvol/datasets/{name}/dummy_data/") for f in files), name
        assert f"vidvol/datasets/{name}/README.md" in files
    extra = {f for f in files if not f.startswith("vidvol-") } - expected
    assert extra == set(), "files in the wheel that the checkout does not install"
    meta = [f for f in files if f.endswith("entry_points.txt")]
    assert meta and "vidvol = vidvol.__main__:main" in _read_zip(distributions["wheel"], meta[0])


def _read_zip(path, name):
    import zipfile

    with zipfile.ZipFile(path) as z:
        return z.read(name).decode()


def test_sdist_holds_everything_the_wheel_is_built_from(distributions):
    files = set(installed.sdist_files(distributions["sdist"]))
    needed = set(installed.installable_files()) | {"setup.py", "setup.cfg", "pyproject.toml", "README.md"}
    assert needed - files == set()


@pytest.mark.parametrize("kind", ["wheel", pytest.param("sdist", marks=pytest.mark.long)])
def test_installed_vidvol_builds_and_reads_every_dataset(kind, request, tmp_path):
    env: installed.InstalledEnv = request.getfixturevalue(f"{kind}_env")
    work = tmp_path / "outside"  # not the checkout, not below it
    work.mkdir()
    assert installed.REPO not in work.parents
    script = work / "check_import.py"
    script.write_text(CHECK_IMPORT)
    seen = json.loads(env.run(["python", str(script), *installed.DATASETS], work).stdout.strip().splitlines()[-1])
    assert pathlib.Path(seen["file"]).is_relative_to(env.package_dir.parent), seen["file"]
    assert seen["builders"] == sorted(installed.DATASETS)
    assert env.run([str(env.root / "bin" / "vidvol"), "--help"], work).stdout.startswith("usage: python -m vidvol")

    manual = work / "manual"
    for name, (_, inside) in BUILDS.items():
        (manual / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(env.package_dir / "datasets" / inside, manual / name)
    data_dir = work / "data"
    specs = [spec for spec, _ in BUILDS.values()]
    proc = env.run(["python", "-m", "tensorflow_datasets.scripts.cli.main", "build", *specs, "--imports", "vidvol",
                    "--manual_dir", str(manual), "--add_name_to_manual_dir", "--data_dir", str(data_dir)], work)
    for name in installed.DATASETS:
        assert f"{name}/" in proc.stderr + proc.stdout, f"no summary of {name}"
    script = work / "read_back.py"
    script.write_text(READ_BACK)
    result = json.loads(env.run(["python", str(script), str(data_dir), *specs], work).stdout.strip().splitlines()[-1])
    assert {key.split(":")[0] for key in result} == set(specs)
    for key, r in result.items():
        assert r["read"] == r["recorded"] > 0, key
        assert r["shapes"] and all(d > 0 for d in r["shapes"][0]), key
