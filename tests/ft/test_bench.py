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
