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
