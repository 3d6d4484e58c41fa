"""Shard planning: a stable, complete cut of the sources, and shard counts from the input alone."""

import pytest

from vidvol.builders.writer import plan


def test_plan_shards_is_stable_and_complete():
    sources = [(f"s{i}", i) for i in range(11)]
    a = plan.plan_shards("train", sources, 3, lambda i, n: f"f{i}-of-{n}")
    b = plan.plan_shards("train", list(reversed(sources)), 3, lambda i, n: f"f{i}-of-{n}")
    assert [t.sources for t in a] == [t.sources for t in b]
    flat = [s for t in a for s in t.sources]
    assert sorted(flat) == sorted(sources) and len(flat) == 11
    assert [len(t.sources) for t in a] == [3, 4, 4]
    with pytest.raises(ValueError, match="Duplicate source ids"):
        plan.plan_shards("train", sources + [("s1", 5)], 2, lambda i, n: "x")


def test_num_shards_for():
    assert plan.num_shards_for(0, 10) == 0
    assert plan.num_shards_for(2, 10, min_shards=4) == 2
    assert plan.num_shards_for(100, 10 << 20, max_shard_size=100 << 20, min_shards=4) == 12  # 10, to a multiple of 4
    assert plan.num_shards_for(100, 8 << 20, max_shard_size=100 << 20, min_shards=4) == 8
    assert plan.num_shards_for(6, 10 << 20, max_shard_size=1 << 20, min_shards=4) == 6
    assert plan.num_shards_for(100, 1, num_shards=7) == 7
