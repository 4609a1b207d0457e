"""ft + DiLoCo, end to end: a learner that is a torchft run (`ft=on`) against a synchronizer
process, with replica groups of one worker, and of two workers sharding the model (FSDP 2
inside each group). The lowest live group talks to the synchronizer; every merge rides on
a step's commit vote, so every group applies it at the same step.

The synchronizer's first round waits WAIT_S for a second learner that never comes, so the
groups wait inside step H + 1 for its merge; the first worker of the group that talks is
SIGKILLed there (`debug.kill_*`, inside the cross-group reduce). The run goes on: the other
group sends the push again and takes the merge at the same step, every step is committed
once, the replaced group heals the learner's state with the model's and talks again,
every merge lands the step after its sync point, and after every step the same member of
each group holds the same weights (`debug.digest`, from every rank's rows in the store)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from driver.diloco import keys, local, state
from driver.train import main
from tests.driver.conftest import TINY_LM

pytestmark = pytest.mark.timeout(1200)
"""Each test is a 60-step run of up to 4 workers with a failure and a replacement: about
2 minutes alone here, and past pytest's 600 s under two test workers beside two busy
loops (the groups-of-1 run took 488 s there)."""
STEPS, H = 60, 5
"""Steps enough for the killed group's replacement to come back, heal and talk again."""
AWAIT_AT = 20
"""The survivors wait after this step until the replacement is ready to train
(`debug.await_replacements_at_step`): on a loaded machine a new worker process took 150 s
to start, while the survivor trained the other 55 steps alone and the run ended first."""
WAIT_S = 8.0
"""How long the first round waits for the learner that never comes."""
LAYOUTS = {
    "groups-of-1": ["parallelism.workers=2"],
    "groups-of-2-fsdp": ["parallelism.workers=4", "parallelism.replica_group_size=2",
                         "parallelism.fsdp_size=2", "run.local_cpus=4"],
}  # fmt: skip


@pytest.fixture(scope="module")
def ray_local_4():
    """One embedded Ray of 4 CPUs for the module's runs."""
    import os

    import ray

    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    ray.init(address="local", num_cpus=4, include_dashboard=True, log_to_driver=False,
             logging_level="WARNING")  # fmt: skip
    yield ray
    ray.shutdown()


def digests(out: Path, size: int) -> dict[int, dict[int, set]]:
    """{step: {member: {digests of that member's rows of every group}}} from the store."""
    from observability.store import LocalStore

    with LocalStore.open(out, schema=False) as store:
        got = store.query("SELECT rank, step, value FROM platform.run_metrics "
                          "WHERE name = 'train/param_digest'")  # fmt: skip
    by_step: dict[int, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for row in got:
        by_step[int(row["step"])][int(row["rank"]) % size].add(row["value"])
    return by_step


def learner_run(tmp_path: Path, name: str, layout: list[str]):
    """The driver as learner `a` of a synchronizer process of its own: (rows of record,
    merged rounds, digests)."""
    out = tmp_path / name
    out.mkdir()
    keys.generate(out / "keys", ["a"])
    sync, address = local.start_synchronizer(
        out, ["--expect", "a,b", "--round-timeout", str(WAIT_S)]
    )
    args = [TINY_LM, "ft=on", f"train.steps={STEPS}", "train.micro_batch_size=8",
            "optimizer.warmup_steps=2", "logging.format=json", "debug.digest=true",
            f"debug.kill_at_step={H}", "debug.kill_rank=0", "debug.kill_phase=during",
            f"debug.await_replacements_at_step={AWAIT_AT}",
            f"run.output_dir={out / 'run'}", f"run.name={name}",
            f"diloco.address={address}", "diloco.learner=a", f"diloco.keys={out / 'keys'}",
            f"diloco.sync_every={H}", "diloco.barrier_timeout_s=60", *layout]  # fmt: skip
    try:
        assert main(args) == 0
    finally:
        sync.terminate()
        sync.wait(30)
    lines = (out / "run" / "metrics.jsonl").read_text().splitlines()
    size = 2 if "parallelism.replica_group_size=2" in layout else 1
    return (
        [json.loads(line) for line in lines],
        state.read_rounds(out / "state"),
        digests(out / "run", size),
    )


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_an_ft_learner_keeps_syncing_through_the_loss_of_the_group_that_talks(
    ray_local_4, tmp_path, layout
):
    rows, rounds, by_step = learner_run(tmp_path, layout, LAYOUTS[layout])
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # none lost, none twice
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["ft_failures_survived"] >= 1 and rows[-1]["ft_quorum_size"] == 2
    # the survivor sent the push again and took the merge at the same step, alone
    assert rows[H]["ft_quorum_size"] == 1 and rows[H]["diloco_round"] == 1
    # every sync point merged once, the learner alone, and every merge landed the step after
    assert [r["round"] for r in rounds] == list(range(1, STEPS // H + 1))
    assert all(r["contributors"] == ["a"] for r in rounds) and rounds[0]["missing"] == ["b"]
    assert [r["diloco_round"] for r in rows] == [(r["step"] - 1) // H for r in rows]
    # the replaced group healed (the learner's state with the model's) and talks again
    back = [r for r in rows if r["rank"] == 0 and r["ft_quorum_size"] == 2 and r["ft_heals"]]
    assert back, "the replaced group never came back"
    # after every step, every group's member holds the same weights
    assert sorted(by_step) == list(range(1, STEPS + 1))
    for step, members in by_step.items():
        assert all(len(values) == 1 for values in members.values()), step
