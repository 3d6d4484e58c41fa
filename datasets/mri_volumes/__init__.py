"""mri_volumes: NIfTI MRI scans with a class label, as a TFDS dataset folder."""
