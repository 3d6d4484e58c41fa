"""Beam's external SDK worker pool, bound to one address (loopback by default) instead of all interfaces.

`python -m apache_beam.runners.worker.worker_pool_main --service_port=Q` (Beam 2.77) binds
`[::]:Q` — every interface — and has no flag for the address. This entry point runs the same
servicer (`BeamFnExternalWorkerPoolServicer`, one `python -c SdkHarness(...)` subprocess per
requested worker, `python` taken from PATH) on `--host` (default 127.0.0.1):

    python -m vidvol.beam_jobs.worker_pool --service_port=Q [--host=127.0.0.1]
"""

from __future__ import annotations

import argparse
import atexit
import logging
import signal
import sys
import threading
from collections.abc import Sequence

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker import worker_pool_main
from apache_beam.utils import thread_pool_executor

logger = logging.getLogger(__name__)


def start(host: str = "127.0.0.1", port: int = 0) -> tuple[str, grpc.Server]:
    """Starts a process-mode worker pool on host:port; returns its address and the gRPC server."""
    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"worker pool: cannot bind {host}:{port}")
    pool = worker_pool_main.BeamFnExternalWorkerPoolServicer(use_process=True, data_buffer_time_limit_ms=-1)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()

    def stop_workers() -> None:
        for proc in list(pool._worker_processes.values()):
            worker_pool_main.kill_process_gracefully(proc, timeout=5)

    atexit.register(stop_workers)
    address = f"{host}:{bound}"
    logger.info("Worker pool listening on %s", address)
    return address, server


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the worker pool until SIGTERM/SIGINT (its SDK worker subprocesses are stopped on exit)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service_port", type=int, required=True, help="port to serve on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    _, server = start(args.host, args.service_port)
    while not done.wait(1.0):
        pass
    server.stop(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
