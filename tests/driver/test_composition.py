"""Every part of the driver composes with every other on the 2x2 shape, or the pair is
refused at composition with one line naming both (tests/driver/composition.py: the cells
holding every pair of settings; the table in docs/driver.md, "Composition", lists each
cell's outcome).

A running cell trains 6 steps of the tiny DiT on a Ray cluster of 2 nodes x 2 stand-in GPUs started
here (driver.embedded.cluster, as `runner run --local --shape 2x2` does), the driver joined to it
(the cluster's code path), checkpointing every 3 steps: every step has its row, the loss falls;
then the same run resumes from its step-3 checkpoint and its steps 4-6 have the losses of the first
run's. A DiLoCo learner's cell has a synchronizer process of its own (syncing every 2 steps): the
rounds merged grow with the steps; its resumed run rejoins the synchronizer's newer round
(driver.diloco.resume), so its losses are not the first run's, and it trains steps 4-6.

The composed ft + services + pipeline cell also loses a worker: rank 1 is SIGKILLed inside
step 4's cross-group reduce; the run goes on, every step is committed once, and the
services keep serving."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from catalog.errors import InputError
from tests.driver.composition import SHAPE, Cell, cells, pairs_of, pairwise
from tests.driver.conftest import TINY_DIT

STEPS = 6
COMMON = [
    f"train.steps={STEPS}",
    "train.micro_batch_size=8",
    "data.size=512",
    "optimizer.warmup_steps=1",
    "checkpoint.interval_steps=3",
    "checkpoint.keep_last=3",
    "logging.format=json",
    "logging.store=false",
    *SHAPE,
]
CELLS = pairwise()


@pytest.fixture(scope="module")
def shape_cluster():
    """A Ray cluster of 2 nodes x 2 stand-in GPUs, this process the driver joined to it."""

    from driver.checkpoint.auth import KEY_ENV
    from driver.embedded.cluster import start, stop

    saved = dict(os.environ)
    os.environ[KEY_ENV] = "composition-" + "k" * 52  # before the nodes: every pod has it
    cluster = start(2, 2, 1.0)
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        yield cluster
    finally:
        stop(cluster)
        os.environ.clear()
        os.environ.update(saved)


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("cell", [c for c in CELLS if c.refusal], ids=lambda c: c.name)
def test_a_pair_that_cannot_work_is_refused_in_one_line(cell):
    from driver.config.compose import compose

    first, other = cell.refusal
    with pytest.raises(InputError) as caught:
        compose(TINY_DIT, [*COMMON, *cell.overrides("tcp://127.0.0.1:1", "keys")])
    line = caught.value.line()
    assert caught.value.field == first and other in line and "\n" not in line


def test_the_cells_hold_every_pair_of_settings():
    every = set().union(*(pairs_of(cell) for cell in cells()))
    assert set().union(*(pairs_of(cell) for cell in CELLS)) == every
    assert len(cells()) == 32 and len(CELLS) < len(cells())


@pytest.fixture
def synchronizer(tmp_path):
    """A synchronizer process for learner `a` alone: (its address, the keys folder)."""
    from driver.diloco import keys, local

    out = tmp_path / "diloco"
    out.mkdir()
    keys.generate(out / "keys", ["a"])
    proc, address = local.start_synchronizer(out, ["--expect", "a", "--round-timeout", "30"])
    try:
        yield address, str(out / "keys")
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.parametrize("cell", [c for c in CELLS if not c.refusal], ids=lambda c: c.name)
def test_a_cell_trains_and_resumes(shape_cluster, tmp_path, cell, request):
    from driver.train import main

    words = cell.overrides(*request.getfixturevalue("synchronizer")) if cell.learner else (
        cell.overrides())  # fmt: skip
    root = tmp_path / "checkpoints"
    base = [TINY_DIT, *COMMON, *words, "run.name=cell", f"checkpoint.root={root}"]
    first = tmp_path / "first"
    assert main([*base, f"run.output_dir={first}"]) == 0
    rows = rows_of(first)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[-1]["loss"] < rows[0]["loss"]
    step3 = root / "default" / "cell" / "step-3"
    assert (step3 / "COMMITTED").exists()
    again = tmp_path / "again"
    assert main([*base, f"run.output_dir={again}", f"checkpoint.resume={step3}"]) == 0
    resumed = rows_of(again)
    assert [r["step"] for r in resumed] == [4, 5, 6]
    if cell.learner:  # a merge at each of steps 2, 4, 6 (under ft: in the next step's row)
        rounds = [r["diloco_round"] for r in rows]
        assert rounds == sorted(rounds) and rounds[-1] >= 2, rounds
        assert all(r["loss"] == r["loss"] for r in resumed)  # finite, trained on
        return
    want = [r["loss"] for r in rows[3:]]
    assert [r["loss"] for r in resumed] == pytest.approx(want, rel=1e-5, abs=1e-7)


@pytest.mark.slow
def test_the_composed_ft_cell_loses_a_worker_and_goes_on(shape_cluster, tmp_path):
    from driver.train import main

    cell = Cell({"stepper": "ft", "services": "aux", "diloco": "nodiloco", "fsdp": "fsdp1",
                 "data": "pipeline"})  # fmt: skip
    steps, out = 12, tmp_path / "killed"
    # the services leave 2 workers: 2 groups of 1 (not the shape's one group of a whole
    # node), so a group survives the kill
    kill = ["debug.kill_at_step=4", "debug.kill_rank=1", "debug.kill_phase=during",
            "parallelism.replica_group_size=1"]  # fmt: skip
    args = [TINY_DIT, *COMMON, *cell.overrides(), *kill, f"train.steps={steps}",
            "checkpoint.enabled=false", "run.name=killed", f"run.output_dir={out}"]  # fmt: skip
    assert main(args) == 0
    rows = rows_of(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # none lost, none twice
    assert rows[-1]["ft_failures_survived"] >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aux"]["encoder"]["errors"] == 0
    assert summary["aux"]["encoder"]["served"] >= steps  # served through the loss
