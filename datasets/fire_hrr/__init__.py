"""fire_hrr: fire-test recordings with per-frame heat release rate, as a TFDS dataset folder."""
