"""Helpers for tests, demos and benchmarks, installed with vidvol (as TFDS ships `tfds.testing`).

`samples`: small but real sample inputs (AVI/MP4 videos, JPEG frames, NIfTI volumes), made offline.
"""
