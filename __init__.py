"""vidvol: TFDS builders for large video and MRI collections, written through Apache Beam.

`import vidvol` registers the `hmdb51`, `fire_hrr` and `mri_volumes` datasets with TFDS.
"""

__version__ = "0.1.0"

from vidvol.builders import allocator as _allocator  # noqa: E402

_allocator.prefer_pool()  # TF's reusing CPU allocator for big batches; must precede TF's first op

from vidvol import datasets as _datasets  # noqa: E402,F401  (registers the TFDS builders)
from vidvol.builders.loader import distribute, load, load_labels  # noqa: E402,F401  (model-ready tf.data reads)
