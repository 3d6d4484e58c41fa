"""The by-index readers over ArrayRecord shards: `data_source`, `grain_dataset`, `torch_dataset` (NumPy only)."""
