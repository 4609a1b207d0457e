"""Hostile peers of DiLoCo (tests/hostile): learners on the allow-list that misbehave (and
strangers) against the synchronizer, and a synchronizer that misbehaves against a learner;
a subset of the 1,000 cases per loop of scripts/bench/hostile_bench.py. Neither side stops,
nothing non-finite is merged, saved or applied, and memory stays put."""

from __future__ import annotations

from tests.hostile.suites import SUITES, run


def test_no_learner_stops_the_synchronizer_or_poisons_its_weights():
    report = run("synchronizer", cases=200, limit=1 << 20)
    assert set(report.kinds) == set(SUITES["synchronizer"].KINDS), report.kinds
    assert (report.threads_lost, report.failed_checks, report.restarts) == (0, 0, 0), report.line()
    assert report.growth_per_peer_mib <= 64, report.line()
    assert report.stats["finite"] and report.stats["merges"] >= report.checks - 1
    refused = report.refused
    assert {"non_finite", "out_of_range", "key", "garbage", "protocol"} <= set(refused), refused
    assert refused["unknown_keys"] >= 1
    assert set(report.stats["refused_peers"]) <= {"a", "b"}  # counted against the learner


def test_no_reply_stops_a_learner_or_makes_its_weights_non_finite():
    report = run("learner", cases=120, limit=1 << 20)
    assert (report.threads_lost, report.failed_checks) == (0, 0), report.line()
    assert report.growth_per_peer_mib <= 64, report.line()
    assert report.stats["finite"] and report.stats["error"] == ""
    # every non-finite update that came in time was refused (a later one is dropped unread)
    assert 0 < report.refused["updates"] <= report.kinds["nan"] + report.kinds["inf"]
    assert report.refused["merges"] > 0  # and the good ones merged
