"""Shared parts of the benchmark suite: the section skeleton, run settings, inputs, meters, jobs and the report."""
