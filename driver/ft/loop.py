"""The training loop of one Ray Train worker under torchft (`ft.enabled`): each worker is
one replica group (docs/ft.md). `driver.loop.run` hands over to `run_ft` here.

Per step: `ft.begin_step()` (quorum; a group that is behind heals from a live peer first)
-> forward/backward of this group's micro-batch slots (driver.ft.batch; the batches come
from driver.ft.source.SlotSource by (step, slot)) -> `ft.reduce` (gradients and loss
SUMmed across the live groups) -> clipping -> `ft.commit` (all-or-nothing). A failed commit
is not a step: no row, no checkpoint, the same step runs again with the next quorum. The
lowest rank of the lowest live group (`driver.parallel.Topology.is_writer`) writes the
checkpoints and sends the step's full metrics row. Each committed step's row carries
`ft.metrics()`. When a group finishes the last step it marks the run done in the start
gate's store, so a replacement that arrives after the end does not train alone from step 0.

A group started again (attempt > 0) reads no checkpoint up front: it heals from a live
group at its first quorum, and reads the newest checkpoint only when no group is ahead (a
full restart; `FtReplica.restore`). Below `ft.min_replicas` FtStopped ends the worker with
the one-line reason (a staged checkpoint may still commit; no final save, which would be
labelled with the last step); Ray Train's controller then stops the run at once
(driver.ft.stop) instead of retrying it.
"""

from __future__ import annotations

import time

from driver.step import autocast_for

DONE_KEY = "ft/done"


def run_ft(cfg, sink, logger, control=None, attempt: int = 0, gate: str | None = None) -> dict:
    """Build the worker's model, optimizer, torchft replica and checkpoint session; train."""
    import ray.train
    import torch

    from driver import optim
    from driver.checkpoint import TrainState
    from driver.ft.replica import FtReplica
    from driver.ft.source import SlotSource
    from driver.metrics.rank import RankReporter
    from driver.parallel import Topology, setup_device, wrap
    from driver.workloads import build

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    topo = Topology.from_config(cfg.parallelism, world)
    group = topo.group_of(rank)
    device = setup_device(cfg, ctx, logger)
    torch.manual_seed(cfg.train.seed)  # every group builds the same initial weights
    work = build(cfg.model, cfg.data)
    accum = cfg.train.grad_accum_steps
    source = SlotSource(
        work.dataset, cfg.train.micro_batch_size, topo.groups * accum, cfg.train.seed
    )
    model = work.model.to(device)
    optimizer, scheduler = optim.build(model, cfg.optimizer, cfg.train.steps)
    ft = FtReplica(
        cfg.ft,
        group=group,
        groups_at_start=topo.groups,
        lighthouse=None,
        state={"model": model, "optimizer": optimizer, "scheduler": scheduler},
        grad_accum=accum,
        gate=gate,
        host=ray.util.get_node_ip_address(),
        shrink=shrink_callable(cfg, device),
    )
    model = wrap(model, cfg, device, world, manager=ft.manager)
    session = None
    if cfg.checkpoint.active:
        from driver.ft.session import FtCheckpointSession

        state = TrainState(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, dataloader=source
        )
        session = FtCheckpointSession(cfg, state, group, control)
        if session.attempt == 0:  # the first start follows checkpoint.resume
            start = session.resume()
            if start:
                batches = start * topo.groups
                ft.manager.load_state_dict({"step": start, "batches_committed": batches})
        else:  # started again: heal from a live group; the checkpoint only if none is ahead
            ft.restore = session.resume
    logger.info("replica group %d/%d on %s starts at step %d", group, topo.groups, device, ft.step)
    stepper = FtStep(cfg, model, work, optimizer, scheduler, device, source)
    reporter = RankReporter(sink, rank, attempt, device)
    done = gate_store(gate)
    row: dict = {}
    try:
        row = train_steps_ft(
            cfg, ft, stepper, session, reporter, logger, rank, done,
            writer=lambda: topo.is_writer(rank, ft.plan.position),
        )  # fmt: skip
    except BaseException:  # FtStopped too: no final save (it would be labelled `steps`)
        if session:
            session.abandon()
        raise
    finally:
        ft.close()
    final = {"final_loss": row.get("loss"), "steps": cfg.train.steps, **ft.metrics()}
    return {**final, **(session.finish() if session else {})}


