"""End to end under live fault tolerance (`ft=on`) on one embedded Ray: two gloo workers,
each its own replica group under Ray Train's TorchftConfig; rank 1 fails after step 6.
Rank 0 trains on alone (with the whole global batch), Ray Train replaces only rank 1's
group, which heals from rank 0 and trains to the end; every step is committed once, and
rank 0, the lowest live group, writes the checkpoints."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from driver.train import main
from tests.driver.conftest import TINY_LM
from tests.soak.procs import descendants, snapshot

STEPS = 100


@pytest.mark.slow
def test_a_failed_replica_group_is_replaced_and_heals_while_training_goes_on(ray_local, tmp_path):
    out = tmp_path / "run"
    args = [
        TINY_LM,
        "ft=on",
        f"train.steps={STEPS}",
        "debug.fail_at_step=5",
        "debug.fail_rank=1",
        "checkpoint.interval_steps=25",
        f"checkpoint.root={tmp_path / 'ckpt'}",
        "logging.format=json",
        f"run.output_dir={out}",
        "run.name=ft-e2e",
    ]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # none lost, none twice
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert rows[0]["ft_quorum_size"] == 2 and rows[-1]["ft_failures_survived"] == 1
    degraded = [r["step"] for r in rows if r["ft_quorum_size"] == 1]
    assert degraded and degraded[0] == 7 and rows[-1]["ft_steps_degraded"] == len(degraded)
    # the replacement is back: it joined the quorum behind, so it healed from rank 0 first
    assert rows[-1]["ft_quorum_size"] == 2 and rows[-1]["ft_heals"] == 0
    assert {r["ft_slots"] for r in rows if r["ft_quorum_size"] == 1} == {2}  # constant batch
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["ckpt_committed_step"] == STEPS
    assert lighthouses_left(within_s=10) == []  # the run's Lighthouse ended with it


def lighthouses_left(within_s: float) -> list[str]:
    """The Lighthouse actor processes still below this one (the module's embedded Ray)
    after up to `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        table = snapshot()
        left = [table[pid].cmdline for pid in descendants(os.getpid(), table)
                if "LighthouseServerActor" in table[pid].cmdline]  # fmt: skip
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def ft_run(tmp_path, name: str, steps: int, *extra: str) -> list[dict]:
    out = tmp_path / name
    args = [TINY_LM, "ft=on", f"train.steps={steps}", "logging.format=json"]
    assert main([*args, f"run.output_dir={out}", f"run.name={name}", *extra]) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_constant_batch_loss_curve_matches_the_failure_free_run(ray_local, tmp_path):
    """With `ft.constant_batch`, rank 0 takes over rank 1's micro-batches while it is
    missing: each step trains the same samples, so the loss curve is the failure-free one
    (up to reduction order). The run may end before the replacement is back: the
    replacement then sees the run's done mark and stops without training."""
    steps = 30
    clean = ft_run(tmp_path, "clean", steps)
    failed = ft_run(tmp_path, "failed", steps, "debug.fail_at_step=4", "debug.fail_rank=1")
    assert [r["step"] for r in failed] == [r["step"] for r in clean] == list(range(1, steps + 1))
    assert failed[-1]["ft_failures_survived"] == 1 and clean[-1]["ft_failures_survived"] == 0
    assert failed[-1]["ft_steps_degraded"] > 0
    for a, b in zip(clean, failed, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), a["step"]


@pytest.mark.slow
def test_rows_of_record_keep_coming_while_rank0s_group_is_replaced(ray_local, tmp_path):
    """Rank 0 fails after step 6: rank 1, now the lowest live group, sends the full rows
    (with the loss) until rank 0's replacement has healed; metrics.jsonl has every step once."""
    rows = ft_run(tmp_path, "lost0", 40, "debug.fail_at_step=5", "debug.fail_rank=0")
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert all(math.isfinite(r["loss"]) for r in rows)
    alone = [r for r in rows if r["ft_quorum_size"] == 1]
    assert alone and {r["rank"] for r in alone} == {1}
    assert rows[-1]["ft_failures_survived"] == 1 and rows[-1]["ft_steps_degraded"] == len(alone)


@pytest.mark.slow
def test_below_the_minimum_the_driver_stops_with_the_reason_and_the_run_resumes(
    ray_local, tmp_path, capsys
):
    """Two groups, ft.min_replicas=2: rank 1 fails after step 6, its replacement finds no
    capacity (debug.hold_replacement_s) and rank 0 gives up after ft.quorum_timeout_s: the
    driver stops at once with the one-line reason and exit code 3; the same run resumes
    from step 6. (With a 1 s quorum timeout and no hold, two live groups on a loaded
    machine fell more than 1 s apart and stopped before the failure; a longer timeout
    alone lets the replacement join in time. With 15 s, two of these runs at once beside
    two busy loops stopped at step 4: rank 0's steps took up to 2.5 s and its checkpoint
    staging blocked it up to 8 s more, while rank 1 waited in the quorum.)"""
    ckpt = [f"checkpoint.root={tmp_path / 'ckpt'}", "checkpoint.interval_steps=2"]
    common = [TINY_LM, "ft=on", "train.steps=20", "logging.format=json", "run.name=stop", *ckpt]
    stop = ["ft.min_replicas=2", "ft.quorum_timeout_s=30", "ft.watchdog_s=0",  # groups of one
            "checkpoint.max_failures=3"]  # fmt: skip
    fail = ["debug.fail_at_step=5", "debug.fail_rank=1", "debug.hold_replacement_s=300"]
    out = tmp_path / "first"
    assert main([*common, *stop, *fail, f"run.output_dir={out}"]) == 3
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("error: run failed: ft: no quorum")]
    assert len(line) == 1 and "ft.min_replicas=2" in line[0], err[-2000:]
    resumed = ft_run(tmp_path, "stop", 20, "checkpoint.resume=auto", *ckpt)
    assert [r["step"] for r in resumed] == list(range(7, 21))
