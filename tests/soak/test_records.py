"""What counts as one row of record per committed step across the soak's restarts
(tests/soak/records.py), on launches' steps written out."""

from __future__ import annotations

import pytest

from tests.soak.records import Segment, check, losses, read_rows, runs_on, same_curve, split


def steps(first: int, last: int) -> list[int]:
    return list(range(first, last + 1))


@pytest.mark.parametrize(
    ("segments", "committed", "replayed", "problem"),
    [
        ([Segment(0, steps(1, 40))], 40, 0, None),
        ([Segment(0, steps(1, 37)), Segment(30, steps(31, 80))], 80, 7, None),
        ([Segment(0, steps(1, 37)), Segment(30, []), Segment(30, steps(31, 50))], 50, 7, None),
        ([Segment(0, steps(1, 106)), Segment(50, [])], 50, 0, None),
        ([Segment(0, [])], 0, 0, None),
        ([Segment(0, steps(1, 37)), Segment(30, steps(30, 80))], 80, 7, "first row is step 30"),
        ([Segment(0, steps(1, 37)), Segment(30, steps(32, 80))], 80, 7, "first row is step 32"),
        ([Segment(0, steps(1, 29)), Segment(30, steps(31, 40))], 40, 0, "reached only step 29"),
        ([Segment(0, [1, 2, 2, 3])], 3, 0, "step 2 has two rows"),
        ([Segment(0, [1, 2, 5, 6])], 6, 0, "steps 3..4 have no row"),
        ([Segment(0, [1, 2, 3, 2])], 2, 0, "step 2 rowed again after step 3"),
        ([Segment(0, steps(2, 5))], 5, 0, "first row is step 2"),
    ],
)
def test_committed_steps_and_what_is_wrong(segments, committed, replayed, problem):
    verdict = check(segments)
    assert (verdict.committed, verdict.replayed) == (committed, replayed)
    if problem is None:
        assert verdict.problems == []
    else:
        assert len(verdict.problems) == 1 and problem in verdict.problems[0], verdict.problems


def test_a_run_on_is_clean():
    assert runs_on(steps(1, 9)) == []


def test_a_torn_row_is_counted_not_read():
    data = b'{"step": 1}\n{"step": 2}\n{"ste{"step": 3}\n{"step": 4, "attempt": 1}\n'
    assert read_rows(data) == ([(1, 0), (2, 0), (4, 1)], 1)


def test_a_restart_inside_a_launch_is_a_segment_of_its_own():
    rows = [(1, 0), (2, 0), (3, 0), (4, 0), (3, 1), (4, 1), (5, 1)]
    assert split(0, rows) == [Segment(0, [1, 2, 3, 4]), Segment(2, [3, 4, 5])]
    assert check(split(0, rows)).problems == []
    ft = [(5, 0), (6, 1), (7, 1)]  # torchft: a replaced worker's attempt goes on
    assert split(4, ft) == [Segment(4, [5, 6, 7])]
    twice = [(1, 0), (2, 0), (2, 0)]  # the same attempt again: a duplicate, not a restart
    assert split(0, twice) == [Segment(0, [1, 2, 2])]


def test_the_loss_of_record_is_the_last_row_of_its_step():
    lines = ['{"step": 1, "loss": 2.0}', '{"step": 2, "loss": 1.9}', '{"step": 2, "lo',
             '{"step": 2, "loss": 1.8}', '{"step": 3}']  # fmt: skip
    data = "\n".join(lines).encode()
    assert losses(data) == {1: 2.0, 2: 1.8}  # a torn line and a row without loss skipped


NAN = float("nan")


@pytest.mark.parametrize(
    "faulted, ok, said",
    [
        ({1: 2.0, 2: 1.9}, True, "2 steps in common, largest relative loss difference 0.0e+00"),
        ({1: 2.0, 2: 1.9001}, True, "5.3e-05 at step 2"),
        ({1: 2.0, 2: 1.95, 3: 1.0}, False, "first beyond the bound: step 2"),
        ({1: 2.0, 2: NAN}, False, "first beyond the bound: step 2"),
        ({7: 1.0}, False, "no step in common"),
    ],
)
def test_the_faulted_runs_loss_curve_against_the_failure_free_one(faulted, ok, said):
    got, text = same_curve(faulted, {1: 2.0, 2: 1.9}, rel=1e-3)
    assert got is ok and said in text
