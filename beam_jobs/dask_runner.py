"""Beam's DaskRunner, closing the dask client it opens once the pipeline is done."""

from __future__ import annotations

from apache_beam.runners.dask import dask_runner


class DaskRunner(dask_runner.DaskRunner):
    """`apache_beam.runners.dask.dask_runner.DaskRunner` whose result closes its `distributed.Client`.

    Beam 2.77 opens a client per pipeline and never closes it; a driver that stops its scheduler
    afterwards then logs reconnect attempts until it exits.
    """

    def run_pipeline(self, pipeline, options):
        result = super().run_pipeline(pipeline, options)
        wait = result.wait_until_finish

        def wait_and_close(duration=None):
            try:
                return wait(duration)
            finally:
                result.client.close()

        result.wait_until_finish = wait_and_close
        return result
