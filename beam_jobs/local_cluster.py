"""A loopback stand-in for a Beam cluster: a job service and an external SDK worker pool, as processes.

`local_portable_services()` starts Beam's job service and vidvol's external SDK worker pool, each
in its own process group on loopback ports; a pipeline submitted with `PortableServices.flags()`
then runs the way it would on a cluster. What binds where, and what to firewall on a shared host,
is in `local_portable_services` and docs/clusters.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

logger = logging.getLogger(__name__)

JOB_SERVICE_MODULE = "apache_beam.runners.portability.local_job_service_main"
WORKER_POOL_MODULE = "vidvol.beam_jobs.worker_pool"
LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class PortableServices:
    """Endpoints and processes of a running job service + worker pool."""

    job_endpoint: str
    worker_pool_endpoint: str
    job_service_pid: int
    worker_pool_pid: int
    log_dir: str

    def flags(self, num_workers: int = 2) -> list[str]:
        """PortableRunner flags that submit to these services with EXTERNAL (worker-pool) SDK workers."""
        return [
            "--runner=PortableRunner",
            f"--job_endpoint={self.job_endpoint}",
            "--environment_type=EXTERNAL",
            f"--environment_config={self.worker_pool_endpoint}",
            # The local job service runs the job on an FnApiRunner: this many SDK workers from the pool.
            f"--direct_num_workers={num_workers}",
        ]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on `host` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def log_tail(path: str, size: int = 3000) -> str:
    """Last `size` characters of a log file (for error messages)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-size:]
    except OSError as e:
        return f"<cannot read {path}: {e}>"


def wait_for_port(proc: subprocess.Popen, port: int, *, log_path: str, timeout: float, host: str = LOOPBACK) -> None:
    """Waits until `proc` accepts connections on host:port; RuntimeError if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode} before serving; log {log_path}:\n{log_tail(log_path)}")
        if _accepts(host, port):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{proc.args} did not serve {host}:{port} within {timeout:.0f} s; log {log_path}:\n{log_tail(log_path)}")


def stop_process_group(proc: subprocess.Popen, timeout: float = 10.0, *, name: str = "") -> None:
    """SIGTERM the process group led by `proc`, SIGKILL it if it lingers (and its strays either way).

    Every local service vidvol starts (job service, worker pool, dask scheduler and workers, and the
    tests' S3 server) runs in its own process group and is stopped here.
    """
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # the leader is gone; its group may still hold children
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("%s ignored SIGTERM for %.0f s; killing its process group", name or proc.args, timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()


def start_service(argv: Sequence[str], *, port: int, log_path: str, env: dict[str, str], timeout: float) -> subprocess.Popen:
    """Starts one service in its own process group and waits until it serves `port`."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_port(proc, port, log_path=log_path, timeout=timeout)
    except BaseException:
        stop_process_group(proc)
        raise
    return proc


@contextlib.contextmanager
def local_portable_services(
    *, python: str | None = None, log_dir: str | None = None, timeout: float = 90.0
) -> Iterator[PortableServices]:
    """Runs a loopback job service + worker pool for the `with` block; always stops both.

    It starts Beam's job service, `python -m apache_beam.runners.portability.local_job_service_main
    --port P` (it binds `localhost:P`, i.e. loopback only), and an external SDK worker pool, `python
    -m vidvol.beam_jobs.worker_pool --service_port=Q` (Beam's own `worker_pool_main` binds every
    interface and has no address flag; ours binds 127.0.0.1), each in its own process group, with
    free ports picked at run time and this interpreter's directory first on PATH (the pool starts
    its SDK workers as `python -c ...`, so they run the same environment and can import vidvol).

    A pipeline submitted with `PortableServices.flags()` then runs the way it would on a cluster:
    the driver submits a portable job, the job service plans it and asks the pool for SDK workers,
    and the workers unpickle vidvol's DoFns. On exit both process groups (and the SDK workers in
    them) are terminated, then killed.

    The job service's own FnApiRunner opens its control/data/state/logging gRPC ports on `[::]:0`
    (ephemeral ports, all interfaces; Beam has no option for that address) — as does the direct
    runner in multi-process mode. On a shared host, firewall those or run inside a network
    namespace.
    """
    python = python or sys.executable
    log_dir = log_dir or tempfile.mkdtemp(prefix="vidvol_portable_")
    os.makedirs(log_dir, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(python)) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    procs: list[subprocess.Popen] = []
    try:
        job_port = free_port()
        procs.append(
            start_service(
                [python, "-m", JOB_SERVICE_MODULE, "--port", str(job_port)],
                port=job_port, log_path=os.path.join(log_dir, "job_service.log"), env=env, timeout=timeout,
            )
        )
        pool_port = free_port()
        procs.append(
            start_service(
                [python, "-m", WORKER_POOL_MODULE, f"--service_port={pool_port}", f"--host={LOOPBACK}"],
                port=pool_port, log_path=os.path.join(log_dir, "worker_pool.log"), env=env, timeout=timeout,
            )
        )
        services = PortableServices(
            job_endpoint=f"localhost:{job_port}", worker_pool_endpoint=f"{LOOPBACK}:{pool_port}",
            job_service_pid=procs[0].pid, worker_pool_pid=procs[1].pid, log_dir=log_dir,
        )
        logger.info("Job service at %s, worker pool at %s (logs in %s)", services.job_endpoint, services.worker_pool_endpoint, log_dir)
        yield services
    finally:
        for proc in reversed(procs):
            stop_process_group(proc)
