"""`python -m vidvol COMMAND` (and the `vidvol` console script): demo, preview, build, verify (see `vidvol.cli`)."""

from __future__ import annotations

import sys

from vidvol.cli.main import main  # also the console script's entry point: vidvol.__main__:main

if __name__ == "__main__":
    sys.exit(main())
