"""End to end on one embedded Ray: two gloo workers train the tiny LM (loss falls, every step
in metrics.jsonl), and a worker that raises leaves a crash bundle and exit code 1."""

from __future__ import annotations

import json
import socket

import pytest

from driver.train import main
from tests.driver.conftest import TINY_DIT, TINY_LM, Recorder

FAST = ["train.steps=12", "optimizer.warmup_steps=3", "data.size=1024", "logging.format=json"]


def test_two_workers_train_and_log_every_step(ray_local, tmp_path, capsys, server):
    out = tmp_path / "run"
    extra = [f"logging.clickhouse_url={server}"]  # a recording stand-in for ClickHouse
    assert main([TINY_LM, *FAST, f"run.output_dir={out}", "run.name=e2e", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, 13))
    assert rows[-1]["loss"] < 0.9 * rows[0]["loss"]
    assert {"loss", "lr", "step_time", "tokens_per_s", "grad_norm"} <= set(rows[0])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 12
    assert (out / "config.yaml").read_text().startswith("run:\n  name: e2e")
    printed = capsys.readouterr().out
    assert '"run": "e2e"' in printed and "done: 12 steps on 2 workers" in printed
    inserted = [json.loads(line) for _, body in Recorder.received for line in body.splitlines()]
    losses = [r for r in inserted if r["name"] == "train/loss"]
    assert [r["step"] for r in losses] == list(range(1, 13))
    assert {(r["run"], r["rank"], r["pod"]) for r in losses} == {("e2e", 0, socket.gethostname())}


def check_bundle(out, capsys, ranks: list[int]) -> None:
    err = capsys.readouterr().err
    headline = f"injected failure on rank {ranks[0] if len(ranks) == 1 else ''}"
    assert headline in err and "crash bundle: " in err
    bundles = list(out.glob("crash-*"))
    assert len(bundles) == 1
    bundle = bundles[0]
    for rank in ranks:
        text = (bundle / f"rank-{rank}.txt").read_text()
        assert "RuntimeError: debug.fail_at_step=2" in text and "Traceback" in text
        assert "step 1 loss" in text  # the worker's last log lines
    assert (bundle / "config.yaml").read_text().startswith("run:")
    assert set(ranks) <= set(json.loads((bundle / "summary.json").read_text())["failed_ranks"])
    for name in ("environment.json", "versions.json", "git.txt", "driver.log", "error.txt"):
        assert (bundle / name).stat().st_size > 0


def test_failing_workers_write_crash_bundle(ray_local, tmp_path, capsys):
    out = tmp_path / "crash"
    args = [TINY_LM, *FAST, f"run.output_dir={out}", "debug.fail_at_step=2", "debug.fail_rank=-1"]
    assert main(args) == 1
    check_bundle(out, capsys, [0, 1])


@pytest.mark.slow
def test_one_failing_rank_writes_crash_bundle(ray_local, tmp_path, capsys):
    """Rank 1 raises while rank 0 waits in an all-reduce: Ray Train tears the group down."""
    out = tmp_path / "crash1"
    args = [TINY_LM, *FAST, f"run.output_dir={out}", "debug.fail_at_step=2", "debug.fail_rank=1"]
    assert main(args) == 1
    check_bundle(out, capsys, [1])


@pytest.mark.slow
def test_tiny_dit_trains(ray_local, tmp_path):
    out = tmp_path / "dit"
    args = [TINY_DIT, "train.steps=40", "logging.format=json", f"run.output_dir={out}", "aux=none"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and "samples_per_s" in rows[0]
    first = sum(r["loss"] for r in rows[:5]) / 5
    last = sum(r["loss"] for r in rows[-5:]) / 5
    assert last < 0.8 * first


@pytest.mark.slow
def test_fsdp2_over_two_workers(ray_local, tmp_path):
    out = tmp_path / "fsdp"
    args = [TINY_LM, *FAST, "parallelism.fsdp_size=2", f"run.output_dir={out}"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and rows[-1]["loss"] < rows[0]["loss"]


@pytest.mark.slow
def test_checkpoint_then_resume(ray_local, tmp_path):
    """The checkpoint hook: save every 5 steps under <root>/<team>/<run>/, then resume."""
    root, out = tmp_path / "ckpt", tmp_path / "out"
    common = [TINY_LM, *FAST, f"checkpoint.root={root}", "run.team=t", "run.name=ck"]
    assert (
        main([*common, "train.steps=10", "checkpoint.interval_steps=5", f"run.output_dir={out}"])
        == 0
    )
    assert (root / "t" / "ck" / "step-10").is_dir()
    again = out / "again"
    args = [*common, "train.steps=12", "checkpoint.resume=auto", f"run.output_dir={again}"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (again / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [11, 12]


@pytest.mark.slow
def test_shared_memory_pipeline_as_batch_source(ray_local, tmp_path):
    out = tmp_path / "pipeline"
    args = [TINY_LM, *FAST, "data.loader=pipeline", "data.producers=2", f"run.output_dir={out}"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and rows[-1]["loss"] < rows[0]["loss"]
