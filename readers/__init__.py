"""The read side: `vidvol.load` (`tfdata/`), the by-index readers (`random_access/`), and what both share.

docs/development.md lists the modules of each room.
"""

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
