"""Benchmarks: read/build throughput and memory against the read-time pipelines."""
