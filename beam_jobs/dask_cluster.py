"""A real dask.distributed cluster on loopback, as separate OS processes, for Beam's DaskRunner.

`LocalDaskCluster` starts a scheduler and one process per worker on 127.0.0.1 and stops them all on exit;
`check_reachable` and `check_workers` ask a cluster, before a build, whether it answers and can import vidvol.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import Any
from collections.abc import Sequence

from vidvol.beam_jobs import local_cluster

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
SCHEDULER_MODULE = "distributed.cli.dask_scheduler"
WORKER_MODULE = "distributed.cli.dask_worker"

_PR_SET_PDEATHSIG = 1
# What a worker started with `share_driver=False` keeps of the driver's environment: the host's own
# basics, never the driver's PYTHONPATH, AWS_* or other credentials.
_HOST_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """preexec_fn: ask Linux to SIGTERM this child when the parent dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except OSError:
        pass


def driver_pythonpath(extra: Sequence[str] = ()) -> list[str]:
    """`extra`, then the driver's `sys.path` entries outside the interpreter's prefixes ('' = cwd).

    These go on the workers' PYTHONPATH, i.e. before their site-packages.
    """
    prefixes = tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    out = [os.path.realpath(p) for p in extra]
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(path) and path not in out and not (path + os.sep).startswith(prefixes):
            out.append(path)
    return out


async def _identity(address: str, timeout: float) -> dict:
    from distributed.core import rpc

    async with rpc(address, timeout=timeout, connection_args=_client_connection_args(address)) as r:
        return await r.identity()


def _client_connection_args(address: str) -> dict:
    """What a client needs to connect to `address`: for `tls://`, the certificates of Dask's configuration
    (`distributed.comm.tls.*`, which a secure `LocalDaskCluster` sets for its `with` block)."""
    if not address.startswith("tls://"):
        return {}
    from distributed.security import Security

    return Security().get_connection_args("client")


def check_reachable(address: str, timeout: float = 5.0) -> dict:
    """Asks the dask scheduler at `address` for its identity; ConnectionError naming it if none answers.

    A refused TCP connection fails at once; a listener that does not speak dask's protocol fails
    after `timeout`. Returns the identity dict (`type`, `id`, `workers`, ...). Runs its own event
    loop, so call it from synchronous code.
    """
    from distributed.comm.addressing import get_address_host_port

    try:
        host, port = get_address_host_port(address)
    except ValueError as e:
        raise ConnectionError(f"{address!r} is not a dask scheduler address (tcp://HOST:PORT): {e}") from e
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"no dask scheduler at {address}: {e.strerror or type(e).__name__}") from e
    try:
        ident = asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))
    except (OSError, TimeoutError) as e:
        detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise ConnectionError(f"no dask scheduler answered at {address} within {timeout:g} s ({detail})") from e
    if not isinstance(ident, dict) or ident.get("type") != "Scheduler":
        raise ConnectionError(f"{address} answered, but not as a dask scheduler: {ident!r}")
    return ident


