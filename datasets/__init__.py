"""One TFDS dataset folder per dataset; importing this package registers them with TFDS."""

from vidvol.datasets.hmdb51 import hmdb51_dataset_builder  # noqa: F401  (registers `hmdb51`)
