"""What the build side and the read side both use: feature connectors, TFDS API access, machine facts."""
