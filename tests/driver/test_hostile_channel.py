"""Hostile peers against the run's channel (tests/hostile): strangers turned away at the
handshake, and peers holding the run's token that send everything else; a subset of the
1,000 cases of scripts/bench/hostile_bench.py. The channel serves on, refuses and counts,
and the driver's memory stays put."""

from __future__ import annotations

from tests.hostile.suites import SUITES, run


def test_no_message_stops_the_channel_or_grows_the_drivers_memory():
    report = run("channel", cases=200, limit=1 << 20)
    assert set(report.kinds) == set(SUITES["channel"].KINDS), report.kinds
    assert (report.threads_lost, report.failed_checks, report.restarts) == (0, 0, 0), report.line()
    assert report.growth_per_peer_mib <= 64, report.line()
    assert {"token", "garbage", "truncated", "oversized"} <= set(report.refused), report.refused
