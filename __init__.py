"""vidvol: TFDS builders for large video and MRI collections, written through Apache Beam.

`import vidvol` registers the `hmdb51`, `fire_hrr`, `mri_volumes` and `video_folder` datasets with TFDS, installs
the offline runner defaults for their Beam builds, and exposes the read side (`vidvol.load`). It imports neither
TensorFlow nor Beam: each read-side name imports its module (TensorFlow) on first use (`_LAZY`, `__getattr__`);
docs/development.md, "What an import costs", lists what each name imports.
"""

import typing as _typing

from vidvol.core.version import VERSION as __version__

from vidvol.readers.tfdata import allocator as _allocator

_allocator.prefer_pool()  # TF's reusing CPU allocator for big batches; must precede TF's first op (sets a variable only)

from vidvol.core import system as _system  # noqa: E402

_system.quiet_beam_import()  # drops the "apitools not found" warning Beam logs when its GCP extra is absent, whenever Beam is imported

from vidvol import datasets as _datasets  # noqa: E402,F401  (registers the TFDS builders; imports TFDS, not TF/Beam/OpenCV)
from vidvol.builders.writer import runner as _writer_runner  # noqa: E402


def _resolve_runner(runner=None, options=None, num_tasks=None, num_sources=None, manual_dir=None):
    """`vidvol.beam_jobs.runners.resolve`, imported when a build asks (it imports Beam)."""
    from vidvol.beam_jobs import runners

    return runners.resolve(runner, options, num_tasks, num_sources=num_sources, manual_dir=manual_dir)


_writer_runner.set_runner_resolver(_resolve_runner)  # `tfds build` runs offline on the FnApiRunner by default

# The read side, imported on first use (`__getattr__` below): public name -> the module that defines it. Every one
# of them imports TensorFlow (and `VideoAugment`, through its crops, OpenCV); `import vidvol` itself imports neither.
_LAZY = {
    # model-ready tf.data reads
    "load": "vidvol.readers.tfdata.load",
    "load_labels": "vidvol.readers.tfdata.load",
    "distribute": "vidvol.readers.tfdata.load",
    "dequantize_params": "vidvol.readers.tfdata.load",  # output_dtype: scale/offset for the device
    "Tuning": "vidvol.readers.spec",
    "check_resumable": "vidvol.readers.order",  # stopping and resuming: docs/reading.md
    # What every reader reads and hands out: spec=vidvol.ReadSpec(clips=Clips(...), normalize=Normalize(...), output=Output(...)).
    "ReadSpec": "vidvol.readers.spec",
    "Clips": "vidvol.readers.spec",
    "Normalize": "vidvol.readers.spec",
    "Output": "vidvol.readers.spec",
    "VideoAugment": "vidvol.readers.augment_video",  # ReadSpec(augment=...): crops and flips of the uint8 frames
    "VolumeAugment": "vidvol.readers.augment_volume",  # ReadSpec(augment=...): MONAI's Rand* on volumes
    "ShardOrder": "vidvol.readers.shard_order",  # ReadSpec(order=...): shard by shard, mixed in blocks
    # Random access (ArrayRecord shards, `--file_format array_record`): by index, for JAX/Grain and PyTorch.
    "data_source": "vidvol.readers.random_access.data_source",
    "grain_dataset": "vidvol.readers.random_access.grain",
    "torch_dataset": "vidvol.readers.random_access.torch",
}

if _typing.TYPE_CHECKING:  # what the names are, for type checkers and readers of this file (bound at run time by __getattr__)
    from vidvol.readers import Tuning, distribute, load, load_labels
    from vidvol.readers import check_resumable
    from vidvol.readers import Clips, Normalize, Output, ReadSpec
    from vidvol.readers import VideoAugment
    from vidvol.readers import VolumeAugment
    from vidvol.readers import ShardOrder
    from vidvol.readers import dequantize_params
    from vidvol.readers import data_source, grain_dataset, torch_dataset

# The public API: `from vidvol import *` and the documentation checks (tests/test_public_api.py) take it from here.
__all__ = [
    "__version__",
    # tf.data reads
    "load", "load_labels", "distribute", "dequantize_params", "check_resumable", "Tuning",
    # what every reader reads and hands out
    "ReadSpec", "Clips", "Normalize", "Output", "VideoAugment", "VolumeAugment", "ShardOrder",
    # random access
    "data_source", "grain_dataset", "torch_dataset",
    # a prepared dataset at a glance: one self-contained HTML page
    "report",
    # Keras layers, imported on first use (`__getattr__`)
    "layers",
]


def report(name: str, *, data_dir: str | None = None, out: str | None = None, limits=None) -> str:
    """Writes one self-contained HTML page about a prepared dataset and returns its path.

    The page (`python -m vidvol report` writes the same) holds the dataset's card (description, citation,
    features, when and how it was built), each split's examples, shards and bytes, label counts, the HRR
    distribution (fire_hrr) or intensity histograms (MRI), previews of a few examples per class with their
    masked frames shown, the skip report and whether the shards match `shards.json`. Images are inlined:
    the file opens from a file browser, fetches nothing, and shows in a notebook with
    `IPython.display.HTML(filename=vidvol.report(...))`. What it samples to stay small is written on it
    (docs/building.md, "The report page").

    Args:
      name: `NAME`, `NAME/CONFIG` or `NAME/CONFIG:VERSION`, e.g. `"hmdb51/split1_20x64x64"`.
      data_dir: the TFDS data_dir the dataset was built into (default: TFDS's, `~/tensorflow_datasets`).
      out: the HTML file to write; default `report.html` in the dataset's version folder, beside the shards.
      limits: a `vidvol.cli.report_parts.gather.Limits`: how much the page reads and shows (default: its defaults).

    Returns:
      The path of the page written.

    Raises:
      ValueError: no prepared dataset of that name in `data_dir`.
    """
    from vidvol.cli import report as _report  # imported when asked for: `import vidvol` stays light

    return _report.write_report(name, data_dir=data_dir, out=out, limits=limits)


def __getattr__(name: str):
    """The read side and `vidvol.layers`, imported on first use, so that `import vidvol` imports neither TF nor Keras.

    `vidvol.layers` (Keras layers such as `vidvol.layers.Dequantize`) imports Keras; each name of `_LAZY`
    imports its reader module (TensorFlow). The value is then bound here: the next access costs nothing.
    """
    import importlib

    if name == "layers":
        return importlib.import_module("vidvol.layers")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vidvol' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the read side's, which `__getattr__` binds on first use."""
    return sorted(set(globals()) | set(__all__))
