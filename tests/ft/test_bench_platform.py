"""Pure pieces of scripts/bench/ft_platform.py: committed steps and effective throughput
from metrics rows."""

from __future__ import annotations

import os

import pytest

from tests.benches import load_bench

bench = load_bench("ft_platform")


def rows(*pairs: tuple[int, float]) -> list[dict]:
    return [{"step": s, "time": t} for s, t in pairs]


def test_committed_keeps_the_newest_row_of_each_step_in_step_order():
    run = rows((1, 10.0), (2, 11.0), (1, 20.0), (2, 21.0), (3, 22.0))
    assert [(r["step"], r["time"]) for r in bench.committed(run)] == [
        (1, 20.0),
        (2, 21.0),
        (3, 22.0),
    ]


@pytest.mark.parametrize(
    ("run", "launched", "expected"),
    [
        # 4 steps of 8 samples: from launch 32 / 4 s; from the first step 3 steps / 3 s
        (rows((1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)), 0.0, (8.0, 8.0)),
        # a restart re-runs steps 1-2: the first commit is still the first ever
        (rows((1, 2.0), (2, 3.0), (1, 7.0), (2, 8.0), (3, 9.0), (4, 10.0)), 0.0, (3.2, 3.0)),
        # a missing row (its sender died after the commit): the step still counts
        (rows((1, 1.0), (2, 2.0), (4, 4.0)), 0.0, (8.0, 8.0)),
    ],
)
def test_effective_throughput_from_launch_and_from_the_first_step(run, launched, expected):
    assert bench.effective_throughput(run, launched, 8) == pytest.approx(expected)


def test_effective_throughput_needs_a_committed_step():
    with pytest.raises(ValueError, match="no committed step"):
        bench.effective_throughput([], 0.0, 8)


def test_descendants_finds_a_child_process():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in bench.descendants(os.getpid())
        assert bench.train_workers(os.getpid()) == []
    finally:
        child.kill()
        child.wait()


def ft_rows(*rows: tuple[int, float, float, int, float]) -> list[dict]:
    keys = ("step", "time", "step_time", "ft_quorum_size", "ft_quorum_s")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def test_out_of_quorum_splits_the_time_at_the_survivors_commit():
    # SIGTERM at 10.0 during step 5; step 5 commits at 10.1, the survivors' quorum for
    # step 6 waits 0.5 s (the running total goes 0.2 -> 0.7) and forms at 10.61
    run = ft_rows((4, 9.9, 0.1, 2, 0.2), (5, 10.1, 0.1, 2, 0.2), (6, 10.71, 0.1, 1, 0.7),
                  (7, 10.81, 0.1, 1, 0.7))  # fmt: skip
    got = bench.out_of_quorum(run, signalled=10.0)
    assert got == pytest.approx({"total": 0.61, "in_flight": 0.1, "quorum": 0.5, "step": 6})


def test_out_of_quorum_needs_a_quorum_without_the_group():
    run = ft_rows((1, 1.0, 0.1, 2, 0.0), (2, 2.0, 0.1, 2, 0.0))
    with pytest.raises(ValueError, match="no quorum without the group"):
        bench.out_of_quorum(run, signalled=0.5)
