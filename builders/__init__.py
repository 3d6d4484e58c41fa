"""The build side, dataset-agnostic, in rooms: transforms (array stages), sources (inputs), writer (Beam writes), builder bases on top."""
