"""Learners of one experiment read disjoint slices of the global sample order."""

from __future__ import annotations

import pytest

from driver.config.diloco import data_shard
from driver.data.feed import Feed

BASE = {"REVE_DILOCO_ADDRESS": "tcp://127.0.0.1:5555", "REVE_DILOCO_LEARNER": "a"}


@pytest.mark.parametrize(
    ("env", "rank", "world", "expected"),
    [
        ({}, 1, 4, (1, 4)),  # not a learner: the rank's own place
        (BASE, 1, 4, (1, 4)),  # a lone learner
        ({**BASE, "REVE_DILOCO_INDEX": "0", "REVE_DILOCO_LEARNERS": "2"}, 1, 4, (1, 8)),
        ({**BASE, "REVE_DILOCO_INDEX": "1", "REVE_DILOCO_LEARNERS": "2"}, 1, 4, (5, 8)),
        ({**BASE, "REVE_DILOCO_INDEX": "2", "REVE_DILOCO_LEARNERS": "3"}, 0, 1, (2, 3)),
    ],
)
def test_data_shard(env, rank, world, expected):
    assert data_shard(rank, world, env) == expected


class Indexed:
    def __len__(self):
        return 256

    def __getitem__(self, i):
        import numpy as np

        return np.array([i])


def test_learners_never_share_a_sample():
    env = {**BASE, "REVE_DILOCO_LEARNERS": "2"}
    seen = []
    for learner in (0, 1):
        for rank in (0, 1):  # two ranks a learner, as driver.trainer.build makes their feeds
            shard_rank, shard_world = data_shard(
                rank, 2, {**env, "REVE_DILOCO_INDEX": str(learner)}
            )
            feed = Feed(Indexed(), micro_batch=8, slots=shard_world, seed=7, rank=shard_rank)
            steps = [feed.batch(step, shard_rank) for step in range(8)]  # one epoch
            seen.append({int(i) for batch in steps for i in batch[:, 0]})
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert sum(map(len, seen)) == 256


@pytest.mark.parametrize(("index", "learners"), [("2", "2"), ("-1", "2"), ("0", "0")])
def test_a_bad_shard_is_one_line(index, learners):
    env = {**BASE, "REVE_DILOCO_INDEX": index, "REVE_DILOCO_LEARNERS": learners}
    with pytest.raises(ValueError, match="REVE_DILOCO_(INDEX|LEARNERS)"):
        data_shard(0, 1, env)
