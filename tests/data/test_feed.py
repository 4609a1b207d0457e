"""Batches by (step, slot): the schedule (driver.data.slots, pure) and the feed
(driver.data.feed) in process and from a real shared-memory pipeline: the same samples
either way, for any slot of any step; no sample of an epoch twice; a resume with another
global batch continues at the same position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from driver.config.data import PipelineConfig
from driver.data.feed import Feed, split
from driver.data.slots import Schedule, own_slots


class Indexed:
    """Sample i is the array [i, i]: a batch shows which samples it holds."""

    def __init__(self, size):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        return np.array([i, i], dtype=np.int64)


def ids(batch) -> list[int]:
    return [int(v) for v in batch[:, 0]]


@pytest.mark.parametrize(
    ("size", "micro", "slots", "step", "expected"),
    [
        (100, 5, 4, 0, (0, 0, 0)),
        (100, 5, 4, 4, (0, 0, 4)),  # 20 per step: 5 steps per epoch
        (100, 5, 4, 5, (1, 0, 0)),
        (90, 5, 4, 4, (1, 0, 0)),  # 4 whole steps, the tail of 10 dropped
        (90, 5, 4, 9, (2, 0, 1)),
    ],
)
def test_where_a_step_falls(size, micro, slots, step, expected):
    assert Schedule(size, micro, slots).where(step) == expected


def test_the_slots_of_a_step_tile_one_global_batch():
    sched = Schedule(size=100, micro_batch=5, slots=4)
    spans = [sched.positions(3, slot) for slot in range(4)]
    assert spans == [(0, 60, 65), (0, 65, 70), (0, 70, 75), (0, 75, 80)]
    assert own_slots(2, 3) == (6, 7, 8)


def test_a_resume_with_another_global_batch_continues_at_the_same_position():
    old = Schedule(size=100, micro_batch=5, slots=4)
    state = old.state(3)  # 3 steps of 20 consumed
    assert state == {"epoch": 0, "position": 60}
    new = Schedule(100, 5, 2).rebase(3, **state)  # half the global batch from here
    assert new.positions(3, 0) == (0, 60, 65) and new.positions(6, 1) == (0, 95, 100)
    assert new.where(7) == (1, 0, 0)  # then the next epoch from its start


def test_a_state_with_no_whole_batch_left_starts_the_next_epoch():
    assert Schedule(100, 5, 4).rebase(9, epoch=2, position=90).where(9) == (3, 0, 0)


def test_a_dataset_smaller_than_one_global_batch_is_refused():
    with pytest.raises(ValueError, match="smaller than one global batch"):
        Schedule(size=10, micro_batch=4, slots=3)


def test_in_process_an_epoch_holds_every_sample_at_most_once():
    feed = Feed(Indexed(64), micro_batch=4, slots=4, seed=3)
    seen = [i for step in range(4) for slot in range(4) for i in ids(feed.batch(step, slot))]
    assert sorted(seen) == list(range(64))
    again = Feed(Indexed(64), micro_batch=4, slots=4, seed=3)
    assert ids(again.batch(2, 1)) == ids(feed.batch(2, 1))  # any process, the same samples


def test_a_resume_from_the_state_continues_without_loss_or_repeat():
    feed = Feed(Indexed(60), micro_batch=3, slots=4, seed=1)
    first = [i for step in range(2) for slot in range(4) for i in ids(feed.batch(step, slot))]
    feed.batch(2, 0)
    assert feed.state_dict() == {"step": 2, "epoch": 0, "position": 24}
    state = {"step": 2, "epoch": 0, "position": 24}  # what the feed says after two steps
    resumed = Feed(Indexed(60), micro_batch=2, slots=3, seed=1)  # another global batch
    resumed.load_state_dict(state)
    rest = [i for step in range(2, 8) for slot in range(3) for i in ids(resumed.batch(step, slot))]
    assert sorted(first + rest) == list(range(60))
    assert resumed.state_dict() == {"step": 7, "epoch": 0, "position": 54}


@pytest.mark.slow
def test_the_pipeline_gives_the_samples_made_in_process():
    """Rank 1 of 2 with 2 slots each: its own slots from its pipeline (split per slot), a
    foreign slot, a step run again and a jump ahead made in process or by moving it."""
    config = PipelineConfig(producers=2, collators=1, prefetch_batches=3)
    piped = Feed(Indexed(96), 4, 4, seed=5, rank=1, grad_accum=2, pipeline=config)
    plain = Feed(Indexed(96), 4, 4, seed=5, rank=1, grad_accum=2)
    try:
        for step, slot in [(0, 2), (0, 3), (1, 2), (1, 3), (1, 0), (1, 2), (0, 3), (9, 3)]:
            got, want = piped.batch(step, slot), plain.batch(step, slot)
            assert torch.equal(got, want), (step, slot)
        assert piped._pipeline is not None  # the own slots came from the pipeline
    finally:
        piped.close()


def test_split_cuts_every_kind_of_batch():
    x = torch.arange(8).reshape(4, 2)
    assert [p.tolist() for p in split(x, 2)] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    parts = split({"a": x, "b": (x, x)}, 2)
    assert torch.equal(parts[1]["b"][0], x[2:]) and torch.equal(parts[0]["a"], x[:2])
    assert split(x, 1)[0] is x
