"""video_folder: your own labelled videos, as a TFDS dataset folder."""