def train_steps_ft(cfg, ft, stepper, session, reporter, logger, rank, done=None, writer=None):
    """Commit steps until `train.steps`; returns the last row. Below `ft.min_replicas`
    FtStopped propagates (logged, with this worker's rows flushed). `writer()`: whether this
    rank writes the step's checkpoint and full metrics row (default: `ft.lowest_live`)."""
    from driver.ft.replica import FtStopped
    from driver.loop import inject_failure

    writes = writer or (lambda: ft.lowest_live)
    row: dict = {}
    try:
        while ft.step < cfg.train.steps:
            if done is not None and done.check([DONE_KEY]):
                logger.info("ft: the run finished without this group")
                if session:
                    session.ckpt.set_writer(False)
                break
            try:
                new = stepper.step(ft)
            except FtStopped as err:
                logger.error("%s", err)
                raise
            if new is None:  # the commit vote failed: the same step runs again
                continue
            row = new
            logger.info(
                "step %d loss %.4f (%d groups)", row["step"], row["loss"], row["ft_quorum_size"]
            )
            full = writes()
            if session:
                session.ckpt.set_writer(full)
                session.after_step(row["step"], row)
            reporter.add(row, full=full)
            inject_failure(cfg, row["step"] - 1, rank)
            if session and session.should_stop(row["step"]):
                break
        if done is not None and ft.step >= cfg.train.steps:
            done.set(DONE_KEY, str(ft.step))
    finally:
        reporter.flush()
    return row


def gate_store(gate: str | None):
    """A client of the start gate's TCPStore (the run's done mark), or None."""
    if not gate:
        return None
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, port = gate.rsplit(":", 1)
    return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))


def shrink_callable(cfg, device):
    """Warden's shrink starter when the pod names a Warden (driver.ft.target), else None."""
    import os

    if not cfg.ft.shrink:
        return None
    from driver.ft.target import shrink_from_env

    per_pod = 1
    if device.type == "cuda":
        import torch

        per_pod = max(1, torch.cuda.device_count())
    return shrink_from_env(os.environ, per_pod)


class FtStep:
    """One step of one replica group: its slots' forward/backward, reduce, clip, commit."""

    def __init__(self, cfg, model, work, optimizer, scheduler, device, source):
        self.cfg, self.model, self.work, self.device = cfg, model, work, device
        self.optimizer, self.scheduler, self.source = optimizer, scheduler, source
        self.autocast = autocast_for(cfg, device)
        per_step = cfg.train.micro_batch_size * source.slots
        self.units_per_step = per_step * work.units_per_example

    def step(self, ft) -> dict | None:
        """The committed step's row, or None when the commit vote failed."""
        import torch

        from driver.step import to_device

        plan = ft.begin_step()
        started = time.perf_counter()
        local, wait = 0.0, 0.0
        for slot in plan.slots:
            fetch = time.perf_counter()
            batch = to_device(self.source.batch(plan.step, slot), self.device)
            wait += time.perf_counter() - fetch
            with self.autocast():
                loss = self.work.loss(self.model, batch) / plan.divisor
            loss.backward()
            local += loss.item()
        computed = time.perf_counter()
        total = ft.reduce(self.model.parameters(), local)
        clip = self.cfg.train.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else 1e9)
        lr = self.scheduler.get_last_lr()[0] * plan.lr_scale
        if not ft.commit(self.optimizer, self.scheduler):
            return None
        ended = time.perf_counter()
        elapsed = ended - started
        return {
            "step": plan.step + 1,
            "loss": total,
            "lr": lr,
            "grad_norm": float(norm),
            "step_time": elapsed,
            "data_wait_s": wait,
            "forward_backward_s": computed - started - wait,
            "optimizer_s": ended - computed,
            f"{self.work.unit}_per_s": self.units_per_step * plan.live / ft.start_groups / elapsed
            if not self.cfg.ft.constant_batch
            else self.units_per_step / elapsed,
            "time": time.time(),
            "ft_slots": len(plan.slots),
            **ft.metrics(),
        }
