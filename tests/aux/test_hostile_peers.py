"""Hostile peers against the auxiliary proxy and a worker faced directly (tests/hostile): a
subset of the 1,000 cases per loop of scripts/bench/hostile_bench.py, every kind of case
several times; the loop serves on, refuses and counts, and its memory stays put."""

from __future__ import annotations

import pytest

from tests.hostile.suites import SUITES, run

LIMIT = 1 << 20  # a small message limit: split and huge frames stay cheap


@pytest.mark.parametrize(
    ("loop", "refusals"),
    [
        ("proxy", {"garbage", "truncated", "oversized", "kind", "worker_refused_garbage"}),
        ("worker", {"refused_garbage", "refused_truncated", "refused_oversized", "refused_kind"}),
    ],
)
def test_no_message_stops_the_loop_or_grows_its_memory(loop, refusals):
    report = run(loop, cases=180, limit=LIMIT)
    assert set(report.kinds) == set(SUITES[loop].KINDS), report.kinds
    assert (report.threads_lost, report.failed_checks, report.restarts) == (0, 0, 0), report.line()
    assert report.growth_per_peer_mib <= 64, report.line()
    assert refusals <= set(report.refused), report.refused
