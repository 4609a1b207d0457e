"""scripts/bench/ft_bench.py runs end to end on a tiny config (figures not asserted)."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.mark.slow
def test_ft_bench_tiny(capsys):
    bench = load_bench("ft_bench")
    assert (
        bench.main(
            [
                "--groups",
                "2",
                "--steps",
                "8",
                "--kills",
                "4",
                "--interval",
                "3",
                "--accum",
                "1",
                "--compute-ms",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for label in ("effective throughput", "kill -> first commit", "final loss", "steps/s"):
        assert label in out


@pytest.mark.slow
def test_ft_bench_platform_tiny(capsys):
    """--platform: two `python -m driver.train` runs with a worker SIGKILLed at step 10. The
    bench sees a step only when its row reaches metrics.jsonl, up to ~3 s later (1 s
    batches, 2 s drains), so the run goes on long enough after it for the kill to strike
    while the workers still train (at 30 steps a quiet machine had finished by then)."""
    bench = load_bench("ft_bench")
    argv = ["--platform", "--groups", "2", "--steps", "120", "--kills", "10", "--interval", "8"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "from first step" in out and "from launch" in out
    assert "(ft-on 1, restart 1)" in out
