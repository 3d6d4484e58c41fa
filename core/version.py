"""The vidvol release: the one place it is written (setup.cfg reads it; workers are checked against it)."""

VERSION = "0.2.0"
