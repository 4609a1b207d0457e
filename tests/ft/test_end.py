"""The end of a torchft run through the platform (`python -m driver.train ... ft=on`, an
embedded Ray, Ray Train's TorchftConfig): a replica group lost after the last step must
not keep the run from ending. Ray Train replaces the group; the replacement finds the run
done and returns. Before, every worker ended with `ray.train.report`, a barrier of all
workers: the replacement waited there for peers that had already left it, for ever."""

from __future__ import annotations

import json

import pytest

from tests.benches import load_bench

STEPS = 6


def run_failing_after_the_last_step(tmp_path, rank: int) -> tuple[list[dict], dict]:
    """Ray Train's health check every 3 s: the surviving rank is at its end (before, in
    `ray.train.report`) when the controller sees the failure and replaces the group."""
    import os

    bench = load_bench("ft_platform")  # runs driver.train in its own session, bounded
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "3"
    extra = [
        "ft=on",
        "ft.min_replicas=1",
        f"debug.fail_at_step={STEPS - 1}",  # raises after the commit of the last step
        f"debug.fail_rank={rank}",
        "checkpoint.interval_steps=3",
        f"checkpoint.root={tmp_path / 'ckpt'}",
    ]
    rows, _, _, code = bench.run(tmp_path, "end", 2, STEPS, [], extra, timeout_s=240)
    log = (tmp_path / "end.log").read_text()[-3000:]
    assert code == 0, log  # before the fix: killed at the timeout (-9)
    summary = json.loads((tmp_path / "end" / "summary.json").read_text())
    return rows, summary


@pytest.mark.slow
def test_a_group_lost_after_the_last_step_does_not_keep_the_run_from_ending(tmp_path):
    rows, summary = run_failing_after_the_last_step(tmp_path, rank=1)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert {r["rank"] for r in rows} == {0}  # the writer lived: its rows, no copies
    assert summary["ckpt_committed_step"] == STEPS  # the writer's final save
    assert summary["ft_groups_replaced"] == 1 and summary["ft_failures_survived"] == 0


@pytest.mark.slow
def test_the_writer_lost_after_the_last_step_leaves_every_row(tmp_path):
    """Rank 0 fails after the last commit: no mark of its final figures, so rank 1 (next
    in line) sends its copies (kept only for steps without a row) and the final figures."""
    rows, summary = run_failing_after_the_last_step(tmp_path, rank=0)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert summary["ft_groups_replaced"] == 1 and summary["steps"] == STEPS
    assert summary["ckpt_committed_step"] >= 3
