"""The remote-call benchmark runs end to end in a tiny configuration (our side only)."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("aux_rpc_bench")


def test_tiny_run_prints_every_figure(bench, capsys):
    argv = ["--no-ray", "--calls", "20", "--pipelined", "40", "--window", "8"]
    argv += ["--big-calls", "1", "--ranks", "50", "--seconds", "0.5", "--workers", "2"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    lines = ("1 KiB round trip   ours", "1 KiB round trip   floor", "pipelined          ours")
    for line in (*lines, "16 MiB round trip"):
        assert line in out
    assert "scale: 50 ranks" in out and "starved 0, errors 0" in out


def test_pure_pieces(bench):
    assert bench.percentiles([0.001] * 10) == pytest.approx((1000.0, 1000.0))
    assert bench.ratio(1.0, 0.0) != bench.ratio(1.0, 0.0)  # nan, not a crash
    calls = []
    assert bench.pipelined(lambda: calls.append(1), lambda batch: None, 10, 4) > 0
    assert len(calls) == 10


def test_threads_prints_cpu_per_call_of_each_process_ours_and_bare(bench, capsys):
    assert bench.main(["--threads", "--calls", "20", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "round 1 ours: p50" in out and "round 1 bare: p50" in out
    for process in ("client", "proxy", "worker"):
        assert out.count(f"  {process}: ") == 2
