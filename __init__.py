"""vidvol: TFDS builders for large video and MRI collections, written through Apache Beam.

`import vidvol` registers the `hmdb51`, `fire_hrr`, `mri_volumes` and `video_folder` datasets with TFDS, installs
the offline runner defaults for their Beam builds, and exposes the read side (`vidvol.load`).
"""

from vidvol.core.version import VERSION as __version__

from vidvol.readers.tfdata import allocator as _allocator

_allocator.prefer_pool()  # TF's reusing CPU allocator for big batches; must precede TF's first op

from vidvol.core import system as _system  # noqa: E402

_system.import_beam_quietly()  # without the "apitools not found" warning Beam logs when its GCP extra is absent

from vidvol import datasets as _datasets  # noqa: E402,F401  (registers the TFDS builders)
from vidvol.beam_jobs import runners as _runners  # noqa: E402
from vidvol.builders.writer import runner as _writer_runner  # noqa: E402

_writer_runner.set_runner_resolver(_runners.resolve)  # `tfds build` runs offline on the FnApiRunner by default

from vidvol.readers import Tuning, distribute, load, load_labels  # noqa: E402  (model-ready tf.data reads)
from vidvol.readers import check_resumable  # noqa: E402  (stopping and resuming: docs/reading.md)
# What every reader reads and hands out: spec=vidvol.ReadSpec(clips=Clips(...), normalize=Normalize(...), output=Output(...)).
from vidvol.readers import Clips, Normalize, Output, ReadSpec  # noqa: E402
from vidvol.readers import VideoAugment  # noqa: E402  (ReadSpec(augment=...): crops and flips of the uint8 frames)
from vidvol.readers import VolumeAugment  # noqa: E402  (ReadSpec(augment=...): MONAI's Rand* on volumes)
from vidvol.readers import ShardOrder  # noqa: E402  (ReadSpec(order=...): shard by shard, mixed in blocks)
from vidvol.readers import dequantize_params  # noqa: E402  (output_dtype: scale/offset for the device)

# Random access (ArrayRecord shards, `--file_format array_record`): by index, NumPy only, for JAX/Grain and PyTorch.
from vidvol.readers import data_source, grain_dataset, torch_dataset  # noqa: E402

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
    """`vidvol.layers` (Keras layers such as `vidvol.layers.Dequantize`), imported on first use: Keras only when asked for."""
    if name == "layers":
        import importlib

        return importlib.import_module("vidvol.layers")
    raise AttributeError(f"module 'vidvol' has no attribute {name!r}")
