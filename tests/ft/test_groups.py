"""Replica groups of several workers under live fault tolerance, end to end on one embedded
Ray: 4 CPU workers in 2 replica groups of 2, FSDP 2 inside each group, torchft across.

A member is SIGKILLed before, during (inside the cross-group reduce) or after the reduce of
a step (and a group's rank 0, whose process serves its group's quorum calls, after one);
Ray Train replaces its whole group (driver/ft/backend.py), which heals member by
member from the live group (each member its own shard: driver/ft/shards.py), and the run
trains to the end: every step committed once, and after every step the same member of
each group holds the same shard (`debug.digest`, from every rank's rows in the run's
store). A member that hangs (SIGSTOP) is ended by its group mate's watchdog
(driver/ft/watchdog.py) within `ft.watchdog_s`, and its group is replaced the same way."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest

from driver.train import main
from tests.driver.conftest import TINY_LM, embedded_ray

STEPS = 80
COMMON = [
    TINY_LM,
    "ft=on",
    f"train.steps={STEPS}",
    "train.micro_batch_size=8",
    "parallelism.workers=4",
    "parallelism.replica_group_size=2",
    "parallelism.fsdp_size=2",
    "run.local_cpus=4",
    "optimizer.warmup_steps=2",
    "debug.digest=true",
    "logging.format=json",
]


@pytest.fixture(scope="module")
def ray_local_4():
    """One embedded Ray of 4 CPUs for the module's runs (4 training workers)."""
    yield from embedded_ray(4)


def run(tmp_path, name: str, *extra: str) -> tuple[list[dict], dict, dict]:
    out = tmp_path / name
    assert main([*COMMON, f"run.output_dir={out}", f"run.name={name}", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return rows, digests(out), json.loads((out / "summary.json").read_text())


def digests(out) -> dict[int, dict[int, set]]:
    """{step: {member: {digests of that member's rows of every group}}} from the store."""
    from observability.store import LocalStore

    with LocalStore.open(out, schema=False) as store:
        got = store.query("SELECT rank, step, value FROM platform.run_metrics "
                          "WHERE name = 'train/param_digest'")  # fmt: skip
    by_step: dict[int, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for row in got:
        by_step[int(row["step"])][int(row["rank"]) % 2].add(row["value"])
    return by_step


def check(rows: list[dict], by_step: dict, back: bool = True) -> None:
    """Every step once, finite, the same shard in the same member of every group; with
    `back`, the replaced group is in the last step's quorum."""
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # none lost, none twice
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert rows[0]["ft_quorum_size"] == 2 and rows[-1]["ft_failures_survived"] >= 1
    if back:
        assert rows[-1]["ft_quorum_size"] == 2  # the replaced group is back
    for step, members in by_step.items():  # the same member of every group: the same shard
        assert all(len(values) == 1 for values in members.values()), step
    assert all(r["ft_reduce_copied_bytes"] == 0 for r in rows)  # reduced in place


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rank", "phase"),
    [(3, "before"), (3, "during"), (3, "after"),
     (2, "after")],  # the group's rank 0, its quorum server: the mate's next quorum call fails
)  # fmt: skip
def test_a_member_killed_around_the_reduce_is_replaced_with_its_group(
    ray_local_4, tmp_path, rank, phase
):
    rows, by_step, _ = run(tmp_path, f"kill-{rank}-{phase}", "debug.kill_at_step=4",
                           f"debug.kill_rank={rank}", f"debug.kill_phase={phase}")  # fmt: skip
    check(rows, by_step)
    assert any(r["ft_quorum_size"] == 1 for r in rows)  # the other group trained on alone


@pytest.mark.slow
def test_a_hung_member_is_detected_by_its_mate_and_its_group_replaced(ray_local_4, tmp_path):
    rows, by_step, summary = run(tmp_path, "hung", "debug.stop_at_step=4", "debug.kill_rank=3",
                                 "ft.watchdog_s=15", "ft.quorum_timeout_s=30",
                                 "ft.timeout_s=5")  # fmt: skip
    # The group is replaced (its new members said hello); whether the replacement joins a
    # quorum before the survivors' last step depends on how fast new workers start on the
    # machine (under load, later than the 76 steps left), so it is not asserted here.
    check(rows, by_step, back=False)
    assert summary["ft_groups_replaced"] >= 1
