"""Live fault tolerance on real processes: a Lighthouse, one process per replica group
(tests.support.ft_drill), SIGKILL at a chosen point of step k."""

from __future__ import annotations

import json
import math

import pytest

from driver.ft.batch import plan_step
from tests.support.ft_drill_job import reference_losses
from tests.support.ft_harness import Drill

FT = {
    "min_replicas": 2,
    "heartbeat_timeout_ms": 500,
    "join_timeout_ms": 1000,
    "quorum_timeout_s": 30,
    "timeout_s": 20,
    "watchdog_s": 0,  # off: a drill group is one process, which the drill kills itself
}


def committed(result, names: list[str]) -> dict[int, list[dict]]:
    """Step -> the survivors' rows for it."""
    by_step: dict[int, list[dict]] = {}
    for name in names:
        for row in result.rows[name]:
            by_step.setdefault(row["step"], []).append(row)
    return by_step


def check_survivors(result, names: list[str], steps: int) -> None:
    """No committed step lost or repeated, weights bit-identical across the groups that
    committed each step, no NaN. (When the dead group's share of an allreduce got through
    to one survivor only, that one commits the step and the other heals from it at the
    next quorum: a step a group did not commit itself is not lost.)"""
    for name in names:
        assert result.codes[name] == 0, result.stderr[name][-6000:]
        mine = [r["step"] for r in result.rows[name]]
        assert mine == sorted(set(mine)) and mine[-1] == steps, name
        assert all(r["finite"] and math.isfinite(r["loss"]) for r in result.rows[name])
    by_step = committed(result, names)
    assert sorted(by_step) == list(range(1, steps + 1))
    for step, rows in by_step.items():
        assert len({r["digest"] for r in rows}) == 1, f"step {step}"


def check_constant_batch(result, spec: dict, groups: int, accum: int) -> None:
    """Every committed step trained every global slot (hence the failure-free run's sample
    ids): each group its planned slots for the step's quorum (its own, and a share of the
    missing groups'); and the loss curve is the
    failure-free run's within reduction-order noise. (A group killed after it contributed
    to a step that then committed leaves no row for that step; its block is in the sum, as
    the loss shows.)"""
    steps = set()
    for rows in result.rows.values():
        for row in rows:
            plan = plan_step(row["groups"], groups, accum)
            assert row["live"] == len(row["groups"]) and row["slots"] == list(plan[row["group"]])
            steps.add(row["step"])
    want = reference_losses({**spec, "groups": groups, "steps": len(steps)})
    by_step = committed(result, list(result.rows))
    got = [by_step[step][0]["loss"] for step in range(1, len(want) + 1)]
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def drill(tmp_path, kills, rejoin=None, steps=10, groups=3, accum=2, extra=None, **ft):
    spec = {"grad_accum": accum, "micro_batch": 8, "ft": {**FT, **ft}, **(extra or {})}
    result = Drill(tmp_path, groups, steps, kills, rejoin or {}, spec).run()
    return result, spec


