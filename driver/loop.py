"""The training loop each Ray Train worker runs: `train_worker(args)`.

Per rank: NUMA pinning, the reference workload, DDP (or FSDP2 when `parallelism.fsdp_size`
> 1), AdamW with warm-up + cosine, gradient accumulation, clipping, bf16 autocast on GPU,
and one metrics row per step from every rank to the run's channel (driver.metrics.rank).
Two hooks keep the loop independent of the data pipeline and checkpoint libraries: the batch source
(`data.source`, an iterator with state_dict) and the checkpoint session
(`driver.checkpoint.session`: resume, periodic saves, preemption, the final save; used when
`checkpoint.interval_steps` or `checkpoint.resume` ask for it). With auxiliary services the
rank also gets an `AuxSession` (driver.aux.session): conditioning embeddings per batch,
rank 0's weight refresh and evaluations, and the services' metrics in rank 0's rows. A
failing rank sends its last metrics rows, records its traceback, log tail and flight
recorder snapshot in the run's channel, then re-raises.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import time
import traceback

from driver.parallel import setup_device, wrap


def import_object(path: str):
    """`package.module:Name` -> the object."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def train_worker(args: dict) -> None:
    """Ray Train entry point: `args` holds `cfg` (TrainConfig) and `channel` (the run's
    channel address, driver/channel): this rank's metrics rows, failure record, attempt
    count, preemption notices and, from rank 0, the final figures go there."""
    import ray.train

    from driver.logs import LogSpec, close
    from driver.telemetry import where_am_i, worker_logger

    cfg = args["cfg"]
    rank = ray.train.get_context().get_world_rank()
    channel = args["channel"].connect(rank)
    host, handlers = where_am_i(), []
    try:
        attempt = channel.call("hello", rank, host, timeout_s=60)  # tags its rows
        tags = {"run": cfg.run.name, "rank": rank, "attempt": attempt, **host}
        logger, tail = worker_logger(cfg.logging.tail_lines, tags)
        handlers = LogSpec.of(cfg).install([logger.name, ""], rank=rank, attempt=attempt, **host)
        share_handlers(logger, "driver.checkpoint")
        final = train_rank(cfg, channel, logger, tail, rank, attempt, args)
        # No `ray.train.report`: the final figures go to the run's channel (run_ft sent them
        # already), and nothing reads Ray Train's result. A report is a barrier of every
        # worker through Ray Train's synchronization actor, which a local run then never
        # starts (driver/lazy_sync.py); under ft a replaced group's peers may have left it.
        if not cfg.ft.enabled and rank == 0:
            channel.call("finish", final, timeout_s=30)
    finally:
        close(handlers)  # the run's log file and OTLP (driver/logs.py)
        channel.close()


def train_rank(cfg, channel, logger, tail, rank: int, attempt: int, args: dict) -> dict:
    """This rank's training (torchft's loop under `ft.enabled`); a failure leaves its
    traceback, last log lines and flight recorder in the run's channel, then re-raises."""
    try:
        if cfg.ft.enabled:  # live fault tolerance: driver/ft/loop.py
            from driver.ft.loop import run_ft

            return run_ft(cfg, channel, logger, channel, attempt, args.get("ft_gate"))
        return run(cfg, channel, logger, channel, args.get("aux"), attempt)
    except BaseException as err:
        from observability.flight_recorder import snapshot

        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "time": time.time(),
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
            "log_lines": list(tail.lines),
            "flight_recorder": snapshot(),
        }
        with contextlib.suppress(Exception):
            channel.call("fail", rank, record, timeout_s=10)
        raise


def share_handlers(logger, name: str) -> None:
    """Send the `name` logger's lines where the worker's go (log tail, stderr)."""
    import logging

    other = logging.getLogger(name)
    other.handlers = list(logger.handlers)
    other.setLevel(logging.INFO)
    other.propagate = False


