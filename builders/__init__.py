"""The build side, dataset-agnostic, in rooms, with the builder bases on top.

The rooms: transforms (array stages), sources (inputs), writer (Beam writes).
"""
