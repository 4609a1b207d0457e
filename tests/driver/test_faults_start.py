"""`debug.hold_replacement_s`: only a started-again failing rank waits before it joins;
`debug.await_replacements_at_step`: survivors wait for the killed ranks' replacements."""

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


@pytest.mark.parametrize(
    ("marks", "missing"),
    [
        ({}, []),
        ({"kill-5-0": "0"}, [0]),  # killed, no replacement yet
        ({"kill-5-0": "0", "ready-0-0": ""}, [0]),  # its own start does not count
        ({"kill-5-0": "0", "ready-0-0": "", "ready-0-1": ""}, []),  # its replacement is ready
        ({"kill-5-0": "3", "ready-0-3": ""}, [0]),  # a resumed run's first start was 3
        ({"kill-5-0": "3", "ready-0-4": ""}, []),
        ({"kill-5-0": "0", "kill-30-0": "1", "ready-0-1": ""}, [0]),  # killed again at 1
        ({"kill-5-0": "0", "kill-30-0": "1", "ready-0-2": ""}, []),
        ({"kill-5-2": "0", "ready-0-1": "", "ready-3-1": ""}, [2]),  # another rank's
        ({"stop-5-1": "", "term-7-1": "1.5", "ready-1-0": ""}, []),  # only kills await
        ({"kill-x-0": "0", "ready-y-1": "", "ready": ""}, []),  # not markers of this kind
    ],
)
def test_the_ranks_still_missing_a_replacement(marks, missing):
    assert faults_module.replacements_missing(marks) == missing


def test_a_survivor_awaits_the_replacement_and_fails_past_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(faults_module, "AWAIT_S", 1.0)  # the at() below: fails, not hangs
    debug = DebugConfig(kills=["5:0:during"], await_replacements_at_step=8)
    survivor = Faults(debug, rank=1, attempt=0, marks=str(tmp_path))
    survivor.ready()
    victim = Faults(debug, rank=0, attempt=0, marks=str(tmp_path))
    monkeypatch.setattr(faults_module.os, "kill", lambda *_: None)  # the kill, recorded only
    victim.at(5, "during")
    assert (tmp_path / ".faults" / "kill-5-0").read_text() == "0"
    survivor.at(7, "after")  # not the awaiting step: no wait
    with pytest.raises(RuntimeError, match=r"no replacement of rank \[0\] ready within"):
        survivor.at(8, "after")
    Faults(debug, rank=0, attempt=1, marks=str(tmp_path)).ready()  # the replacement
    survivor.at(8, "after")  # returns at once: the replacement is ready
    assert sorted(p.name for p in (tmp_path / ".faults").iterdir()) == [
        "kill-5-0", "ready-0-1", "ready-1-0"]  # fmt: skip


def test_ready_markers_are_left_only_by_a_drill_that_awaits(tmp_path):
    Faults(DebugConfig(), rank=0, attempt=0, marks=str(tmp_path)).ready()
    assert not (tmp_path / ".faults").exists()
