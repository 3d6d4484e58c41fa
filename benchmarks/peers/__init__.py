"""The peers section's room: the peers' own venv, the job that runs in it, TFDS's stock Video builder, the report."""
