"""The Beam write machinery: runner choice, checks, shard planning, the write step, results, skip report, progress, build log and lock, `shards.json` (`shards_file`)."""
