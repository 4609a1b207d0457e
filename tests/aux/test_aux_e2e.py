"""The DiT with its services end to end on one embedded Ray (4 logical CPUs: two training
workers, the encoder, the evaluator and a data stage at half a CPU each): embeddings every
step, the pipeline's stage on a service serving both ranks, weights
refreshed and scored, the services' metrics in metrics.jsonl and the summary; a service
that fails its start-up check stops the run before training (exit 1, one line naming it);
a worker killed mid-run is restarted by Ray and training finishes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from tempfile import gettempdir

import pytest

from driver.train import main
from tests.driver.conftest import ROOT, TINY_DIT

REMOTE_DATA = str(ROOT / "runs/train/tiny-dit-remote-data.yaml")

FAST = ["train.steps=12", "optimizer.warmup_steps=3", "data.size=512", "logging.format=json",
        "aux.refresh.every_steps=5"]  # fmt: skip


@pytest.fixture(scope="module")
def ray_aux():
    import os

    import ray

    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
    )
    yield ray
    ray.shutdown()


def rows_of(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_dit_with_encoder_and_evaluator(ray_aux, tmp_path, capsys, monkeypatch):
    from driver.aux import coordinator

    out, made, ipc_root = tmp_path / "dit", [], coordinator.ipc_root
    monkeypatch.setattr(coordinator, "ipc_root", lambda *a: made.append(ipc_root(*a)) or made[-1])
    assert main([TINY_DIT, *FAST, f"run.output_dir={out}"]) == 0
    # the run's socket folder went (this run's own: tests beside it have theirs)
    assert len(made) == 1 and not Path(made[0]).exists() and made[0].startswith(gettempdir())
    rows = rows_of(out)
    assert [row["step"] for row in rows] == list(range(1, 13))
    aux = {k: v for row in rows for k, v in row.items() if k.startswith("aux/")}
    assert aux["aux/encoder/workers"] == 1 and aux["aux/encoder/healthy_workers"] == 1
    assert "aux/encoder/latency_s" in aux and "aux/encoder/queue_depth" in aux
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aux"]["encoder"]["served"] == 24  # 12 steps x 2 ranks, one call each
    assert summary["aux"]["encoder"]["errors"] == 0
    assert summary["refresh_sent"] >= 1 and summary["refresh_failures"] == 0
    assert summary["aux/evaluator/eval_version"] in (5, 10)
    assert summary["aux/evaluator/eval_loss"] > 0
    printed = capsys.readouterr()
    assert "encoder    1         1 " in printed.out + printed.err  # the plan table (a GPU
    # service takes one whole CPU slot of a CPU run: driver.capacity.cpu_slots)
    assert "aux encoder: 1 workers, 1 proxies, 24 requests, 0 errors" in printed.out


def test_failed_start_up_check_stops_before_training(ray_aux, tmp_path, capsys):
    out = tmp_path / "bad"
    args = [TINY_DIT, *FAST, f"run.output_dir={out}", "aux.services.encoder.kwargs.dim=0"]
    assert main(args) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: aux service encoder: readiness check failed: "
        "ValueError: encoder dim must be at least 1, not 0"
    ]
    assert not (out / "metrics.jsonl").exists() or not rows_of(out)
    assert not list(out.glob("crash-*"))
    import ray

    assert not [a for a in ray.util.list_named_actors() if a.startswith("aux-")]


@pytest.mark.slow
def test_start_up_timeout_names_the_service(ray_aux, tmp_path, capsys):
    out = tmp_path / "slow"
    args = [TINY_DIT, *FAST, f"run.output_dir={out}",
            "aux.services.encoder.handler=tests.aux.handlers:SlowStart",
            "+aux.services.encoder.kwargs.setup_s=30", "aux.services.encoder.ready_timeout_s=2",
            "aux.condition=null"]  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "error: aux service encoder: not ready within ready_timeout_s=2 s" in err


DEADLINE_S = 120
"""The encoder's deadline in the kill tests: long enough for a restart under load."""


