"""A training worker's trainer, composed from the run's config: `build_trainer(...)`.

Per worker: the device (NUMA-pinned), the reference workload, its batch feed (driver.data.
feed: in process, or the shared-memory pipeline), the auxiliary services' session, then
either the plain parts (DDP or FSDP2/HSDP, driver.trainer.plain) or the torchft parts (a
replica group, driver.ft.stepper), the checkpoint session and its resume, the DiLoCo
learner, and the hooks in their order (driver.trainer.hooks). Every group builds the same
initial weights (`train.seed`). With checkpoints or torchft the worker hears its own
SIGTERM (driver.trainer.signals): a final save, or under torchft its group leaves the
quorum (driver.ft.leave).
"""

from __future__ import annotations

import logging

from driver.parallel import Topology, setup_device, wrap
from driver.trainer import hooks as h
from driver.trainer.core import StepCore
from driver.trainer.faults import Faults
from driver.trainer.loop import Trainer
from driver.trainer.signals import TerminationHook, hear_termination


def build_trainer(cfg, ctx, channel, logger, attempt: int, args: dict) -> Trainer:
    """The trainer of this worker. `args`: the loop's arguments (`aux` spec, `ft_gate`)."""
    import torch

    from driver.metrics.rank import RankReporter
    from driver.workloads import build

    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = setup_device(cfg, ctx, logger)
    watch = hear_termination(cfg, channel, rank)  # this worker's pod's SIGTERM
    heard = watch.heard if watch else None
    notices = ft_notices(cfg, channel, rank, world) if cfg.ft.enabled else None
    torch.manual_seed(cfg.train.seed)  # every worker and group builds the same weights
    aux = aux_session(cfg, args.get("aux"), rank)
    work = build(cfg.model, cfg.data, cond_dim=aux.cond_dim() if aux else 0)
    feed = make_feed(cfg, work.dataset, rank, world, aux)
    faults = Faults(cfg.debug, rank, attempt, marks=cfg.run.output_dir)
    faults.before_start()
    parts = ft_parts if cfg.ft.enabled else plain_parts
    stepper, model, session, learner = parts(cfg, work, feed, aux, device, rank, world,
                                             channel, args, heard, notices)  # fmt: skip
    stepper.core.faults = faults
    faults.ready()
    logger.info("rank %d/%d on %s starts at step %d", rank, world, device, stepper.step)
    leave = leave_hook(cfg, heard, notices, rank, world) if cfg.ft.enabled else None
    if leave is not None:  # the run's stop rides on the reduce; every group acts after one step
        from driver.ft.leave import run_notice

        stepper.ft.run_notice = run_notice(notices, session)
        if session is not None:
            session.guard.agreed = leave.run_stopped
    order = [
        h.DilocoHook(learner, model) if learner else None,
        leave,
        h.CheckpointHook(session) if session else None,
        h.AuxHook(aux, model) if aux else None,
        h.ReportHook(),
        h.CommitHook(session) if session else None,
        h.FaultHook(faults),
        h.FeedHook(feed),
        TerminationHook(watch) if watch else None,
    ]
    reporter = RankReporter(channel, rank, attempt, device)
    if cfg.ft.enabled:  # a writer handing back sends its last rows before the new writer's
        stepper.hand_back = reporter.send_now
    if session is not None:  # a commit waits until its steps' rows are written
        session.ckpt.before_commit = reporter.durable
    return Trainer(cfg, stepper, [hook for hook in order if hook], reporter, logger)


def plain_parts(cfg, work, feed, aux, device, rank, world, channel, args, heard=None,
                notices=None):  # fmt: skip
    """DDP or FSDP2/HSDP over every worker: (stepper, model, session, learner)."""
    from driver import optim
    from driver.diloco.hook import prepare
    from driver.trainer.plain import PlainStepper

    model = wrap(work.model.to(device), cfg, device, world)
    optimizer, scheduler = optim.build(model, cfg.optimizer, cfg.train.steps)
    core = StepCore(cfg, model, work, optimizer, scheduler, device, feed, condition_of(aux),
                    offset=slot_offset(cfg, rank, world))  # fmt: skip
    accum = cfg.train.grad_accum_steps
    stepper = PlainStepper(core, rank, accum, slots=world * accum,
                           shard=cfg.parallelism.fsdp_size)  # fmt: skip
    learner = prepare(model, cfg.diloco)  # a DiLoCo learner when configured, else a no-op
    session = checkpointing(cfg, model, optimizer, scheduler, feed, rank, world, channel,
                            learner.checkpoint_state(), heard)  # fmt: skip
    stepper.resume(session)
    return stepper, model, session, learner


