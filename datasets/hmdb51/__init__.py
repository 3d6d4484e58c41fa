"""hmdb51: HMDB51 human action clips, as a TFDS dataset folder."""
