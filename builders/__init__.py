"""Dataset-agnostic stages: video and volume transforms, Beam wiring, read-side helpers."""
