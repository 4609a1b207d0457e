"""What counts as one row of record per committed step across the soak's restarts
(tests/soak/records.py), on launches' steps written out."""

from __future__ import annotations

import pytest

from tests.soak.records import Segment, check, read_rows, runs_on


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
    data = b'{"step": 1}\n{"step": 2}\n{"ste{"step": 3}\n{"step": 4}\n'
    assert read_rows(data) == ([1, 2, 4], 1)
