"""Live fault tolerance on real processes: a Lighthouse, one process per replica group
(driver.ft.drill), SIGKILL at a chosen point of step k."""

from __future__ import annotations

import math

import pytest

from driver.ft.batch import plan_step
from driver.ft.drill import reference_losses
from driver.ft.harness import Drill

FT = {
    "min_replicas": 2,
    "heartbeat_timeout_ms": 500,
    "join_timeout_ms": 1000,
    "quorum_timeout_s": 30,
    "timeout_s": 20,
}


def check_survivors(result, names: list[str], steps: int) -> None:
    """Every committed step exactly once, weights bit-identical across groups, no NaN."""
    for name in names:
        assert result.codes[name] == 0, result.stderr[name][-2000:]
        assert [r["step"] for r in result.rows[name]] == list(range(1, steps + 1)), name
        assert all(r["finite"] and math.isfinite(r["loss"]) for r in result.rows[name])
    for step in range(steps):
        assert len({result.rows[n][step]["digest"] for n in names}) == 1, f"step {step + 1}"


def check_constant_batch(result, spec: dict, groups: int, accum: int) -> None:
    """Each step's slots (hence sample ids) are the failure-free run's, and so is the loss
    curve, within reduction-order noise."""
    by_step: dict[int, list[int]] = {}
    for rows in result.rows.values():
        for row in rows:
            by_step.setdefault(row["step"], [])
            if row["slots"] not in [
                by_step[row["step"]][i : i + len(row["slots"])]
                for i in range(len(by_step[row["step"]]))
            ]:
                by_step[row["step"]] += row["slots"]
    for step, slots in by_step.items():
        assert sorted(slots) == list(range(groups * accum)), f"step {step}: {slots}"
    want = reference_losses({**spec, "groups": groups, "steps": len(by_step)})
    got = [result.rows["g0"][i]["loss"] for i in range(len(want))]
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def drill(tmp_path, kills, rejoin=None, steps=10, groups=3, accum=2, **ft):
    spec = {"grad_accum": accum, "micro_batch": 8, "ft": {**FT, **ft}}
    result = Drill(tmp_path, groups, steps, kills, rejoin or {}, spec).run()
    return result, spec


def test_kill_during_allreduce_then_rejoin_and_heal(tmp_path):
    """Group 2 dies inside step 3's allreduce; 0 and 1 go on from the same step with the
    whole global batch; a fresh group 2 joins after step 6 and heals from a live peer."""
    result, spec = drill(tmp_path, {2: (3, "during")}, rejoin={2: 6}, steps=12)
    assert result.codes["g2"] == -9
    check_survivors(result, ["g0", "g1"], 12)
    check_constant_batch(result, spec, 3, 2)
    assert [r["live"] for r in result.rows["g0"]][:4] == [3, 3, 3, 2]
    assert result.rows["g0"][-1]["ft_failures_survived"] == 1
    assert result.rows["g0"][-1]["ft_steps_degraded"] >= 1
    healed = result.rows["g2b"]
    assert healed, result.stderr["g2b"][-2000:]
    assert healed[0]["ft_heals"] == 1
    first = healed[0]["step"]
    assert healed[0]["digest"] == result.rows["g0"][first - 1]["digest"]
    assert [r["step"] for r in healed] == list(range(first, 13))
    assert result.rows["g0"][-1]["live"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["before", "after"])
def test_kill_before_and_after_allreduce(tmp_path, phase):
    result, spec = drill(tmp_path, {1: (4, phase)})
    assert result.codes["g1"] == -9
    check_survivors(result, ["g0", "g2"], 10)
    check_constant_batch(result, spec, 3, 2)


@pytest.mark.slow
def test_shrinking_batch_scales_the_learning_rate(tmp_path):
    result, _ = drill(tmp_path, {2: (3, "during")}, constant_batch=False)
    check_survivors(result, ["g0", "g1"], 10)
    after = [r for r in result.rows["g0"] if r["live"] == 2]
    assert after and all(r["slots"] == list(plan_step([0], 3, 2, False)[0]) for r in after)
    assert all(r["slots"] == [2, 3] for r in result.rows["g1"])


@pytest.mark.slow
def test_below_the_minimum_stops_with_the_reason_and_the_checkpoint_resumes(tmp_path):
    """Groups 0 (the checkpoint writer) and 2 die at steps 3 and 6: group 1, the lowest live
    group, writes from step 4 on; alone it is below ft.min_replicas=2, so it stops with one
    line; a full restart resumes from the newest checkpoint (step 6, written by group 1) and
    finishes on the failure-free loss curve."""
    ckpt = {"ckpt_root": str(tmp_path / "ckpt"), "ckpt_interval": 2}
    spec = {"grad_accum": 2, "micro_batch": 8, "ft": {**FT, "quorum_timeout_s": 3}, **ckpt}
    kills = {0: (3, "during"), 2: (6, "after")}
    first = Drill(tmp_path / "a", 3, 10, kills, {}, spec).run()
    assert first.codes["g1"] == 3, first.stderr["g1"][-2000:]
    reason = [line for line in first.stderr["g1"].splitlines() if line.startswith("ft: ")]
    assert len(reason) == 1 and "ft.min_replicas=2" in reason[0], first.stderr["g1"][-2000:]
    assert first.rows["g1"][-1]["step"] == 7
    assert [r["lowest"] for r in first.rows["g1"]] == [False] * 3 + [True] * 4
    resumed = Drill(tmp_path / "b", 3, 10, {}, {}, {**spec, "resume": True}).run()
    check_survivors_from(resumed, ["g0", "g1", "g2"], 7, 10)
    want = reference_losses({**spec, "groups": 3, "steps": 10})
    got = [r["loss"] for r in resumed.rows["g0"]]
    assert got == pytest.approx(want[6:], rel=1e-4, abs=1e-6)


def check_survivors_from(result, names: list[str], first: int, last: int) -> None:
    for name in names:
        assert result.codes[name] == 0, result.stderr[name][-2000:]
        assert [r["step"] for r in result.rows[name]] == list(range(first, last + 1)), name
    for i in range(last - first + 1):
        assert len({result.rows[n][i]["digest"] for n in names}) == 1
