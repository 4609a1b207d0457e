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

    from driver.config.ft import FtConfig
    from driver.ft.replica import FtReplica
    from tests.support.ft_drill_job import Job, digest

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


def stop_func(config: dict) -> None:
    """Two replica groups, `ft.min_replicas` 2, checkpoints every 2 steps (the writer:
    Topology.is_writer). Rank 1 fails after step `fail_step`; its replacement finds no
    capacity (it waits, as a group whose node is gone would): rank 0 is below the minimum
    and raises FtStopped, which must end the run at once."""
    import ray.train

    from driver.checkpoint import TrainState
    from driver.config.ft import FtConfig
    from driver.ft.replica import FtReplica
    from driver.parallel import Topology
    from tests.support.ft_drill_job import Job, checkpointer, digest

    rank = ray.train.get_context().get_world_rank()
    folder, groups = Path(config["folder"]), config["groups"]
    (folder / f"start{rank}-{os.getpid()}").touch()
    if rank == 1 and (folder / "failed1").exists():  # the replacement: no capacity
        time.sleep(300)
    job, topo = Job({"micro_batch": 8}), Topology(groups)
    ckpt = checkpointer(config["spec"], 0, 1, rank)
    state = TrainState(model=job.model, optimizer=job.optimizer)
    ft = FtReplica(
        FtConfig.from_dict({"enabled": True, **config["ft"]}),
        rank,
        groups,
        None,
        {"model": job.model, "optimizer": job.optimizer},
        gate=config["gate"],
    )
    out = open(folder / f"rank{rank}-{os.getpid()}.jsonl", "a")  # noqa: SIM115
    try:
        while ft.step < config["steps"]:
            plan = ft.begin_step()
            local = 0.0
            for slot in plan.slots:
                loss = job.micro_loss(plan.step, slot, groups) / plan.divisor
                loss.backward()
                local += loss.item()
            ft.reduce(job.model.parameters(), local)
            if ft.commit(job.optimizer):
                out.write(json.dumps({"step": ft.step, "digest": digest(job.model)}) + "\n")
                out.flush()
                ckpt.set_writer(topo.is_writer(rank, plan.position))
                if ckpt.due(ft.step):
                    ckpt.save(ft.step, state)
                if rank == 1 and ft.step == config["fail_step"]:
                    (folder / "failed1").touch()
                    raise RuntimeError("injected failure")
    finally:
        out.close()
        ckpt.close()
        ft.close()
