"""The flight recorder's settings reach real Ray Train workers before their process group:
`driver.metrics.flight.torch_config` on two gloo workers; each rank's snapshot holds the
collective it ran (what a failing rank attaches to its failure record)."""

from __future__ import annotations

import json
import os

import pytest


def report_settings(config):
    import ray.train
    import torch
    import torch.distributed as dist

    from observability.flight_recorder import snapshot

    torch.distributed.all_reduce(torch.ones(1))
    snap = snapshot() or {}
    found = {
        "initialized": dist.is_initialized(),
        "buffer": os.environ.get("TORCH_FR_BUFFER_SIZE"),
        "entries": len(snap.get("entries", [])),
    }
    rank = ray.train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"rank-{rank}.json"), "w") as f:
        json.dump(found, f)


@pytest.mark.slow
def test_workers_get_the_flight_recorder_before_the_process_group(ray_local, tmp_path):
    from types import SimpleNamespace as NS

    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from driver.metrics import flight

    cfg = NS(run=NS(output_dir=str(tmp_path)), debug=NS(flight_recorder_entries=123))
    trainer = TorchTrainer(
        report_settings,
        train_loop_config={"out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2),
        torch_config=flight.torch_config("gloo", flight.worker_env(cfg)),
        run_config=RunConfig(storage_path=str(tmp_path / "ray"), name="fr"),
    )
    trainer.fit()
    for rank in (0, 1):
        found = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert found == {"initialized": True, "buffer": "123", "entries": 1}, found
    assert (tmp_path / "flight-recorder").is_dir()  # the watchdog's dump folder
