"""FtReplica under Ray Train 2.60's TorchftConfig: a worker SIGKILLed mid-run is replaced by
Ray Train's controller (only that replica group), the replacement heals from the live
group, and the run finishes."""

from __future__ import annotations

import json
import os

import pytest


@pytest.mark.slow
def test_ray_train_replaces_a_killed_replica_group_which_heals(tmp_path):
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2.torch.torchft_config import TorchftConfig
    from torch.distributed import TCPStore

    from driver.config.ft import FtConfig
    from driver.ft.lighthouse import lighthouse_kwargs

    ft = {"min_replicas": 1, "heartbeat_timeout_ms": 500, "timeout_s": 30}
    gate = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    gate.set("ft/expected", "2")
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
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
        from tests.ft.raytrain import train_func

        config = {
            "folder": str(tmp_path),
            "steps": 16,
            "groups": 2,
            "ft": ft,
            "gate": f"127.0.0.1:{gate.port}",
            "victim": 1,
            "kill_step": 5,
            "hold_step": 8,
        }
        trainer = TorchTrainer(
            train_func,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            torch_config=TorchftConfig(
                lighthouse_kwargs=lighthouse_kwargs(FtConfig(**ft)), backend="gloo"
            ),
            run_config=RunConfig(
                storage_path=str(tmp_path / "ray"), failure_config=FailureConfig(max_failures=2)
            ),
        )
        trainer.fit()
    finally:
        ray.shutdown()
    files = {
        p.name: [json.loads(x) for x in p.read_text().splitlines()]
        for p in tmp_path.glob("rank*.jsonl")
    }
    rank0 = [rows for name, rows in files.items() if name.startswith("rank0-")]
    rank1 = sorted((rows for name, rows in files.items() if name.startswith("rank1-")), key=len)
    assert len(rank0) == 1 and len(rank1) == 2, sorted(files)
    assert [r["step"] for r in rank0[0]] == list(range(1, 17))
    assert rank0[0][-1]["ft_failures_survived"] == 1
    healed = rank1[0] if rank1[0][0]["step"] > 1 else rank1[1]
    assert healed[0]["ft_heals"] == 1
    assert healed[0]["digest"] == rank0[0][healed[0]["step"] - 1]["digest"]
    assert healed[-1]["step"] == 16
