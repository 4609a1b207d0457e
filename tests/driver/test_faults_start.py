"""`debug.hold_replacement_s`: only a started-again failing rank waits before it joins."""

from __future__ import annotations

import pytest

from driver.config.schema import DebugConfig
from driver.trainer import faults as faults_module
from driver.trainer.faults import Faults


@pytest.mark.parametrize(
    ("fail_at", "fail_rank", "rank", "attempt", "hold", "slept"),
    [
        (5, 1, 1, 1, 30.0, [30.0]),  # the failed rank's replacement
        (5, -1, 0, 2, 30.0, [30.0]),  # every rank fails: any replacement
        (5, 1, 1, 0, 30.0, []),  # the first start
        (5, 1, 0, 1, 30.0, []),  # another rank started again
        (None, 1, 1, 1, 30.0, []),  # no failure asked for
        (5, 1, 1, 1, 0.0, []),  # no hold
    ],
)
def test_only_a_replacement_of_the_failing_rank_is_held(
    monkeypatch, fail_at, fail_rank, rank, attempt, hold, slept
):
    seen = []
    monkeypatch.setattr(faults_module.time, "sleep", seen.append)
    debug = DebugConfig(fail_at_step=fail_at, fail_rank=fail_rank, hold_replacement_s=hold)
    Faults(debug, rank, attempt).before_start()
    assert seen == slept
