"""The train function of tests/ft/test_ray.py: FtReplica inside Ray Train's TorchftConfig
(one worker per replica group), the drill's job, a self-inflicted SIGKILL on one rank."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def train_func(config: dict) -> None:
    import ray.train

    from driver.ft.config import FtConfig
    from driver.ft.drill import Job, digest
    from driver.ft.replica import FtReplica

    rank = ray.train.get_context().get_world_rank()
    folder, steps = Path(config["folder"]), config["steps"]
    spec = {"micro_batch": 8, "step_sleep_s": 0.01}
    job, groups = Job(spec), config["groups"]
    ft = FtReplica(
        FtConfig.from_dict({"enabled": True, **config["ft"]}),
        rank,
        groups,
        None,
        {"model": job.model, "optimizer": job.optimizer},
        gate=config["gate"],
    )
    replacement = (folder / f"killed{rank}").exists()
    if replacement:
        (folder / "ready").touch()
    out = open(folder / f"rank{rank}-{os.getpid()}.jsonl", "a")  # noqa: SIM115
    while ft.step < steps:
        if rank == 0 and ft.step == config["hold_step"]:  # let the replacement catch up
            deadline = time.monotonic() + 300
            while not (folder / "ready").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        plan = ft.begin_step()
        if rank == config["victim"] and plan.step == config["kill_step"] and not replacement:
            (folder / f"killed{rank}").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        local = 0.0
        for slot in plan.slots:
            loss = job.micro_loss(plan.step, slot, groups) / plan.divisor
            loss.backward()
            local += loss.item()
        total = ft.reduce(job.model.parameters(), local)
        if ft.commit(job.optimizer):
            row = {
                "step": ft.step,
                "live": plan.live,
                "digest": digest(job.model),
                "loss": total,
                **ft.metrics(),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
    out.close()
    ft.close()
