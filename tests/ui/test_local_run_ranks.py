"""A real two-worker local run (the driver, two gloo workers on an embedded Ray) that fails
once, is restarted by Ray Train, fails again, and is resumed by a second driver: every
attempt's rows are in metrics.jsonl (appended, none twice, none missing), every rank's rows
are in the run's chDB store with their labels, and `runner ui`'s JSON API shows both ranks.
Slow (two driver runs): `pytest -m slow tests/ui/test_local_run_ranks.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.ui.sources import LocalSource
from tests.ui.test_api import get

ROOT = Path(__file__).resolve().parents[2]
STEPS, FAIL_AT = 8, 4  # the row of step FAIL_AT + 1 is the failing attempt's last


def drive(outputs: Path, tmp: Path, *extra: str) -> int:
    args = ["runs/train/tiny-lm.yaml", f"train.steps={STEPS}", "optimizer.warmup_steps=2",
            "data.size=1024", "logging.format=json", "run.name=ranks", "run.team=research",
            "run.cluster=local", f"run.output_dir={outputs}/research/ranks",
            f"checkpoint.root={tmp}/ckpt", "checkpoint.interval_steps=2",
            "parallelism.workers=2", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "driver.train", *args]
    with open(tmp / "log.txt", "a") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=400)  # fmt: skip
    return done.returncode


def contiguous(steps: list[int]) -> bool:
    return steps == list(range(steps[0], steps[0] + len(steps)))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    outputs = tmp / "outputs"
    fail = [f"debug.fail_at_step={FAIL_AT}", "debug.fail_rank=0", "checkpoint.max_failures=1"]
    assert drive(outputs, tmp, *fail) == 1, (tmp / "log.txt").read_text()[-3000:]
    assert drive(outputs, tmp) == 0, (tmp / "log.txt").read_text()[-3000:]
    return outputs, outputs / "research" / "ranks"


@pytest.mark.slow
def test_metrics_file_keeps_every_attempt_once(run):
    _, folder = run
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    by_attempt: dict[int, list[int]] = {}
    for row in rows:
        assert row["rank"] == 0 and row["run"] == "ranks" and row["service"] == "train"
        by_attempt.setdefault(row["attempt"], []).append(row["step"])
    assert sorted(by_attempt) == [0, 1, 2]  # a restart, then a resume by a new driver
    assert all(contiguous(steps) for steps in by_attempt.values()), by_attempt
    assert by_attempt[0][0] == 1 and by_attempt[0][-1] == FAIL_AT + 1  # the failing row too
    assert by_attempt[1][-1] == FAIL_AT + 1 and by_attempt[2][-1] == STEPS


@pytest.mark.slow
def test_every_rank_is_in_the_store_with_its_labels(run):
    from observability.store import LocalStore

    _, folder = run
    with LocalStore.open(folder, schema=False) as store:
        got = store.query(
            "SELECT rank, cluster, team, run, learner, pod, node, groupArray(step) AS steps "
            "FROM (SELECT * FROM platform.run_metrics WHERE name = 'train/step_time_s' "
            "ORDER BY ts) GROUP BY rank, cluster, team, run, learner, pod, node ORDER BY rank"
        )  # fmt: skip
        names = {r["name"] for r in store.query(
            "SELECT DISTINCT name FROM platform.run_metrics WHERE rank = 1")}  # fmt: skip
        labels = store.query(
            "SELECT rank, groupUniqArray(attempt) AS attempts, groupUniqArray(service) AS "
            "services, groupUniqArray(worker) AS workers FROM platform.run_metrics "
            "GROUP BY rank ORDER BY rank"
        )
    assert [g["rank"] for g in got] == [0, 1], got
    for group in got:
        assert (group["cluster"], group["team"], group["run"]) == ("local", "research", "ranks")
        assert group["pod"] and group["node"] and group["learner"] == ""  # no DiLoCo learner
    for group in labels:  # a restart, then a resume: three attempts; training ranks' service
        assert sorted(group["attempts"]) == [0, 1, 2], group
        assert group["services"] == ["train"] and group["workers"] == [""], group
    rank0, rank1 = (sorted(int(s) for s in group["steps"]) for group in got)
    # every attempt of both ranks: the failing step once per attempt (three), none lost by
    # the rank that did not fail (it was blocked in a collective when its group was torn down)
    assert rank0.count(FAIL_AT + 1) == 3 and max(rank0) == STEPS
    assert rank1 == rank0
    assert {"train/step_time_s", "train/data_wait_s", "train/forward_backward_s",
            "train/optimizer_s", "train/tokens_per_s", "train/rss_bytes"} <= names  # fmt: skip
    assert "train/loss" not in names  # rank 0's


@pytest.mark.slow
def test_runner_ui_shows_both_ranks(run, serve, reader):
    outputs, _ = run
    base = serve(LocalSource(outputs, reader=reader))
    status, body = get(base, "/api/run?team=research&run=ranks")
    assert status == 200 and body["source"] == "chdb", body
    assert [m["rank"] for m in body["members"]] == [0, 1]
    assert sorted(body["rank_step_time"]["ranks"]) == ["0", "1"]
