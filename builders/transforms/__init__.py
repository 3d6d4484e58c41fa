"""Dataset-agnostic stages on arrays, one kind per module: video decoding, frame ops, volumes, clip / frame-series / volume examples."""
