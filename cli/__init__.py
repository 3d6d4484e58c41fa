"""The `python -m vidvol` commands, one module each (as TFDS keeps each in `scripts/cli/<command>.py`).

`main` dispatches: `demo`, `preview` and `verify` live here; `build` is `vidvol.beam_jobs.build`, beside the
runner recipes it drives.
"""
