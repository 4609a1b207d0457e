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


def test_the_bench_prints_each_loops_growth_against_the_bound():
    from tests.benches import load_bench
    from tests.hostile.suites import Report

    bench = load_bench("hostile_bench")
    reports = [Report("proxy", rss_before=0, rss_after=8 * 32 << 20, peak=8 * 64 << 20),
               Report("channel", threads_lost=1, failed_checks=2)]  # fmt: skip
    lines = bench.summary(reports)
    assert lines[0].startswith("serving threads lost 1 [goal 0], legitimate calls failed 2")
    assert "proxy" in lines[1] and "0.500 [goal <= 1]" in lines[1] and "1.000" in lines[1]
    assert bench.main(["--loops", "nope"]) == 2
