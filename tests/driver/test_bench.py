"""The overhead benchmark's pure pieces: the steady-state rate and the fairness check."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("driver_overhead")


def test_steady_rate_skips_the_first_steps(bench):
    times = [0.0, 5.0, 5.5, 6.0, 6.5]  # a slow first step, then 2 steps/s
    assert bench.steady_rate(times, skip=1) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="too few"):
        bench.steady_rate(times, skip=4)


def test_conditions_tell_unequal_workers_apart(bench):
    probe = {"rank": 0, "threads": 1, "omp": "1", "cpus": 2, "nice": 15}
    same = bench.conditions([probe, {**probe, "rank": 1}])
    assert same == {(1, "1", 2, 15)}
    assert bench.conditions([probe, {**probe, "nice": 0}]) != same
    assert bench.conditions([{**probe, "threads": 2}]) != same


def test_probe_source_records_the_worker(bench, tmp_path, monkeypatch):
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv(bench.PROBE_ENV, str(out))
    bench.ProbeSource(list(range(8)), 2, 1, 2, seed=0)
    assert out.read_text().count("\n") == 1 and '"rank": 1' in out.read_text()
