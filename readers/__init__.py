"""The read side: model-ready `tf.data` pipelines over prepared datasets (`vidvol.load`).

`api` is the public surface; `spec` the options every reader shares (`ReadSpec`: `Clips`,
`Normalize`, `Output`, `augment`) and `Tuning`; `augment_video` the read-time crops and flips of
video frames (`VideoAugment`), `augment_volume` read-time volume augmentation (`VolumeAugment`:
MONAI's `Rand*` patches, flips, rotations, intensity); `legacy` the keywords before them (deprecated); `stages` the
named pipeline stages; `plan` what is read and decoded where and every decision of a `load`
pipeline (`plan_load`); `sizing` the buffer and parallelism rules; `batch_parser`, `frames`, `clip_sampling` the
per-batch parse, frame decoding and read-time clip choice; `allocator` TF's pooled CPU allocator;
`output` the output dtypes (`output_dtype`, masks, `dequantize_params`); `random_access` the
by-index readers over ArrayRecord shards (`data_source`, PyTorch), `resumable` their resumable
order (Grain, the PyTorch sampler). Reading by index: `records` (every record's place in its
shard), `order` (which example each position reads: the checkpointed state, multi-host shares),
`permutation` (the keyed bijection), `rng` (per-example randomness).
"""

from vidvol.readers.augment_volume import VolumeAugment
from vidvol.readers.api import DatasetNotPreparedError
from vidvol.readers.augment_video import VideoAugment
from vidvol.readers.api import dequantize_params
from vidvol.readers.api import distribute
from vidvol.readers.api import example_bytes
from vidvol.readers.api import get_builder
from vidvol.readers.api import load
from vidvol.readers.api import load_labels
from vidvol.readers.order import NotResumableError
from vidvol.readers.order import check_resumable
from vidvol.readers.plan import supervised_keys
from vidvol.readers.clip_sampling import ClipWindow
from vidvol.readers.output import OUTPUT_DTYPES
from vidvol.readers.output import Dequantization
from vidvol.readers.random_access import DataSource
from vidvol.readers.random_access import RandomAccessError
from vidvol.readers.random_access import data_source
from vidvol.readers.random_access import torch_dataset
from vidvol.readers.epochs import EpochSampler
from vidvol.readers.resumable import grain_dataset
from vidvol.readers.sizing import DEFAULT_SHUFFLE_BUFFER_BYTES
from vidvol.readers.sizing import MAX_CYCLE_LENGTH
from vidvol.readers.sizing import ShardingError
from vidvol.readers.sizing import default_cycle_length
from vidvol.readers.sizing import default_memory_budget
from vidvol.readers.sizing import shuffle_buffer_size
from vidvol.readers.spec import Clips
from vidvol.readers.spec import Normalize
from vidvol.readers.spec import Output
from vidvol.readers.spec import ReadSpec
from vidvol.readers.spec import Tuning

__all__ = [
    "ClipWindow", "Clips", "DEFAULT_SHUFFLE_BUFFER_BYTES", "DataSource", "DatasetNotPreparedError", "Dequantization",
    "EpochSampler", "MAX_CYCLE_LENGTH", "Normalize", "NotResumableError", "OUTPUT_DTYPES", "Output",
    "RandomAccessError", "ReadSpec", "ShardingError", "Tuning", "VideoAugment", "VolumeAugment", "check_resumable", "data_source",
    "default_cycle_length", "default_memory_budget", "dequantize_params", "distribute", "example_bytes",
    "get_builder", "grain_dataset", "load", "load_labels", "shuffle_buffer_size", "supervised_keys", "torch_dataset",
]
