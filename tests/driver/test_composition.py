"""Every part of the driver composes with every other on the 2x2 shape, or the pair is
refused at composition with one line naming both (tests/driver/composition.py; the table in
docs/driver.md, "Composition", lists each cell's outcome).

A running cell trains 6 steps of the tiny DiT on a Ray cluster of 2 nodes x 2 stand-in
GPUs started here (driver.embedded.cluster, as `runner run --local --shape 2x2` does), the
driver joined to it (the cluster's code path), checkpointing every 3 steps: every step has
its row, the loss falls; then the same run resumes from its step-3 checkpoint and its steps
4-6 have the losses of the first run's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from catalog.errors import InputError
from tests.driver.composition import SHAPE, cells
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
CELLS = cells()


@pytest.fixture(scope="module")
def shape_cluster():
    """A Ray cluster of 2 nodes x 2 stand-in GPUs, this process the driver joined to it."""
    import ray

    from driver.checkpoint.auth import KEY_ENV
    from driver.embedded.cluster import start

    saved = dict(os.environ)
    os.environ[KEY_ENV] = "composition-" + "k" * 52  # before the nodes: every pod has it
    cluster = start(2, 2, 1.0)
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("cell", [c for c in CELLS if c.refusal], ids=lambda c: c.name)
def test_a_pair_that_cannot_work_is_refused_in_one_line(cell):
    from driver.config.compose import compose

    first, other = cell.refusal
    with pytest.raises(InputError) as caught:
        compose(TINY_DIT, [*COMMON, *cell.overrides])
    line = caught.value.line()
    assert caught.value.field == first and other in line and "\n" not in line


@pytest.mark.slow
@pytest.mark.parametrize("cell", [c for c in CELLS if not c.refusal], ids=lambda c: c.name)
def test_a_cell_trains_and_resumes_exactly(shape_cluster, tmp_path, cell):
    from driver.train import main

    root = tmp_path / "checkpoints"
    base = [TINY_DIT, *COMMON, *cell.overrides, "run.name=cell", f"checkpoint.root={root}"]
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
    want = [r["loss"] for r in rows[3:]]
    assert [r["loss"] for r in resumed] == pytest.approx(want, rel=1e-5, abs=1e-7)