def run(cfg, sink, logger, control=None, aux_spec=None, attempt: int = 0) -> dict:
    """Build everything and train; returns the final metrics."""
    import ray.train
    import torch

    from driver import optim
    from driver.diloco.config import data_shard
    from driver.diloco.hook import prepare
    from driver.metrics.rank import RankReporter
    from driver.step import Loop
    from driver.workloads import build

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = setup_device(cfg, ctx, logger)
    torch.manual_seed(cfg.train.seed)
    aux = aux_session(cfg, aux_spec, rank)
    work = build(cfg.model, cfg.data, cond_dim=aux.cond_dim() if aux else 0)
    model = wrap(work.model.to(device), cfg, device, world)
    optimizer, scheduler = optim.build(model, cfg.optimizer, cfg.train.steps)
    stages = {"stages": aux.stages()} if aux and cfg.data.remote_stage else {}
    shard_rank, shard_world = data_shard(rank, world)  # a DiLoCo learner's own slice
    source = import_object(cfg.data.source)(
        work.dataset, cfg.train.micro_batch_size, shard_rank, shard_world, cfg.train.seed, **stages
    )
    diloco = prepare(model)  # a DiLoCo learner when REVE_DILOCO_* say so, else a no-op
    extra = diloco.checkpoint_state()  # its sync state goes into the checkpoints
    session = checkpointing(cfg, model, optimizer, scheduler, source, rank, world, control, extra)
    start = session.resume() if session else 0
    logger.info("rank %d/%d on %s starts at step %d", rank, world, device, start)
    if not (session and session.rng_restored):  # else the checkpoint's RNG states go on
        torch.manual_seed(cfg.train.seed + 1000 * rank + start)
    loop = Loop(cfg, model, work, optimizer, scheduler, device, world)
    diloco.start(model)  # join after the restore: a restored learner resumes its rounds
    loop.diloco = diloco
    finished = False
    try:
        reporter = RankReporter(sink, rank, attempt, device)
        row = train_steps(cfg, loop, source, session, start, reporter, logger, aux)
        finished = True
    except BaseException:
        if session:
            session.abandon()
        raise
    finally:
        if hasattr(source, "close"):
            source.close()
        aux_final = aux.close(wait=finished) if aux else {}
        loop.diloco.end(model, finished)  # the last round's merge, then close the link
    final = {"final_loss": row.get("loss"), "steps": cfg.train.steps, **aux_final}
    return {**final, **(session.finish() if session else {})}


def aux_session(cfg, spec: dict | None, rank: int):
    """The rank's AuxSession when the run has auxiliary services, else None."""
    if not spec or not spec.get("services"):
        return None
    from driver.aux.session import AuxSession

    return AuxSession(cfg, spec, rank)


def train_steps(cfg, loop, source, session, start: int, reporter, logger, aux=None) -> dict:
    """Steps `start`..`train.steps`, or until a preemption notice stops every rank; every
    rank hands each row to its reporter (rank 0's with the checkpoint fields and the aux
    services' figures: the newest once a second, and on the step that reaches
    `train.steps` a fresh poll, taken before that row is queued), whose thread sends a
    batch every second; at the end or on a failure it waits until the driver has the rest.
    A preemption stop queues the step's row before the stop's agreement and final save
    (`should_stop`, which every rank calls once per step), so it leaves while they run.
    The last row."""
    rank = reporter.rank
    batches = aux.batches(iter(source)) if aux else iter(source)
    row: dict = {}
    try:
        for step in range(start, cfg.train.steps):
            row = loop.step(step, batches)
            if diloco := getattr(loop, "diloco", None):  # after the optimizer+scheduler step
                diloco.after_step(step, loop.model)
            logger.info("step %d loss %.4f", step, row["loss"])
            if session:
                session.after_step(step + 1, row)
            if aux:
                aux.after_step(step + 1, loop.model)
            if aux and rank == 0 and step + 1 == cfg.train.steps:  # a fresh poll, then queued
                row.update(aux.metrics(final=True))
            elif aux and rank == 0 and reporter.due():
                row.update(aux.metrics())
            reporter.add(row)
            inject_failure(cfg, step, rank)
            if session and session.should_stop(step + 1):  # the row is on its way first
                break
    finally:
        reporter.flush()
    return row


def inject_failure(cfg, step: int, rank: int) -> None:
    """`debug.fail_at_step`: raise on the chosen rank (-1: all) to drill failure handling."""
    at, who = cfg.debug.fail_at_step, cfg.debug.fail_rank
    if at is not None and step == at and who in (-1, rank):
        raise RuntimeError(f"debug.fail_at_step={at}: injected failure on rank {rank}")


def checkpointing(cfg, model, optimizer, scheduler, source, rank, world, control, extra=None):
    """The worker's CheckpointSession, or None when checkpoints are off."""
    if not cfg.checkpoint.active:
        return None
    from driver.checkpoint import TrainState
    from driver.checkpoint.session import CheckpointSession

    state = TrainState(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        dataloader=source,
        extra=extra or {},
    )
    return CheckpointSession(cfg, state, rank, world, control)
