"""Table and property tests of the pure sampling schedule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.data import sampling as s


@pytest.mark.parametrize(
    ("size", "batch", "world", "origin", "drop_last", "steps"),
    [
        (100, 8, 2, 0, True, 6),
        (100, 8, 2, 0, False, 7),
        (96, 8, 2, 0, False, 6),
        (100, 8, 2, 32, True, 4),
        (100, 8, 2, 100, False, 0),
        (3, 8, 2, 0, True, 0),
        (3, 8, 2, 0, False, 1),
        (0, 1, 1, 0, False, 0),
    ],
)
def test_steps_in_epoch(size, batch, world, origin, drop_last, steps):
    assert s.steps_in_epoch(size, batch, world, origin, drop_last) == steps


@pytest.mark.parametrize(
    ("step", "rank", "size", "batch", "world", "origin", "expected"),
    [
        (0, 0, 100, 8, 2, 0, (0, 8)),
        (0, 1, 100, 8, 2, 0, (8, 16)),
        (2, 1, 100, 8, 2, 0, (40, 48)),
        (0, 1, 100, 8, 2, 36, (44, 52)),
        (6, 0, 100, 8, 2, 0, (96, 98)),  # tail of 4 split 2/2
        (6, 1, 100, 8, 2, 0, (98, 100)),
        (0, 0, 5, 4, 3, 0, (0, 2)),  # tail of 5 over 3 ranks: 2/2/1
        (0, 2, 5, 4, 3, 0, (4, 5)),
        (0, 2, 2, 4, 3, 0, (2, 2)),  # fewer samples than ranks: rank 2 gets none
    ],
)
def test_rank_slice(step, rank, size, batch, world, origin, expected):
    assert s.rank_slice(step, rank, size, batch, world, origin, drop_last=False) == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: s.rank_slice(0, 2, 10, 2, 2, 0, True), "outside world size"),
        (lambda: s.rank_slice(5, 0, 10, 2, 2, 0, True), "past the end"),
        (lambda: s.steps_in_epoch(10, 0, 1, 0, True), "must be ≥ 1"),
        (lambda: s.steps_in_epoch(10, 1, 1, 11, True), "outside the epoch"),
        (lambda: s.position_after(9, 10, 2, 2, 0, True), "outside 0..2"),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_permutation_is_deterministic_and_varies_by_epoch_and_seed():
    a = s.epoch_permutation(7, 0, 1000)
    assert np.array_equal(a, s.epoch_permutation(7, 0, 1000))
    assert sorted(a.tolist()) == list(range(1000))
    assert not np.array_equal(a, s.epoch_permutation(7, 1, 1000))
    assert not np.array_equal(a, s.epoch_permutation(8, 0, 1000))
    assert s.epoch_permutation(7, 0, 5, shuffle=False).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 17, 255, 256, 1000, 4097])
def test_schedule_is_a_permutation_and_slices_agree(size):
    perm = s.epoch_permutation(4, 2, size)
    assert sorted(perm.tolist()) == list(range(size))
    for start, stop in [(0, size), (size // 3, size // 2), (size - 1, size)]:
        if 0 <= start <= stop:
            got = s.schedule_entries(4, 2, size, np.arange(start, stop))
            assert got.tolist() == perm[start:stop].tolist()


def test_schedule_of_a_huge_corpus_needs_no_epoch_array():
    size = 3 * 10**12
    got = s.schedule_entries(1, 0, size, np.arange(10**12, 10**12 + 50_000))
    assert got.min() >= 0 and got.max() < size and len(set(got.tolist())) == 50_000


def test_schedule_is_well_shuffled():
    perm = s.epoch_permutation(9, 0, 20_000).astype(float)
    rank_corr = np.corrcoef(perm, np.arange(20_000))[0, 1]
    assert abs(rank_corr) < 0.05 and int((perm == np.arange(20_000)).sum()) < 10
    first = {
        tuple(s.epoch_permutation(seed, epoch, 1000)[:5]) for seed in range(5) for epoch in range(5)
    }
    assert len(first) == 25


def test_schedule_digest_changes_with_the_schedule():
    digest = s.schedule_digest(7, 0, 1000, True)
    assert digest == s.schedule_digest(7, 0, 1000, True)
    others = [(8, 0, 1000, True), (7, 1, 1000, True), (7, 0, 999, True), (7, 0, 1000, False)]
    assert digest not in {s.schedule_digest(*args) for args in others}


def test_schedule_positions_are_checked():
    with pytest.raises(ValueError, match="positions must lie in 0..9"):
        s.schedule_entries(0, 0, 10, np.arange(5, 11))


def test_sample_seed_is_stable_and_distinct():
    seeds = {s.sample_seed(1, e, i) for e in range(3) for i in range(1000)}
    assert len(seeds) == 3000
    assert s.sample_seed(1, 2, 3) == s.sample_seed(1, 2, 3)
    assert all(0 <= x < 2**63 for x in seeds)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 300),
    batch=st.integers(1, 9),
    worlds=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    steps=st.lists(st.integers(0, 10), min_size=4, max_size=4),
    drop_last=st.booleans(),
)
def test_any_world_size_changes_cover_the_epoch_exactly_once(size, batch, worlds, steps, drop_last):
    perm = s.epoch_permutation(3, 1, size)
    origin, seen = 0, []
    for phase, world in enumerate(worlds):
        left = s.steps_in_epoch(size, batch, world, origin, drop_last)
        run = left if phase == len(worlds) - 1 else min(steps[phase], left)
        for rank in range(world):
            for step in range(run):
                start, stop = s.rank_slice(step, rank, size, batch, world, origin, drop_last)
                seen.extend(perm[start:stop].tolist())
        origin = s.position_after(run, size, batch, world, origin, drop_last)
    assert len(seen) == len(set(seen)), "a sample was repeated"
    if drop_last:
        assert size - len(seen) < batch * worlds[-1], "more than the last tail was dropped"
        assert sorted(seen) == sorted(perm[: len(seen)].tolist())
    else:
        assert sorted(seen) == list(range(size)), "a sample was skipped"
