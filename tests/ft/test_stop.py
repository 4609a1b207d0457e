"""Below `ft.min_replicas` a run stops at once with the one-line reason (driver.ft.stop):
the reason found in Ray Train's errors, the controller callback that turns a retry into the
end of the run, and (slow) a real Ray Train run whose replacement never comes."""

from __future__ import annotations

import json
import os

import pytest
from ray.train import ControllerError
from ray.train.v2._internal.execution.controller.state import ErroredState, RestartingState
from ray.train.v2.api.exceptions import WorkerGroupError

from driver.ft.replica import FtStopped
from driver.ft.stop import CALLBACK_PATH, CALLBACKS_ENV, FtStopCallback, install, stop_reason

REASON = "ft: no quorum of ft.min_replicas=2 replica groups within ft.quorum_timeout_s=1"


def group_error(*errors) -> WorkerGroupError:
    return WorkerGroupError("failed", dict(enumerate(errors)))


@pytest.mark.parametrize(
    ("error", "want"),
    [
        (FtStopped(REASON), REASON),
        (group_error(RuntimeError("injected"), FtStopped(REASON + "\nmore")), REASON),
        (ControllerError(FtStopped(REASON)), REASON),
        (group_error(RuntimeError("injected")), None),
        (ControllerError(RuntimeError("boom")), None),
        (None, None),
    ],
)
def test_the_reason_is_found_in_ray_trains_errors(error, want):
    assert stop_reason(error) == want


def test_a_retry_of_a_stop_ends_the_run_and_nothing_else_does():
    callback, stopped = FtStopCallback(), group_error(FtStopped(REASON))
    with pytest.raises(FtStopped, match="ft.min_replicas=2"):
        callback.after_controller_state_update(None, RestartingState(stopped))
    callback.after_controller_state_update(None, RestartingState(group_error(RuntimeError("x"))))
    callback.after_controller_state_update(None, ErroredState(stopped))


def test_installed_once_among_ray_trains_env_callbacks(monkeypatch):
    monkeypatch.setenv(CALLBACKS_ENV, "some.module.Callback")
    install()
    install()
    assert os.environ[CALLBACKS_ENV] == f"some.module.Callback,{CALLBACK_PATH}"


@pytest.mark.slow
def test_below_the_minimum_under_ray_train_stops_at_once_and_the_checkpoint_resumes(tmp_path):
    """Rank 1 fails after step 5 and its replacement never joins (max_failures would allow
    3 retries): rank 0 stops below ft.min_replicas=2, fit raises at once with the reason,
    rank 0 was never started again, and the newest checkpoint (step 4, written by rank 0)
    loads into a fresh model with the weights rank 0 had at step 4."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2.torch.torchft_config import TorchftConfig
    from torch.distributed import TCPStore

    from driver.checkpoint import TrainState
    from driver.config.ft import FtConfig
    from driver.ft.lighthouse import lighthouse_kwargs
    from tests.support.ft_drill_job import Job, checkpointer, digest

    # The replacement never joins, so the wait for a quorum may be long: with 1 s, two live
    # groups on a loaded machine (two busy loops beside) fell more than 1 s apart at the
    # writer's checkpoint step and stopped below the minimum at step 3, before the failure.
    ft = {"min_replicas": 2, "heartbeat_timeout_ms": 500, "quorum_timeout_s": 15,
          "timeout_s": 10, "watchdog_s": 0}  # fmt: skip
    spec = {"ckpt_root": str(tmp_path / "ckpt"), "ckpt_interval": 2, "run": "stop"}
    gate = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    gate.set("ft/expected", "2")
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    install()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": root}},
    )
    try:
        from tests.ft.raytrain import stop_func

        config = {"folder": str(tmp_path), "steps": 30, "groups": 2, "ft": ft,
                  "gate": f"127.0.0.1:{gate.port}", "fail_step": 5, "spec": spec}  # fmt: skip
        trainer = TorchTrainer(
            stop_func,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            torch_config=TorchftConfig(
                lighthouse_kwargs=lighthouse_kwargs(FtConfig(**ft)), backend="gloo"
            ),
            run_config=RunConfig(
                storage_path=str(tmp_path / "ray"), failure_config=FailureConfig(max_failures=3)
            ),
        )
        with pytest.raises(Exception) as raised:
            trainer.fit()
    finally:
        ray.shutdown()
    reason = stop_reason(raised.value)
    assert reason and reason.startswith("ft: no quorum of ft.min_replicas=2"), raised.value
    starts = [p.name.split("-")[0] for p in tmp_path.glob("start*")]
    assert starts.count("start0") == 1 and starts.count("start1") <= 2  # no retry after it
    rank0 = [
        json.loads(x) for p in tmp_path.glob("rank0-*.jsonl") for x in p.read_text().splitlines()
    ]
    assert [r["step"] for r in rank0] == [1, 2, 3, 4, 5]
    job = Job({"micro_batch": 8})
    state = TrainState(model=job.model, optimizer=job.optimizer)
    ref = checkpointer(spec, 0, 1, 1).resume(state, restarted=True)
    assert ref is not None and ref.step == 4
    assert digest(job.model) == rank0[3]["digest"]