def kill_mid_run(out, actor: str) -> tuple[threading.Event, list]:
    """A thread that kills (Ray restarts it) the named actor once training has 5 rows. It
    watches until the returned event is set (the run ended), however long start-up takes:
    under load, services and workers took 4 minutes to the first step, past a fixed
    deadline the watcher once had."""
    import ray

    killed: list[float] = []
    ended = threading.Event()

    def watch():
        while not ended.is_set() and not killed:
            path = out / "metrics.jsonl"
            if path.exists() and path.read_text().count("\n") >= 5:
                ray.kill(ray.get_actor(actor), no_restart=False)
                killed.append(time.time())
            ended.wait(0.2)

    threading.Thread(target=watch, daemon=True).start()
    return ended, killed


AFTER_KILL = 75
"""Rows the kill tests need after the kill: half the run. The watcher kills once
metrics.jsonl has 5 rows, but the driver writes rows every 2 s, so the kill lands anywhere
from step 5 to the end of the first batch (in one CI run it held 52: 98 steps trained
after the kill)."""


def trained_after(out, killed: list) -> int:
    """Rows written after the kill (training went on past it)."""
    assert killed, "the run ended before the watcher saw 5 rows"
    return sum(row["time"] > killed[0] for row in rows_of(out))


@pytest.mark.slow
@pytest.mark.parametrize("actor", ["aux-encoder-0", "aux-encoder-proxy-0"])
def test_killed_worker_or_proxy_is_restarted_and_training_finishes(ray_aux, tmp_path, actor):
    """The encoder's only worker (same IPC path, its proxy reconnects) or only proxy (a new
    port, which ranks learn from the FleetMonitor) dies mid-run: training goes on. The
    deadline covers the restart on a loaded machine: under two test workers and two busy
    loops, Ray took more than 20 s to bring a new encoder worker up (its first start took
    60 s), and the waiting step failed with "no live proxy before the deadline"."""
    out = tmp_path / "kill"
    ended, killed = kill_mid_run(out, actor)
    args = [TINY_DIT, "train.steps=150", "data.size=512", "logging.format=json",
            f"run.output_dir={out}", f"aux.services.encoder.deadline_s={DEADLINE_S}"]  # fmt: skip
    assert main(args) == 0
    ended.set()
    assert trained_after(out, killed) >= AFTER_KILL
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 150 and summary["aux"]["encoder"]["errors"] == 0
    if actor == "aux-encoder-0":
        assert summary["aux"]["encoder"]["restarts"] >= 1  # the FleetMonitor saw a new process
    step_times = [row["step_time"] for row in rows_of(out)]
    assert max(step_times) < DEADLINE_S + 5  # none waited past the deadline (+ slack)


@pytest.mark.slow
def test_remote_data_stage_serves_both_ranks(ray_aux, tmp_path):
    out = tmp_path / "stage"
    args = [REMOTE_DATA, "train.steps=6", "data.size=256", "logging.format=json",
            "parallelism.workers=2", f"run.output_dir={out}"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 6
    flip = summary["aux"]["flip"]
    assert flip["workers"] == 1 and flip["errors"] == 0
    assert flip["served"] >= 6 * 2 * 32  # every sample of both ranks went through the stage


@pytest.mark.slow
def test_refresh_group_is_formed_again_after_the_evaluator_restarts(ray_aux, tmp_path):
    out = tmp_path / "refresh"
    ended, killed = kill_mid_run(out, "aux-evaluator-0")
    args = [TINY_DIT, "train.steps=150", "data.size=512", "logging.format=json",
            f"run.output_dir={out}", "aux.refresh.every_steps=10"]  # fmt: skip
    assert main(args) == 0
    ended.set()
    assert trained_after(out, killed) >= AFTER_KILL
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aux"]["evaluator"]["restarts"] >= 1
    versions = [row["aux/evaluator/eval_version"] for row in rows_of(out)
                if "aux/evaluator/eval_version" in row]  # fmt: skip
    assert len(set(versions)) >= 3  # scored before and after the restart
    assert summary["aux/evaluator/eval_version"] == 150  # the last weights, after it
    assert summary["refresh_sent"] >= 10