def records(folder) -> list[dict]:
    """The metrics rows the groups' ranks sent that the driver keeps as their step's row of
    record (driver.metrics.records: a copy only for a step without one). Group 0's rows
    arrive first: it died before the others took over."""
    from driver.metrics.rank import of_record
    from driver.metrics.records import RecordBook

    rows = []
    for path in sorted(folder.glob("g*.jsonl.metrics")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    RecordBook().admit(rows)
    return [row for row in rows if of_record(row)]


def test_kill_rank0_group_during_allreduce_then_rejoin_and_heal(tmp_path):
    """Group 0 (rank 0, the checkpoint and metrics writer) dies inside step 3's allreduce;
    1 and 2 go on from the same step with the whole global batch, group 1 now writing the
    checkpoints and the full metrics rows; a fresh group 0 joins after step 6 and heals from
    a live peer without reading a checkpoint, then writes again."""
    ckpt = {"ckpt_root": str(tmp_path / "ckpt"), "ckpt_interval": 2}
    result, spec = drill(tmp_path, {0: (3, "during")}, rejoin={0: 6}, steps=12, extra=ckpt)
    assert result.codes["g0"] == -9
    check_survivors(result, ["g1", "g2"], 12)
    check_constant_batch(result, spec, 3, 2)
    lives = [r["live"] for r in result.rows["g1"]]
    assert lives[:3] == [3, 3, 3] and 2 in lives[3:]  # step 4 commits with 2, or with 3
    # when group 0's part of the allreduce was through before it died
    assert result.rows["g1"][-1]["ft_failures_survived"] == 1
    assert result.rows["g1"][-1]["ft_steps_degraded"] >= 1
    healed = result.rows["g0b"]
    assert healed, result.stderr["g0b"][-2000:]
    assert healed[0]["ft_heals"] == 1 and healed[0]["ft_restores"] == 0
    assert all(r["ckpt_loads"] == 0 for r in healed)  # no checkpoint read: a live peer healed it
    first = healed[0]["step"]
    assert healed[0]["digest"] == committed(result, ["g1", "g2"])[first][0]["digest"]
    assert [r["step"] for r in healed] == list(range(first, 13))
    assert result.rows["g1"][-1]["live"] == 3
    # the lowest live group writes: group 1 while group 0 is missing, group 0 once back
    assert any(r["lowest"] for r in result.rows["g1"]) and healed[-1]["lowest"]
    # the full metrics rows: exactly one per committed step, with the loss, whoever wrote
    # it; when group 0's share got through and the survivors committed step 4 with group 0
    # still in its quorum (the writer of record died inside that step), group 1's copy
    rows = records(tmp_path)
    assert sorted(r["step"] for r in rows) == list(range(1, 13))
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert {r["rank"] for r in rows} >= {0, 1}
    by_step = {r["step"]: r for r in rows}
    assert [by_step[s]["ft_quorum_size"] for s in (1, 12)] == [3, 3]
    assert by_step[12]["ft_failures_survived"] == 1 and by_step[12]["ft_steps_degraded"] >= 1


def test_the_rows_a_dead_writer_did_not_send_come_from_the_next_writer(tmp_path):
    """Group 0, the writer, dies right after committing step 3, its row unsent (a SIGKILLed
    rank's reporter holds up to a second of rows): group 1 becomes the writer at step 4
    and first sends its copy of step 3, so every committed step keeps one row of record."""
    result, _ = drill(tmp_path, {0: (2, "unsent")}, steps=6, groups=2, accum=1, min_replicas=1)
    assert result.codes["g0"] == -9
    assert [r["step"] for r in result.rows["g0"]] == [1, 2, 3]
    check_survivors(result, ["g1"], 6)
    rows = records(tmp_path)
    assert [(r["step"], r["rank"]) for r in rows] == [(1, 0), (2, 0), (3, 1), (4, 1),
                                                      (5, 1), (6, 1)]  # fmt: skip
    assert rows[2].get("backfilled") and rows[2]["loss"] == result.rows["g1"][2]["loss"]


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
    group, writes from the first step without group 0 on (step 4; step 5 when group 0's
    share of step 4 went through before it died, so the survivors committed step 4 with it);
    alone it is below ft.min_replicas=2, so it stops with one line; a full restart resumes
    from the newest checkpoint (step 6, written by group 1) and finishes on the failure-free
    loss curve."""
    ckpt = {"ckpt_root": str(tmp_path / "ckpt"), "ckpt_interval": 2}
    spec = {"grad_accum": 2, "micro_batch": 8, "ft": {**FT, "quorum_timeout_s": 3}, **ckpt}
    kills = {0: (3, "during"), 2: (6, "after")}
    first = Drill(tmp_path / "a", 3, 10, kills, {}, spec).run()
    assert first.codes["g1"] == 3, first.stderr["g1"][-2000:]
    reason = [line for line in first.stderr["g1"].splitlines() if line.startswith("ft: ")]
    assert len(reason) == 1 and "ft.min_replicas=2" in reason[0], first.stderr["g1"][-2000:]
    assert first.rows["g1"][-1]["step"] == 7
    rows = first.rows["g1"]
    assert [r["lowest"] for r in rows] == [0 not in r["groups"] for r in rows]
    assert [r["step"] for r in rows if 0 not in r["groups"]][0] in (4, 5)
    resumed = Drill(tmp_path / "b", 3, 10, {}, {}, {**spec, "resume": True}).run()
    check_survivors_from(resumed, ["g0", "g1", "g2"], 7, 10)
    # no live group ahead (a full restart): each group read the newest checkpoint once
    assert all(resumed.rows[g][0]["ckpt_loads"] == 1 for g in ("g0", "g1", "g2"))
    assert all(resumed.rows[g][0]["ft_restores"] == 1 for g in ("g0", "g1", "g2"))
    want = reference_losses({**spec, "groups": 3, "steps": 10})
    got = [r["loss"] for r in resumed.rows["g0"]]
    assert got == pytest.approx(want[6:], rel=1e-4, abs=1e-6)


def check_survivors_from(result, names: list[str], first: int, last: int) -> None:
    for name in names:
        assert result.codes[name] == 0, result.stderr[name][-6000:]
        assert [r["step"] for r in result.rows[name]] == list(range(first, last + 1)), name
    for i in range(last - first + 1):
        assert len({result.rows[n][i]["digest"] for n in names}) == 1