def ft_parts(cfg, work, feed, aux, device, rank, world, channel, args, heard=None,
             notices=None):  # fmt: skip
    """One torchft replica group: (stepper, model, session, learner)."""
    import ray

    from driver import optim
    from driver.checkpoint import TrainState
    from driver.diloco.hook import prepare_ft
    from driver.ft.replica import FtReplica
    from driver.ft.stepper import FtStepper, gate_store

    topo = Topology.from_config(cfg.parallelism, world)
    group = topo.group_of(rank)
    # DDP or FSDP inside the replica group (Ray Train's process group is the group's)
    model = wrap(work.model.to(device), cfg, device, topo.group_size)
    optimizer, scheduler = optim.build(model, cfg.optimizer, cfg.train.steps)
    learner = prepare_ft(model, cfg.diloco, group, topo.groups)  # the run is one learner
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "data": feed}
    if learner:  # its sync state heals with the group's
        state["diloco"] = learner.learner
    ft = FtReplica(
        cfg.ft,
        group=group,
        groups_at_start=topo.groups,
        lighthouse=None,
        state=state,
        grad_accum=cfg.train.grad_accum_steps,
        gate=args.get("ft_gate"),
        host=ray.util.get_node_ip_address(),
        shrink=shrink_callable(cfg, device, topo.group_size),
        decider=shrink_decider(cfg, topo, channel),
        group_rank=topo.group_rank(rank),
        group_size=topo.group_size,
        device=device.type,
    )
    ft.outer = learner.learner  # a merge rides on a step's commit vote (None: no learner)
    core = StepCore(cfg, model, work, optimizer, scheduler, device, feed, condition_of(aux),
                    offset=slot_offset(cfg, rank, world))  # fmt: skip
    from driver.ft.watchdog import Watchdog, group_mates

    mates = group_mates() if cfg.ft.watchdog_s and topo.group_size > 1 else []
    watchdog = Watchdog(cfg.ft.watchdog_s, logging.getLogger("driver.worker"), mates=mates)
    stepper = FtStepper(core, ft, topo, rank, done=gate_store(args.get("ft_gate")),
                        watchdog=watchdog)  # fmt: skip
    session = None
    if cfg.checkpoint.active:
        from driver.ft.session import FtCheckpointSession

        train_state = TrainState(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                 dataloader=feed, extra=learner.checkpoint_state())  # fmt: skip
        member = {"rank": rank, "group_rank": topo.group_rank(rank), "group_size": topo.group_size}
        session = FtCheckpointSession(cfg, train_state, group, channel, **member,
                                      notices=notices, heard=heard)  # fmt: skip
    stepper.resume(session)
    return stepper, model, session, learner


def make_feed(cfg, dataset, rank: int, world: int, aux):
    """The worker's batch feed: in process, or its shared-memory pipeline (`data.loader`);
    with `data.remote_stage`, the stage runs on that service's workers. A DiLoCo learner's
    workers take their learner's share of every step's slots (learners never train on the
    same samples: driver.config.diloco.data_shard)."""
    from driver.config.diloco import data_shard
    from driver.data.feed import Feed

    accum = cfg.train.grad_accum_steps
    shard_rank, shard_world = data_shard(rank, world, cfg.diloco)
    stages = aux.stages() if aux and cfg.data.remote_stage else None
    return Feed(dataset, cfg.train.micro_batch_size, shard_world * accum, cfg.train.seed,
                rank=shard_rank, grad_accum=accum, pipeline=pipeline_config(cfg),
                stages=stages)  # fmt: skip


def slot_offset(cfg, rank: int, world: int) -> int:
    """Where this run's slots start among the feed's: a DiLoCo learner's share (0 else)."""
    from driver.config.diloco import data_shard

    return (data_shard(rank, world, cfg.diloco)[0] - rank) * cfg.train.grad_accum_steps


def pipeline_config(cfg):
    """The shared-memory pipeline's settings from `data.*`, or None (in process)."""
    if cfg.data.loader != "pipeline":
        return None
    from driver.config.data import PipelineConfig

    data = cfg.data
    return PipelineConfig(producers=data.producers, collators=data.collators,
                          prefetch_batches=data.prefetch_batches,
                          work_queue_size=data.work_queue_size,
                          sample_queue_size=data.sample_queue_size)  # fmt: skip


def condition_of(aux):
    """The batch transform that adds `aux.condition`'s embeddings, or None."""
    return aux.conditioner() if aux else None


def aux_session(cfg, spec: dict | None, rank: int):
    """The rank's AuxSession when the run has auxiliary services, else None."""
    if not spec or not spec.get("services"):
        return None
    from driver.aux.session import AuxSession

    return AuxSession(cfg, spec, rank)


def checkpointing(cfg, model, optimizer, scheduler, feed, rank, world, control, extra=None,
                  heard=None):  # fmt: skip
    """The worker's CheckpointSession, or None when checkpoints are off."""
    if not cfg.checkpoint.active:
        return None
    from driver.checkpoint import TrainState
    from driver.checkpoint.session import CheckpointSession

    state = TrainState(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                       dataloader=feed, extra=extra or {})  # fmt: skip
    return CheckpointSession(cfg, state, rank, world, control, heard=heard)


def ft_notices(cfg, channel, rank: int, world: int):
    """The run's notices as this replica group polls them: the run's, and the terminations
    of its own ranks' pods (driver.channel.stops.NoticePoll)."""
    from driver.channel.stops import NoticePoll

    topo = Topology.from_config(cfg.parallelism, world)
    return NoticePoll(channel, ranks=list(topo.ranks_of(topo.group_of(rank))))


def leave_hook(cfg, heard, notices, rank: int, world: int):
    """driver.ft.leave's hook: this group leaves the quorum when its pod is ending."""
    from driver.ft.leave import LeaveHook

    topo = Topology.from_config(cfg.parallelism, world)
    return LeaveHook(heard or (lambda: None), notices.pods if notices else None,
                     topo.group_of(rank), topo.group_size)  # fmt: skip


def shrink_decider(cfg, topo, channel):
    """Which missing replica groups are lost, not late (driver.ft.lost), or None."""
    if not cfg.ft.shrink:
        return None
    from driver.ft.lost import ShrinkDecider, channel_pods, rule_of

    return ShrinkDecider(topo.groups, topo.ranks_of, channel_pods(channel), rule_of(cfg.ft))


def shrink_callable(cfg, device, group_size: int = 1):
    """Warden's shrink starter when the pod names a Warden (driver.ft.target), else None;
    replica groups of `group_size` workers."""
    import os

    if not cfg.ft.shrink:
        return None
    from driver.ft.target import shrink_from_env

    per_pod = 1
    if device.type == "cuda":
        import torch

        per_pod = max(1, torch.cuda.device_count())
    return shrink_from_env(os.environ, per_pod, group_size)
