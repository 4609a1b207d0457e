"""The training loop of one Ray Train worker under torchft (`ft.enabled`): each worker is
one replica group (docs/ft.md). `driver.loop.run` hands over to `run_ft` here.

Per step (driver.ft.stepper.FtStep): `ft.begin_step()` (quorum; a group that is behind
heals from a live peer first) -> forward/backward of this group's micro-batch slots
(driver.ft.batch; the batches come from driver.ft.source.SlotSource by (step, slot)) ->
`ft.reduce` (gradients and loss SUMmed across the live groups) -> clipping -> `ft.commit`
(all-or-nothing). A failed commit is not a step: no row, no checkpoint, the same step runs
again with the next quorum. The lowest rank of the lowest live group
(`driver.parallel.Topology.is_writer`) writes the checkpoints and sends the step's full
metrics row. Each committed step's row carries `ft.metrics()`. The end of the run (the
done mark, the writer's mark, the next group's copies, no `ray.train.report`) is
driver.ft.end's; the copies of a dead writer's rows driver.ft.records'.

A group started again (attempt > 0) reads no checkpoint up front: it heals from a live
group at its first quorum, and reads the newest checkpoint only when no group is ahead (a
full restart; `FtReplica.restore`). Below `ft.min_replicas` FtStopped ends the worker with
the one-line reason (a staged checkpoint may still commit; no final save, which would be
labelled with the last step); Ray Train's controller then stops the run at once
(driver.ft.stop) instead of retrying it.
"""

from __future__ import annotations

from driver.ft.end import DONE_KEY, RunEnd, RunFinished, finished, hand_over_at_end
from driver.ft.records import Copies, mark_recorded

__all__ = ["DONE_KEY", "RunEnd", "run_ft", "train_steps_ft"]


def run_ft(cfg, sink, logger, control=None, attempt: int = 0, gate: str | None = None) -> dict:
    """Build the worker's model, optimizer, torchft replica and checkpoint session; train."""
    import ray.train
    import torch

    from driver import optim
    from driver.checkpoint import TrainState
    from driver.ft.replica import FtReplica
    from driver.ft.source import SlotSource
    from driver.ft.stepper import FtStep
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
    done = gate_store(gate)
    stepper.done = done
    reporter = RankReporter(sink, rank, attempt, device)
    end = RunEnd()
    try:
        row = train_steps_ft(
            cfg, ft, stepper, session, reporter, logger, rank, done,
            writer=lambda: topo.is_writer(rank, ft.plan.position), end=end,
        )  # fmt: skip
    except BaseException:  # FtStopped too: no final save (it would be labelled `steps`)
        if session:
            session.abandon()
        raise
    finally:
        ft.close()
    final = {"final_loss": row.get("loss"), "steps": cfg.train.steps, **ft.metrics()}
    final.update(session.finish() if session else {})
    if end.took_over and session and (newest := session.ckpt.latest()):  # not its own saves
        final["ckpt_committed_step"] = newest.step
    if end.reports:  # the summary's checkpoint and ft fields; then the next group in line
        if control is not None:  # knows the rows and the final save are in (records.py)
            control.call("finish", final, timeout_s=30)
        mark_recorded(done, cfg.train.steps)
    return final


def train_steps_ft(cfg, ft, stepper, session, reporter, logger, rank, done=None, writer=None,
                   end=None):  # fmt: skip
    """Commit steps until `train.steps`; returns the last row. Below `ft.min_replicas`
    FtStopped propagates (logged, with this worker's rows flushed), unless the run is done.
    `writer()`: whether this rank writes the step's checkpoint and full metrics row
    (default: `ft.lowest_live`). A group that becomes the writer first sends copies of the
    rows the old writer may have lost (driver.ft.records); at the end of the run the
    writer marks its rows delivered, and the next group in line sends its copies when that
    mark does not come. `end` (a RunEnd) learns whether this rank reports the final."""
    from driver.ft.replica import FtStopped
    from driver.loop import inject_failure

    writes = writer or (lambda: ft.lowest_live)
    end = end if end is not None else RunEnd()
    copies = Copies()
    row: dict = {}
    full = False
    try:
        while ft.step < cfg.train.steps:
            try:
                if not row and finished(done):  # a replacement that arrives after the end
                    raise RunFinished
                new = stepper.step(ft)
            except (RunFinished, FtStopped) as err:
                # the others finished: a late replacement, a quorum formed without them, or
                # one of fewer than ft.min_replicas because they never join another
                if not (isinstance(err, RunFinished) or finished(done)):
                    logger.error("%s", err)
                    raise
                logger.info("ft: the run finished without this group")
                if session:
                    session.ckpt.set_writer(False)
                return row
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
            for copy in copies.after_step(row, full):  # the old writer's rows it may have lost
                reporter.add(copy, full=True)
            reporter.add(row, full=full)
            inject_failure(cfg, row["step"] - 1, rank)
            if session and session.should_stop(row["step"]):
                break
        if ft.step >= cfg.train.steps:
            end.reports = hand_over_at_end(ft, done, full, copies, reporter, logger)
            end.took_over = end.reports and not full
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
