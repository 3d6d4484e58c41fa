"""A driver process of the lease tests: the resume toy built into a bucket data_dir, staged in this host's TMPDIR.

    python lease_driver.py BUCKET_URL MANUAL_DIR RESULT_JSON

builds the toy (`tests/resume_toy.py`) into BUCKET_URL as `python -m vidvol build` does: the builder rooted
at the staging folder `bucket.staging_root` picks under TMPDIR, its lock a lease in the bucket. It writes
RESULT_JSON: the inputs it decoded, what it resumed, whose dataset it reused, or the error that stopped
it. `RESUME_TOY_STOP_AT=POINT RESUME_TOY_MARKER=FILE` stops it at a gate (to be killed or stopped there);
`LEASE_DRIVER_WAITING=FILE` is written when it starts waiting for another build's lease.
"""

from __future__ import annotations

import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class _Waiting(logging.Handler):
    """Writes `LEASE_DRIVER_WAITING` when the lease says this build waits for another."""

    def emit(self, record: logging.LogRecord) -> None:
        path = os.environ.get("LEASE_DRIVER_WAITING")
        if path and "waiting for it to finish" in record.getMessage():
            with open(path, "w", encoding="ascii") as f:
                f.write("waiting")


def main(url: str, manual: str, out: str) -> int:
    """Builds, then writes the result document; 0, or 3 when the build failed."""
    import resume_toy  # by its module name, so that Beam pickles the example function by reference
    from vidvol.builders.writer import bucket

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("vidvol.builders.writer.lease").addHandler(_Waiting())
    staging = bucket.BucketTarget.for_url(url).staging
    doc = {"pid": os.getpid(), "staging": staging}
    try:
        builder = resume_toy.build(staging, manual, bucket_url=url)
        doc.update(resumed=[builder.resumed.kept, builder.resumed.total] if builder.resumed else None,
                   reused_from=builder.reused_from)
    except BaseException as e:  # what stopped the build is the result
        doc["error"] = f"{type(e).__name__}: {e}"
    doc["decoded"] = resume_toy.GATE["count"]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    sys.stderr.flush()
    os._exit(3 if "error" in doc else 0)  # a worker thread left at a gate must not keep this process alive


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
