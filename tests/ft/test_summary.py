"""The end-of-run summary's ft fields (driver.ft.launch.summary_fields): groups replaced
counted over every rank (the summary's `restarts` is the most starts of one rank), the
run's figures from the last row of record."""

from __future__ import annotations

import pytest

from driver.ft.launch import groups_replaced, summary_fields


def hosts(*attempts: int) -> dict[int, dict]:
    return {rank: {"pod": "p", "attempt": a} for rank, a in enumerate(attempts)}


@pytest.mark.parametrize(
    ("attempts", "first", "replaced"),
    [
        ((0, 0, 0), 0, 0),  # no failure
        ((2, 1, 0), 0, 3),  # rank 0 replaced twice, rank 1 once: 3 (`restarts` says 2)
        ((1, 1, 1), 0, 3),  # a whole worker-group restart starts every group again
        ((5, 4, 4), 4, 1),  # a run resumed into a metrics file that had attempts 0-3
    ],
)
def test_groups_replaced_counts_every_start_after_a_ranks_first(attempts, first, replaced):
    assert groups_replaced(hosts(*attempts), first) == replaced


@pytest.mark.parametrize(
    ("attempts", "replaced"),
    [
        ((0, 0, 0, 0), 0),
        ((1, 1, 0, 0), 1),  # group 0 (ranks 0, 1) replaced once: both members start again
        ((2, 2, 1, 1), 3),  # group 0 twice, group 1 once
        ((1, 0, 0, 0), 1),  # one member's newest hello is the only trace left: still once
        ((1, 1, 1, 1), 2),  # a whole worker-group restart starts both groups again
    ],
)
def test_a_group_of_two_is_replaced_once_not_once_per_member(attempts, replaced):
    assert groups_replaced(hosts(*attempts), 0, group_size=2) == replaced


def test_the_runs_figures_come_from_the_last_row_of_record():
    rows = [
        {"step": 1, "ft_quorum_size": 3, "ft_failures_survived": 0, "ft_steps_degraded": 0},
        {"step": 2, "ft_quorum_size": 2, "ft_failures_survived": 1, "ft_steps_degraded": 1},
    ]
    assert summary_fields(rows, hosts(1, 0, 0), 0) == {
        "ft_quorum_size": 2,
        "ft_failures_survived": 1,
        "ft_steps_degraded": 1,
        "ft_groups_replaced": 1,
    }
    assert summary_fields([], {}, 0) == {"ft_groups_replaced": 0}
