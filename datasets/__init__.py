"""One TFDS dataset folder per dataset; importing this package registers them with TFDS."""

from vidvol.datasets.hmdb51 import hmdb51_dataset_builder  # noqa: F401  (registers `hmdb51`)
from vidvol.datasets.fire_hrr import fire_hrr_dataset_builder  # noqa: F401  (registers `fire_hrr`)
from vidvol.datasets.mri_volumes import mri_volumes_dataset_builder  # noqa: F401  (registers `mri_volumes`)
from vidvol.datasets.video_folder import video_folder_dataset_builder  # noqa: F401  (registers `video_folder`)
