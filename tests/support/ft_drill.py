"""A fault-tolerance drill: one replica group of a small regression job, as a process.

    python -m tests.support.ft_drill SPEC.json

Tests (tests/ft) and the benchmark (scripts/bench/ft_bench.py) start one such process per
replica group next to a `driver.ft.lighthouse.DriverSide`, then kill some with SIGKILL.
SPEC keys: mode (`ft`, or `ddp`: plain gloo data parallelism, no torchft), group, groups,
steps, grad_accum, micro_batch, dim, hidden, lr, seed, out (JSON lines, one per committed
step: step, live, slots, loss, digest, time), ft (FtConfig fields), lighthouse and gate
(ft), store (ddp: host:port of the TCPStore), kill_step and kill_phase (`before`: in the
forward pass, `during`: inside the gradient allreduce, `unsent`: after the commit, its
metrics row not sent, `after`: after the commit and its row) and
kill_when_full (wait for a quorum of every group), ckpt_root
and ckpt_interval (checkpoints through driver.checkpoint; the lowest live group writes),
step_sleep_s (simulated extra compute per micro-batch), hold_step and hold_file (wait
before that step until a joining group wrote ready_file). A run that stops below
`ft.min_replicas` prints the one-line reason and exits 3. The job every group trains (model,
data, the failure-free reference losses) is tests.support.ft_drill_job's.

A group started again (a joiner, or every group with `resume`) reads its checkpoint as the
training loop does: not up front, only if its first quorum has no live group ahead
(`FtReplica.restore`); each row says how many checkpoints it read (`ckpt_loads`). Each
committed step also appends the metrics row the group's rank would send
(`driver.metrics.rank.rank_row`, the full row when `Topology.is_writer`) to `out`.metrics,
after the copies a group that just became the writer sends (driver.ft.records).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from tests.support.ft_drill_job import Job, checkpointer, digest, finite

STOPPED = 3  # exit code: too few replica groups left (FtStopped)


def hold(spec: dict, step: int) -> None:
    """`hold_step`/`hold_file`: before that step, wait for a joining group to be ready."""
    if spec.get("hold_step") == step:
        deadline = time.monotonic() + 120
        while not os.path.exists(spec["hold_file"]) and time.monotonic() < deadline:
            time.sleep(0.02)


def kill_now(spec: dict, step: int, phase: str, live: int | None = None) -> None:
    """SIGKILL this process at `kill_step` in `kill_phase`; with `kill_when_full`, at the
    first step from `kill_step` on whose quorum has every group (failures strike a whole
    job, not one still waiting for its last replacement)."""
    if spec.get("kill_step") is None or spec.get("kill_phase") != phase:
        return
    if spec.get("kill_when_full"):
        due = step >= spec["kill_step"] and live == spec["groups"]
    else:
        due = step == spec["kill_step"]
    if due:
        with open(spec["out"] + ".killed", "w") as f:
            f.write(f"{time.time()} {step}")
        os.kill(os.getpid(), signal.SIGKILL)


def run_ft(spec: dict) -> int:
    from driver.checkpoint import TrainState
    from driver.config.ft import FtConfig
    from driver.ft.manager import live_groups
    from driver.ft.records import Copies
    from driver.ft.replica import FtReplica, FtStopped
    from driver.metrics.rank import rank_row
    from driver.parallel import Topology

    job, groups, accum = Job(spec), spec["groups"], spec.get("grad_accum", 1)
    topo, group = Topology(groups), spec["group"]
    cfg = FtConfig.from_dict({"enabled": True, **spec.get("ft", {})})
    state = TrainState(model=job.model, optimizer=job.optimizer)
    joiner = bool(spec.get("ready_file"))
    # group 0 of a fresh start writes first (and cleans stale writes); a joiner never cleans
    ckpt = checkpointer(spec, 0, 1, group if not joiner else 1)
    ft = FtReplica(
        cfg,
        spec["group"],
        groups,
        spec["lighthouse"],
        {"model": job.model, "optimizer": job.optimizer},
        accum,
        gate=spec.get("gate"),
    )
    if ckpt and (spec.get("resume") or joiner):  # started again: heal, or read if alone

        def restore() -> int:
            ref = ckpt.resume(state, restarted=True)
            return ref.step if ref else 0

        ft.restore = restore
    real = ft.manager._pg.allreduce

    def allreduce(*args, **kwargs):  # the `during` kill: the allreduce is already issued
        work = real(*args, **kwargs)
        kill_now(spec, ft.step, "during", ft.plan.live if ft.plan else None)
        return work

    ft.manager._pg.allreduce = allreduce
    copies = Copies()  # rows of steps another group wrote, sent when this one takes over
    if spec.get("ready_file"):  # a (re)joining group: heartbeating, about to ask for a quorum
        open(spec["ready_file"], "w").close()
    with open(spec["out"], "a") as out, open(spec["out"] + ".metrics", "a") as metrics:
        try:
            while ft.step < spec["steps"]:
                hold(spec, ft.step)
                plan = ft.begin_step()
                local = 0.0
                for i, slot in enumerate(plan.slots):
                    if i == len(plan.slots) - 1:
                        kill_now(spec, plan.step, "before", plan.live)
                    loss = job.micro_loss(plan.step, slot, groups * accum) / plan.divisor
                    loss.backward()
                    local += loss.item()
                total = ft.reduce(job.model.parameters(), local)
                if ft.commit(job.optimizer):
                    writer = topo.is_writer(group, plan.position)
                    row = {
                        "step": ft.step,
                        "live": plan.live,
                        "position": plan.position,
                        "groups": list(live_groups(ft.manager)),
                        "group": group,
                        "slots": list(plan.slots),
                        "loss": total,
                        "digest": digest(job.model),
                        "time": time.time(),
                        "lowest": writer,
                        "finite": finite(job.model),
                        "ckpt_loads": ckpt.counters["loads"] if ckpt else 0,
                        **ft.metrics(),
                    }
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    kill_now(spec, plan.step, "unsent", plan.live)  # its metrics row unsent
                    sent = {"loss": total, "step_time": 0.0, "time": row["time"], **ft.metrics()}
                    sent = {**sent, "step": ft.step}
                    for copy in copies.after_step(sent, writer):  # the old writer's rows
                        metrics.write(json.dumps(rank_row(copy, group, int(joiner), True)) + "\n")
                    sent = rank_row(sent, group, int(joiner), writer)
                    metrics.write(json.dumps(sent) + "\n")
                    metrics.flush()
                    if ckpt:
                        ckpt.set_writer(writer)
                        if ckpt.due(ft.step):
                            ckpt.save(ft.step, state)
                kill_now(spec, plan.step, "after", plan.live)
        except FtStopped as err:
            print(err, file=sys.stderr, flush=True)
            return STOPPED
        finally:
            if ckpt:
                ckpt.close()
            ft.close()
    return 0


def run_ddp(spec: dict) -> int:
    """The same job without torchft: one gloo process group over all groups; a lost group
    fails everyone (the restart-from-checkpoint path)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from driver.checkpoint import TrainState
    from driver.ft.batch import plan_step

    job, groups, accum = Job(spec), spec["groups"], spec.get("grad_accum", 1)
    host, port = spec["store"].rsplit(":", 1)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group(
        "gloo",
        store=store,
        rank=spec["group"],
        world_size=groups,
        timeout=timedelta(seconds=spec.get("timeout_s", 30)),
    )
    state = TrainState(model=job.model, optimizer=job.optimizer)
    ckpt = checkpointer(spec, spec["group"], groups)
    ref = ckpt.resume(state, restarted=True) if ckpt and spec.get("resume") else None
    slots = plan_step(range(groups), groups, accum)[spec["group"]]
    with open(spec["out"], "a") as out:
        for step in range(ref.step if ref else 0, spec["steps"]):
            local = 0.0
            for slot in slots:
                loss = job.micro_loss(step, slot, groups * accum) / (groups * accum)
                loss.backward()
                local += loss.item()
            kill_now(spec, step, "during")
            params = list(job.model.parameters())
            flat = torch.cat([p.grad.reshape(-1) for p in params] + [torch.tensor([local])])
            dist.all_reduce(flat)
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
            job.optimizer.step()
            job.optimizer.zero_grad(set_to_none=True)
            row = {
                "step": step + 1,
                "live": groups,
                "slots": list(slots),
                "loss": float(flat[-1]),
                "digest": digest(job.model),
                "time": time.time(),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            if ckpt and ckpt.due(step + 1):
                ckpt.save(step + 1, state)
    if ckpt:
        ckpt.close()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.support.ft_drill SPEC.json`."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    args = sys.argv[1:] if argv is None else argv
    with open(args[0]) as f:
        spec = json.load(f)
    return run_ddp(spec) if spec.get("mode") == "ddp" else run_ft(spec)


if __name__ == "__main__":
    from tests.support.gloo_exit import exit_now

    exit_now(main())  # done: no finalization, where a gloo thread can abort the process
