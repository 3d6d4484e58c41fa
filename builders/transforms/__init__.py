"""Dataset-agnostic stages on arrays, one kind per module.

Video decoding, frame ops, volumes, clip / frame-series / volume examples.
"""
