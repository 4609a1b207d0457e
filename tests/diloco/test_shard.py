"""Learners of one experiment read disjoint slices of the global sample order."""

from __future__ import annotations

import pytest

from driver.batches import epoch_order, rank_indices
from driver.config.diloco import data_shard

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


def test_learners_never_share_a_sample():
    order = epoch_order(size=256, epoch=0, seed=7)
    env = {**BASE, "REVE_DILOCO_LEARNERS": "2"}
    seen = []
    for learner in (0, 1):
        for rank in (0, 1):  # two ranks a learner
            place = data_shard(rank, 2, {**env, "REVE_DILOCO_INDEX": str(learner)})
            seen.append(set(rank_indices(order, *place, batch_size=8).tolist()))
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert sum(map(len, seen)) == 256


@pytest.mark.parametrize(("index", "learners"), [("2", "2"), ("-1", "2"), ("0", "0")])
def test_a_bad_shard_is_one_line(index, learners):
    env = {**BASE, "REVE_DILOCO_INDEX": index, "REVE_DILOCO_LEARNERS": learners}
    with pytest.raises(ValueError, match="REVE_DILOCO_(INDEX|LEARNERS)"):
        data_shard(0, 1, env)
