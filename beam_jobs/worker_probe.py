"""What a cluster worker can do, asked before a build runs there: import vidvol, read manual_dir.

`probe(manual_dir)` runs on each worker (Dask: `client.run`). It is shipped to the workers *by
value* (`cloudpickle.register_pickle_by_value` on this module), so it must not import vidvol at
module level: it answers on a worker where vidvol is missing, which is one of the things it checks.
It returns a plain dict, never raises.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def probe(manual_dir: str | None = None) -> dict[str, Any]:
    """{python, cwd, vidvol (version or None), import_error, read_error, aws_env} of the process it runs in."""
    out: dict[str, Any] = {
        "python": sys.executable, "cwd": os.getcwd(), "pid": os.getpid(), "vidvol": None,
        "import_error": None, "read_error": None,
        "aws_env": sorted(k for k in os.environ if k.startswith("AWS_") and os.environ[k]),
    }
    try:
        vidvol_datasets = importlib.import_module("vidvol.datasets")  # registers the builders, as a DoFn's import does
        del vidvol_datasets
        out["vidvol"] = getattr(importlib.import_module("vidvol"), "__version__", "unknown")
    except Exception as e:  # any import failure is the answer
        out["import_error"] = _short(e)
        out["import_trace"] = traceback.format_exc(limit=4)
        return out
    if manual_dir and "://" in manual_dir and not manual_dir.startswith("file://"):
        try:
            import fsspec

            fs, path = fsspec.core.url_to_fs(manual_dir)
            fs.ls(path, detail=False)
        except Exception as e:  # no credentials, access denied, no such bucket, ...
            out["read_error"] = _short(e)
    elif manual_dir and not os.path.isdir(manual_dir.removeprefix("file://")):
        out["read_error"] = f"FileNotFoundError: no folder {manual_dir} on this worker"
    return out
