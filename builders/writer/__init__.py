"""The Beam write machinery, from runner choice to `shards.json`.

Runner choice, checks, shard planning, the write step, results, skip report, progress, build log
and lock, `shards.json` (`shards_file`).
"""
