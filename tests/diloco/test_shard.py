"""Learners of one experiment read disjoint slices of the global sample order."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from driver.config.diloco import LearnerConfig, data_shard
from driver.data.feed import Feed


def learner(index: int = 0, learners: int = 1) -> LearnerConfig:
    return LearnerConfig("tcp://127.0.0.1:5555", "a", index=index, learners=learners)


@pytest.mark.parametrize(
    ("cfg", "rank", "world", "expected"),
    [
        (None, 1, 4, (1, 4)),  # not a learner: the rank's own place
        (LearnerConfig(index=1, learners=2), 1, 4, (1, 4)),  # no address: not a learner
        (learner(), 1, 4, (1, 4)),  # a lone learner
        (learner(0, 2), 1, 4, (1, 8)),
        (learner(1, 2), 1, 4, (5, 8)),
        (learner(2, 3), 0, 1, (2, 3)),
    ],
)
def test_data_shard(cfg, rank, world, expected):
    assert data_shard(rank, world, cfg) == expected


class Indexed:
    def __len__(self):
        return 256

    def __getitem__(self, i):
        import numpy as np

        return np.array([i])


def test_learners_never_share_a_sample():
    seen = []
    for index in (0, 1):
        for rank in (0, 1):  # two ranks a learner, as driver.trainer.build makes their feeds
            shard_rank, shard_world = data_shard(rank, 2, learner(index, 2))
            feed = Feed(Indexed(), micro_batch=8, slots=shard_world, seed=7, rank=shard_rank)
            steps = [feed.batch(step, shard_rank) for step in range(8)]  # one epoch
            seen.append({int(i) for batch in steps for i in batch[:, 0]})
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert sum(map(len, seen)) == 256


@pytest.mark.parametrize(("index", "learners"), [(2, 2), (-1, 2), (0, 0)])
def test_a_bad_shard_is_one_line(index, learners):
    with pytest.raises(InputError, match=r"diloco\.(index|learners)"):
        learner(index, learners)
