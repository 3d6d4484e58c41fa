"""`python -m vidvol pull NAME --from BUCKET_DATA_DIR --data_dir DIR`: a bucket dataset copied here, checked."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vidvol.core import dataset_copy, redact


def version_paths(name: str, local_data_dir: str, bucket_data_dir: str) -> tuple[str, str]:
    """(local version folder, bucket version prefix) of `NAME[/CONFIG][:VERSION]` under the two data_dirs.

    Args:
      name: the dataset, e.g. `mri_volumes/small_32`.
      local_data_dir: the local TFDS data_dir.
      bucket_data_dir: the bucket data_dir, e.g. `s3://b/tfds`.

    Returns:
      The two version locations, e.g. `DIR/mri_volumes/small_32/2.0.0` and `s3://b/tfds/mri_volumes/small_32/2.0.0`.
    """
    import tensorflow_datasets as tfds  # the registered builders say the version folder

    import vidvol.datasets  # noqa: F401  (registers the datasets)

    local = os.fspath(tfds.builder(name, data_dir=local_data_dir).data_path)
    rel = os.path.relpath(local, local_data_dir).replace(os.sep, "/")
    return local, f"{bucket_data_dir.rstrip('/')}/{rel}"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command.

    Args:
      argv: its options (default `sys.argv[1:]`).

    Returns:
      0 when the dataset was copied and checked, 1 on a CopyError (printed).
    """
    parser = argparse.ArgumentParser(prog="python -m vidvol pull", description=__doc__)
    parser.add_argument("dataset", help="NAME[/CONFIG][:VERSION]")
    parser.add_argument("--from", dest="source", required=True, help="the bucket data_dir, e.g. s3://bucket/tfds")
    parser.add_argument("--data_dir", required=True, help="the local data_dir to copy into")
    args = parser.parse_args(argv)
    local, remote = version_paths(args.dataset, args.data_dir, args.source)
    try:
        n = dataset_copy.pull(remote, local)
    except dataset_copy.CopyError as e:
        print(f"pull: {redact.text(str(e))}", file=sys.stderr)
        return 1
    print(f"{redact.url(remote)} -> {local}: {n} files copied, every shard matches shards.json")
    return 0
