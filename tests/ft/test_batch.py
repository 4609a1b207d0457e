"""Table tests of the slot plan and LR rule (driver.ft.batch), and of the drill's sample
ids (tests.support.ft_drill_job)."""

from __future__ import annotations

import pytest

from driver.ft.batch import loss_divisor, lr_scale, plan_step
from tests.support.ft_drill_job import slot_sample_ids


@pytest.mark.parametrize(
    ("live", "start", "accum", "constant", "expected"),
    [
        ([0, 1, 2, 3], 4, 2, True, {0: (0, 1), 1: (2, 3), 2: (4, 5), 3: (6, 7)}),
        ([0, 2, 3], 4, 2, True, {0: (0, 1, 2), 2: (4, 5, 3), 3: (6, 7)}),
        ([3, 1], 4, 1, True, {1: (1, 0), 3: (3, 2)}),
        ([1], 3, 2, True, {1: (2, 3, 0, 1, 4, 5)}),
        ([0, 1, 2, 3, 4], 4, 1, True, {0: (0,), 1: (1,), 2: (2,), 3: (3,), 4: ()}),
        ([0, 2, 3], 4, 2, False, {0: (0, 1), 2: (4, 5), 3: (6, 7)}),
        ([1, 4], 4, 1, False, {1: (1,), 4: (0,)}),
        ([], 4, 2, True, {}),
    ],
)
def test_plan_step(live, start, accum, constant, expected):
    assert plan_step(live, start, accum, constant) == expected


@pytest.mark.parametrize("live", [[0, 1, 2, 3], [0, 1, 3], [2, 3], [1], [0, 1, 2, 3, 7]])
def test_constant_plan_covers_every_slot_once_own_slots_first(live):
    plan = plan_step(live, 4, 3, True)
    slots = [s for g in sorted(plan) for s in plan[g]]
    assert sorted(slots) == list(range(12))
    assert all(plan[g][:3] == (3 * g, 3 * g + 1, 3 * g + 2) for g in live if g < 4)
    sizes = [len(v) for g, v in plan.items() if g < 4]  # an extra group only takes orphans
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    ("step", "slot", "slots", "micro", "expected"),
    [(0, 0, 8, 4, range(0, 4)), (0, 7, 8, 4, range(28, 32)), (3, 2, 8, 4, range(104, 108))],
)
def test_slot_sample_ids(step, slot, slots, micro, expected):
    assert slot_sample_ids(step, slot, slots, micro) == expected


@pytest.mark.parametrize(
    ("live", "start", "rule", "constant", "expected"),
    [
        (4, 4, "linear", False, 1.0),
        (3, 4, "linear", False, 0.75),
        (1, 4, "linear", False, 0.25),
        (3, 4, "none", False, 1.0),
        (3, 4, "linear", True, 1.0),
        (5, 4, "linear", False, 1.0),
    ],
)
def test_lr_scale(live, start, rule, constant, expected):
    assert lr_scale(live, start, rule, constant) == expected


@pytest.mark.parametrize(
    ("live", "constant", "expected"), [(4, True, 8), (3, True, 8), (3, False, 6), (5, False, 8)]
)
def test_loss_divisor(live, constant, expected):
    assert loss_divisor(live, 4, 2, constant) == expected


@pytest.mark.parametrize(
    ("group_slots", "accum", "size", "member", "expected"),
    [
        ((0, 1), 2, 1, 0, (0, 1)),  # groups of one worker: the groups' numbering
        ((1,), 1, 2, 0, (2,)),  # group 1's slot, member 0: worker 2's slot
        ((1,), 1, 2, 1, (3,)),  # member 1: worker 3's
        ((2, 3, 0, 1), 2, 2, 1, (6, 7, 2, 3)),  # group 1 with group 0's slots, member 1
    ],
)
def test_member_slots(group_slots, accum, size, member, expected):
    from driver.ft.plan import member_slots

    assert member_slots(group_slots, accum, size, member) == expected
