"""The auxiliary-call benchmark on a simulated 2-node cluster runs end to end, tiny."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.mark.slow
def test_tiny_run_prints_both_ratios_and_every_side(capsys):
    bench = load_bench("aux_direct_bench")
    assert bench.main(["--calls", "30", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "ratio same node (direct) / Ray actor call" in out
    assert "ratio cross node / bare ZeroMQ chain" in out
    for label in bench.LABELS.values():
        assert f"{label} p50" in out
