"""vidvol as users install it: a wheel and an sdist built from the checkout, each in a fresh venv.

`build_distributions(out)` copies the checkout's files (what git tracks, plus untracked files git
does not ignore: no stale `build/`, no `.venv`) to a clean folder and builds the sdist and the wheel
there with setuptools' PEP 517 backend, the way `pip wheel .` / `python -m build` do.

`InstalledEnv.create(root, dist)` makes a venv with no pip and no packages of its own, installs
`dist` (the wheel, or the sdist, which pip builds into a wheel first) with `--no-deps`, and borrows
every dependency from the test interpreter's site-packages through a `.pth` *path entry*. A path
entry only appends the folder to `sys.path`; it does not run the `.pth` files inside it, so the
checkout's editable finder (`__editable__.vidvol-*.pth`) never runs there, and `import vidvol`
finds the installed copy or nothing. `env()` is a process environment for it that does not see the
checkout either (no PYTHONPATH; commands run from a folder outside the repository).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[1]
DATASETS = ("hmdb51", "fire_hrr", "mri_volumes", "video_folder")
NOT_INSTALLED = ("tests", "benchmarks", "examples", "docs")  # repository tools (setup.py's NOT_INSTALLED)


def source_files(repo: pathlib.Path = REPO) -> list[str]:
    """The checkout's files as a clone plus the working tree would have them (tracked + untracked, not ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         capture_output=True, check=True).stdout
    return sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p and (repo / p).is_file())


def installable_files(repo: pathlib.Path = REPO) -> list[str]:
    """What the wheel must hold, as paths inside `vidvol/`: every file of the package's folders.

    The root's own `.py` modules; every file under a subpackage folder (modules, cards, citations,
    tags, checksums, dummy data, the worker Dockerfile), except the repository tools and `setup.py`.
    """
    out = []
    for path in source_files(repo):
        parts = pathlib.PurePosixPath(path).parts
        if parts[0] in NOT_INSTALLED or parts[0].startswith("."):
            continue
        if len(parts) == 1:
            if path.endswith(".py") and path != "setup.py":
                out.append(path)
            continue
        if (repo / parts[0] / "__init__.py").is_file():
            out.append(path)
    return sorted(out)


def build_distributions(out: pathlib.Path) -> dict[str, pathlib.Path]:
    """{"sdist": path, "wheel": path} built from a clean copy of the checkout."""
    src = out / "src"
    for rel in source_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)
    dist = out / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    code = ("import sys, setuptools.build_meta as b; d = sys.argv[1]; "
            "print('DIST', b.build_sdist(d)); print('DIST', b.build_wheel(d))")
    proc = subprocess.run([sys.executable, "-c", code, str(dist)], cwd=src, capture_output=True, text=True,
                          env=_clean_env(), timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"building the distributions failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    sdist, wheel = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("DIST ")]
    return {"sdist": dist / sdist, "wheel": dist / wheel}


def wheel_files(wheel: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return sorted(n for n in z.namelist() if not n.endswith("/"))


def sdist_files(sdist: pathlib.Path) -> list[str]:
    """Paths inside the sdist, without its top folder (`vidvol-0.2.0/`)."""
    with tarfile.open(sdist) as t:
        return sorted(m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile() and "/" in m.name)


def _clean_env(**extra: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "PIP_DISABLE_PIP_VERSION_CHECK")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PIP_NO_INDEX="1", **extra)
    return env


@dataclasses.dataclass
class InstalledEnv:
    """A fresh venv holding only vidvol (installed from `dist`) and a path entry to the test venv's packages."""

    root: pathlib.Path
    dist: pathlib.Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def site_packages(self) -> pathlib.Path:
        return pathlib.Path(glob.glob(str(self.root / "lib" / "python3*" / "site-packages"))[0])

    @property
    def package_dir(self) -> pathlib.Path:
        return self.site_packages / "vidvol"

    @classmethod
    def bare(cls, root: pathlib.Path) -> InstalledEnv:
        """A venv with the borrowed dependencies and no vidvol (what a worker host that forgot it has)."""
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True, env=_clean_env(), timeout=120)
        env = cls(root, root)
        (env.site_packages / "_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        return env

    @classmethod
    def create(cls, root: pathlib.Path, dist: pathlib.Path) -> InstalledEnv:
        env = dataclasses.replace(cls.bare(root), dist=dist)
        # --ignore-installed: the test venv's editable vidvol is visible through the path entry; never touch it.
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", env.python, "install", "--no-deps", "--no-build-isolation",
             "--ignore-installed", "--no-compile", "-q", str(dist)],
            capture_output=True, text=True, env=_clean_env(), cwd=root, timeout=600,
        )
        if proc.returncode != 0:
            raise AssertionError(f"pip install {dist.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        return env

    def env(self, **extra: str) -> dict[str, str]:
        """A process environment for this venv: its bin/ first, no PYTHONPATH, no AWS_* unless given."""
        env = _clean_env(**extra)
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def run(self, argv: list[str], cwd: pathlib.Path, timeout: int = 600, **extra_env: str) -> subprocess.CompletedProcess:
        """Runs `argv` (a first item "python" means this venv's) in `cwd`; AssertionError with the output if it fails."""
        argv = [self.python if a == "python" else a for a in argv]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=self.env(**extra_env), timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"{argv[:4]}... failed ({proc.returncode}) in {cwd}:\n"
                                 f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
        return proc