class LocalDaskCluster:
    """Scheduler + N single-threaded worker processes on 127.0.0.1 for the `with` block.

    `LocalDaskCluster(n_workers=2, log_dir=...)` starts

    - one scheduler, `python -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 0`, which
      writes its address to a scheduler file (that is how the OS-picked port is learnt), and
    - `n_workers` workers, each its own `python -m distributed.cli.dask_worker ... --nworkers 1
      --nthreads 1 --host 127.0.0.1`, so that each worker is one process that can be SIGKILLed alone,

    every process in its own process group (and, on Linux, with a parent-death signal, so a driver
    that dies without running `__exit__` takes them with it), with this interpreter, this cwd and a
    PYTHONPATH made of the driver's `sys.path` entries outside the interpreter's prefixes, so workers
    unpickle whatever the driver can import. Dashboards are off, but scheduler and workers still serve HTTP (/health,
    /metrics) on `--dashboard-address`, which defaults to 0.0.0.0 (the scheduler's to port 8787),
    `--no-dashboard` or not: it is set to 127.0.0.1:0 here, so nothing listens beyond 127.0.0.1.

    Nanny: by default workers run with `--no-nanny`. A SIGKILLed worker then stays dead, the scheduler
    notices the closed connection and reruns its tasks (and recomputes results it held) on the others.
    With `nanny=True` each worker is a child process of a nanny, which restarts a killed worker at once
    (new pid, new address) and enforces the memory limit (kills at 95 %); `worker_pids()` always
    reports the pids that run tasks (from the scheduler), `process_pids()` the processes started here.

    Without a nanny, once the last worker is dead, a pipeline's tasks wait forever: pass a `duration`
    to `wait_until_finish` (it then raises TimeoutError). Beam's DaskRunner opens a `distributed.Client`
    per run and never closes it: close `result.client` after `wait_until_finish`.

    On exit the workers, then the scheduler, get SIGTERM (their process groups), then SIGKILL after a
    grace period; no process started here outlives the `with` block.

    Attributes set by `__enter__`: `address` (tcp://127.0.0.1:PORT), `log_dir`.

    `secure=True` (what `--local_services` uses) makes every connection mutual TLS (`tls://`): a fresh
    certificate and key (Dask's `Security.temporary()`) are written into `log_dir/tls/` (mode 0700, files
    0600), given to the scheduler and the workers, and set in this process's Dask configuration
    (`distributed.comm.tls.*`, `require-encryption`) for the `with` block, so the Beam DaskRunner's client
    and `check_workers` here connect; a process without the key (another local user) cannot. Without it
    (the default, `tcp://`) there is no authentication: any user of this machine can connect to
    127.0.0.1:PORT and run code in the workers, which hold the driver's environment (its `AWS_*` and
    other credential variables); use that only where you trust every local user.

    By default the processes share the driver's world: its interpreter, cwd, environment and a
    PYTHONPATH of its `sys.path` (so workers import what the driver imports, a checkout included).
    `share_driver=False` starts them as separate worker hosts would be: `python` (e.g. a venv where
    vidvol was pip-installed) with only its own packages (plus `pythonpath`), in `cwd`, with the
    host's basic variables (`_HOST_ENV`) plus `env` only: no driver PYTHONPATH, no AWS_* unless `env`
    gives them. `worker_homes=DIR` also gives each worker a folder of its own, as on separate hosts:
    worker i runs in `DIR/worker-i` with `TMPDIR=DIR/worker-i/tmp`.
    """

    def __init__(
        self,
        n_workers: int = 2,
        *,
        log_dir: str | None = None,
        nanny: bool = False,
        memory_limit: str = "4GiB",
        nthreads: int = 1,
        python: str | None = None,
        pythonpath: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        share_driver: bool = True,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        secure: bool = False,
        worker_homes: str | None = None,
    ) -> None:
        self.n_workers = n_workers
        self.worker_homes = worker_homes  # worker i runs in HOMES/worker-i with TMPDIR HOMES/worker-i/tmp
        self.log_dir = log_dir
        self.nanny = nanny
        self.memory_limit = memory_limit
        self.nthreads = nthreads
        self.python = python or sys.executable
        self.pythonpath = list(pythonpath)
        self.extra_env = dict(env or {})
        self.cwd = cwd
        self.share_driver = share_driver
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.address: str = ""
        self.secure = secure
        self._tls_flags: list[str] = []
        self._tls_config: Any = None  # the dask.config.set of a secure cluster, undone by stop()
        self._scheduler: subprocess.Popen | None = None
        self._workers: list[subprocess.Popen] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> LocalDaskCluster:
        self.log_dir = self.log_dir or tempfile.mkdtemp(prefix="vidvol_dask_")
        os.makedirs(self.log_dir, exist_ok=True)
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Dask scheduler %s with %d worker(s) up in %.1f s (logs in %s)",
            self.address, self.n_workers, time.monotonic() - t0, self.log_dir,
        )
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        if not self.share_driver:  # a worker host's own: its interpreter's packages, its own variables
            env = {k: v for k, v in os.environ.items() if k in _HOST_ENV}
            if self.pythonpath:
                env["PYTHONPATH"] = os.pathsep.join(self.pythonpath)
            env["PATH"] = os.path.dirname(os.path.abspath(self.python)) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            env.update(self.extra_env)
            return env
        env = dict(os.environ)
        paths = driver_pythonpath(self.pythonpath)
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PATH"] = os.path.dirname(os.path.abspath(self.python)) + os.pathsep + env.get("PATH", "")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.update(self.extra_env)
        return env

    def _popen(self, argv: list[str], log_name: str, env: dict[str, str], cwd: str | None = None) -> subprocess.Popen:
        log_path = os.path.join(self.log_dir, log_name)
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=cwd or self.cwd or os.getcwd(),
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    def _secure(self) -> None:
        """Mutual TLS for every connection of this cluster (see the class docstring)."""
        import dask.config
        from distributed.security import Security

        folder = os.path.join(self.log_dir, "tls")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        temporary = Security.temporary()
        paths = {}
        for name, pem in (("ca.pem", temporary.tls_ca_file), ("cert.pem", temporary.tls_scheduler_cert),
                          ("key.pem", temporary.tls_scheduler_key)):
            paths[name] = os.path.join(folder, name)
            fd = os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(pem)
        self._tls_flags = ["--protocol", "tls", "--tls-ca-file", paths["ca.pem"], "--tls-cert", paths["cert.pem"],
                           "--tls-key", paths["key.pem"]]
        self._tls_config = dask.config.set({
            "distributed.comm.require-encryption": True,
            "distributed.comm.tls.ca-file": paths["ca.pem"],
            "distributed.comm.tls.client.cert": paths["cert.pem"],
            "distributed.comm.tls.client.key": paths["key.pem"],
        })

    def _start(self) -> None:
        env = self._env()
        if self.secure:
            self._secure()
        scheduler_file = os.path.join(self.log_dir, "scheduler.json")
        with contextlib.suppress(FileNotFoundError):
            os.remove(scheduler_file)
        self._scheduler = self._popen(
            [self.python, "-m", SCHEDULER_MODULE, "--host", LOOPBACK, "--port", "0", "--no-dashboard",
             "--dashboard-address", f"{LOOPBACK}:0",
             "--scheduler-file", scheduler_file, *self._tls_flags],
            "scheduler.log", env,
        )
        deadline = time.monotonic() + self.startup_timeout
        self.address = self._wait_for_scheduler_file(scheduler_file, deadline)
        for i in range(self.n_workers):
            argv = [
                self.python, "-m", WORKER_MODULE, self.address,
                "--nworkers", "1", "--nthreads", str(self.nthreads), "--host", LOOPBACK, "--no-dashboard",
                "--dashboard-address", f"{LOOPBACK}:0",
                "--memory-limit", self.memory_limit, "--name", f"worker-{i}",
                "--local-directory", os.path.join(self.log_dir, f"worker-{i}"),
                "--death-timeout", "60", "--nanny" if self.nanny else "--no-nanny", *self._tls_flags,
            ]
            home, worker_env = None, env
            if self.worker_homes:  # a host of its own: its folder, its TMPDIR (nothing shared with the others)
                home = os.path.join(self.worker_homes, f"worker-{i}")
                os.makedirs(os.path.join(home, "tmp"), exist_ok=True)
                worker_env = {**env, "TMPDIR": os.path.join(home, "tmp")}
            self._workers.append(self._popen(argv, f"worker-{i}.log", worker_env, home))
        self._wait_for_workers(deadline)

    def _check_alive(self) -> None:
        for name, proc in [("scheduler", self._scheduler), *((f"worker-{i}", p) for i, p in enumerate(self._workers))]:
            if proc is not None and proc.poll() is not None:
                log = os.path.join(self.log_dir, f"{name}.log")
                raise RuntimeError(f"dask {name} exited with {proc.returncode} during startup; {log}:\n{local_cluster.log_tail(log)}")

    def _wait_for_scheduler_file(self, path: str, deadline: float) -> str:
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                with open(path) as f:
                    address = json.load(f)["address"]
                if address:
                    return address
            time.sleep(0.1)
        log = os.path.join(self.log_dir, "scheduler.log")
        raise TimeoutError(f"dask scheduler wrote no {path} within {self.startup_timeout:.0f} s; {log}:\n{local_cluster.log_tail(log)}")

    def _wait_for_workers(self, deadline: float) -> None:
        from distributed import Client

        with Client(self.address, timeout=max(1.0, deadline - time.monotonic())) as client:
            while True:
                self._check_alive()
                left = deadline - time.monotonic()
                if left <= 0:
                    have = len(client.scheduler_info(n_workers=-1)["workers"])
                    raise TimeoutError(
                        f"{have}/{self.n_workers} dask workers joined {self.address} within {self.startup_timeout:.0f} s"
                        f" (logs in {self.log_dir})"
                    )
                try:
                    client.wait_for_workers(self.n_workers, timeout=min(2.0, left))
                    return
                except TimeoutError:
                    continue

    def stop(self) -> None:
        """Stops the workers, then the scheduler (SIGTERM, then SIGKILL of each process group)."""
        for proc in self._workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # all at once, then wait for each
        for proc in self._workers:
            local_cluster.stop_process_group(proc, self.stop_timeout)
        if self._scheduler is not None:
            local_cluster.stop_process_group(self._scheduler, self.stop_timeout)
        self._workers = []
        self._scheduler = None
        if self._tls_config is not None:
            self._tls_config.__exit__(None, None, None)
            self._tls_config = None

    # -- introspection ---------------------------------------------------------------------------

    def worker_pids(self) -> dict[str, int]:
        """{worker address: pid of the process that runs its tasks}, as the scheduler sees them now."""
        from distributed import Client

        from distributed.comm.core import CommClosedError

        deadline = time.monotonic() + 30
        with Client(self.address, timeout=10) as client:
            while True:
                try:
                    # Runs on each worker's event loop, not in its task thread: answers while tasks run.
                    return {addr: int(pid) for addr, pid in client.run(os.getpid).items()}
                except (CommClosedError, OSError):  # a worker left (killed, restarting) while being asked
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def process_pids(self) -> dict[str, int]:
        """{"scheduler"|"worker-i": pid} of the processes started here (nannies when `nanny=True`)."""
        out = {"scheduler": self._scheduler.pid} if self._scheduler is not None else {}
        out.update({f"worker-{i}": p.pid for i, p in enumerate(self._workers)})
        return out

    def dask_runner_flags(self) -> list[str]:
        """Pipeline flags that run a Beam pipeline on this cluster with DaskRunner."""
        return [f"--runner={DASK_RUNNER}", f"--dask_client_address={self.address}"]

    def flags(self, num_workers: int | None = None) -> list[str]:
        """Beam flags for `vidvol.beam_jobs.build --local_services` (the workers are the ones started here)."""
        del num_workers
        return [f"--dask_client_address={self.address}"]


