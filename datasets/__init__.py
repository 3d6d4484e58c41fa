"""One TFDS dataset folder per dataset; importing this package registers them all."""
