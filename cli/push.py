"""`python -m vidvol push NAME --data_dir DIR --to BUCKET_DATA_DIR`: a local dataset copied to a bucket, checked."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vidvol.cli.pull import version_paths
from vidvol.core import dataset_copy, redact


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command.

    Args:
      argv: its options (default `sys.argv[1:]`).

    Returns:
      0 when the dataset was checked and copied, 1 on a CopyError (printed).
    """
    parser = argparse.ArgumentParser(prog="python -m vidvol push", description=__doc__)
    parser.add_argument("dataset", help="NAME[/CONFIG][:VERSION]")
    parser.add_argument("--data_dir", required=True, help="the local data_dir holding the prepared dataset")
    parser.add_argument("--to", dest="target", required=True, help="the bucket data_dir, e.g. s3://bucket/tfds")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already in the bucket")
    args = parser.parse_args(argv)
    local, remote = version_paths(args.dataset, args.data_dir, args.target)
    try:
        n = dataset_copy.push(local, remote, overwrite=args.overwrite)
    except dataset_copy.CopyError as e:
        print(f"push: {redact.text(str(e))}", file=sys.stderr)
        return 1
    print(f"{local} -> {redact.url(remote)}: {n} files copied, every shard checked against shards.json first")
    return 0