class WorkerSetupError(RuntimeError):
    """Dask workers that cannot run a vidvol build: vidvol not importable there, or manual_dir unreadable."""


INSTALL_HINT = (
    "install vidvol in the environment that runs `dask worker` on every worker host (`pip install "
    "vidvol-{version}-py3-none-any.whl`, or `pip install vidvol=={version}`; the wheel comes from `pip wheel "
    "--no-deps .` in a checkout), then restart the workers"
)


def _worker_names(client) -> dict[str, str]:
    """{worker address: its name (`--name`), or the address when it has none}."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return {addr: str(w.get("name") or addr) for addr, w in info.items()}


def check_workers(address: str, manual_dir: str | None = None, *, timeout: float = 60.0) -> dict[str, dict]:
    """Asks every worker of the scheduler at `address` whether it imports vidvol and can list manual_dir.

    The probe (`worker_probe.probe`) is shipped by value, so a worker without vidvol answers too.
    Raises WorkerSetupError naming each failing worker and the fix; returns {address: probe answer}.
    A worker that does not answer within `timeout` is named as such instead of the build hanging.
    """
    import cloudpickle
    from distributed import Client

    from vidvol.beam_jobs import worker_probe
    from vidvol.builders.sources import files
    from vidvol.core import redact
    from vidvol.core.version import VERSION

    if manual_dir and "://" not in manual_dir:
        manual_dir = os.path.abspath(manual_dir)  # workers run in folders of their own
    cloudpickle.register_pickle_by_value(worker_probe)
    try:
        with Client(address, timeout=timeout) as client:
            names = _worker_names(client)
            if not names:
                raise WorkerSetupError(f"the dask scheduler at {address} has no workers: start `dask worker {address}` "
                                       "on the worker hosts")
            try:
                answers = client.run(worker_probe.probe, manual_dir, on_error="return")
            except (TimeoutError, OSError) as e:
                raise WorkerSetupError(f"dask workers at {address} did not answer within {timeout:g} s ({e})") from e
    finally:
        cloudpickle.unregister_pickle_by_value(worker_probe)
    problems = []
    shown = redact.url(manual_dir) if manual_dir else None
    for addr, answer in sorted(answers.items()):
        who = f"dask worker {names.get(addr, addr)} ({addr})"
        if isinstance(answer, BaseException):
            problems.append(f"{who}: the check itself failed: {type(answer).__name__}: {answer}")
            continue
        where = f"python {answer['python']}, cwd {answer['cwd']}"
        if answer["import_error"]:
            problems.append(f"{who} cannot import vidvol ({answer['import_error']}; {where}): "
                            + INSTALL_HINT.format(version=VERSION))
        elif answer["vidvol"] != VERSION:
            problems.append(f"{who} has vidvol {answer['vidvol']}, the driver {VERSION} ({where}): "
                            "install the driver's version on the workers (shards depend on it)")
        elif answer["read_error"]:
            hint = files.credential_hint(shown) if "://" in shown else "give the workers the same path (a shared file system)"
            env = ", ".join(answer["aws_env"]) or "no AWS_* variable"
            problems.append(f"{who} cannot read manual_dir {shown} ({redact.text(answer['read_error'])}; its "
                            f"environment has {env}): {hint} in the environment of the process that starts "
                            "`dask worker` (workers do not get the driver's environment)")
    missing = sorted(set(names) - set(answers))
    problems += [f"dask worker {names[a]} ({a}) did not answer the check" for a in missing]
    if problems:
        raise WorkerSetupError(f"{len(problems)} of {len(names)} dask workers at {address} cannot run this build:\n  "
                               + "\n  ".join(problems))
    return answers
