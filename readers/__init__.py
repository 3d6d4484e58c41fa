"""The read side: `vidvol.load` (`tfdata/`), the by-index readers (`random_access/`), and what both share.

docs/development.md lists the modules of each room.
"""

from typing import TYPE_CHECKING

# Public name -> the module that defines it, imported on first use (`__getattr__` below): importing one reader
# module (e.g. `vidvol.readers.spec`) does not import the others. Most of them import TensorFlow.
_LAZY = {
    "VideoAugment": "vidvol.readers.augment_video",
    "VolumeAugment": "vidvol.readers.augment_volume",
    "ClipWindow": "vidvol.readers.clip_sampling",
    "DatasetNotPreparedError": "vidvol.readers.dataset",
    "get_builder": "vidvol.readers.dataset",
    "supervised_keys": "vidvol.readers.dataset",
    "NotResumableError": "vidvol.readers.order",
    "ShardingError": "vidvol.readers.order",
    "check_resumable": "vidvol.readers.order",
    "OUTPUT_DTYPES": "vidvol.readers.output",
    "Dequantization": "vidvol.readers.output",
    "DataSource": "vidvol.readers.random_access.data_source",
    "RandomAccessError": "vidvol.readers.random_access.data_source",
    "data_source": "vidvol.readers.random_access.data_source",
    "EpochSampler": "vidvol.readers.random_access.epoch_order",
    "grain_dataset": "vidvol.readers.random_access.grain",
    "torch_dataset": "vidvol.readers.random_access.torch",
    "Clips": "vidvol.readers.spec",
    "Normalize": "vidvol.readers.spec",
    "Output": "vidvol.readers.spec",
    "ReadSpec": "vidvol.readers.spec",
    "ShardOrder": "vidvol.readers.shard_order",
    "Tuning": "vidvol.readers.spec",
    "dequantize_params": "vidvol.readers.tfdata.load",
    "distribute": "vidvol.readers.tfdata.load",
    "example_bytes": "vidvol.readers.tfdata.load",
    "load": "vidvol.readers.tfdata.load",
    "load_labels": "vidvol.readers.tfdata.load",
    "MAX_CYCLE_LENGTH": "vidvol.readers.tfdata.sizing",
    "default_cycle_length": "vidvol.readers.tfdata.sizing",
    "default_memory_budget": "vidvol.readers.tfdata.sizing",
}

if TYPE_CHECKING:  # what the names are, for type checkers (bound at run time by __getattr__)
    from vidvol.readers.augment_video import VideoAugment
    from vidvol.readers.augment_volume import VolumeAugment
    from vidvol.readers.clip_sampling import ClipWindow
    from vidvol.readers.dataset import DatasetNotPreparedError
    from vidvol.readers.dataset import get_builder
    from vidvol.readers.dataset import supervised_keys
    from vidvol.readers.order import NotResumableError
    from vidvol.readers.order import ShardingError
    from vidvol.readers.order import check_resumable
    from vidvol.readers.output import OUTPUT_DTYPES
    from vidvol.readers.output import Dequantization
    from vidvol.readers.random_access.data_source import DataSource
    from vidvol.readers.random_access.data_source import RandomAccessError
    from vidvol.readers.random_access.data_source import data_source
    from vidvol.readers.random_access.epoch_order import EpochSampler
    from vidvol.readers.random_access.grain import grain_dataset
    from vidvol.readers.random_access.torch import torch_dataset
    from vidvol.readers.spec import Clips
    from vidvol.readers.spec import Normalize
    from vidvol.readers.spec import Output
    from vidvol.readers.spec import ReadSpec
    from vidvol.readers.shard_order import ShardOrder
    from vidvol.readers.spec import Tuning
    from vidvol.readers.tfdata.load import dequantize_params
    from vidvol.readers.tfdata.load import distribute
    from vidvol.readers.tfdata.load import example_bytes
    from vidvol.readers.tfdata.load import load
    from vidvol.readers.tfdata.load import load_labels
    from vidvol.readers.tfdata.sizing import MAX_CYCLE_LENGTH
    from vidvol.readers.tfdata.sizing import default_cycle_length
    from vidvol.readers.tfdata.sizing import default_memory_budget

__all__ = [
    "ClipWindow", "Clips", "DataSource", "DatasetNotPreparedError", "Dequantization", "EpochSampler",
    "MAX_CYCLE_LENGTH", "Normalize", "NotResumableError", "OUTPUT_DTYPES", "Output", "RandomAccessError", "ReadSpec",
    "ShardOrder", "ShardingError", "Tuning", "VideoAugment", "VolumeAugment", "check_resumable", "data_source",
    "default_cycle_length", "default_memory_budget", "dequantize_params", "distribute", "example_bytes",
    "get_builder", "grain_dataset", "load", "load_labels", "supervised_keys", "torch_dataset",
]


def __getattr__(name: str):
    """Imports the module that defines `name` (a name of `__all__`) on first use and binds it here."""
    if name not in _LAZY:
        raise AttributeError(f"module 'vidvol.readers' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names with the public ones `__getattr__` binds on first use."""
    return sorted(set(globals()) | set(__all__))
