"""Ray Train's torchft backend, for replica groups of several workers and a head without CPUs.

    config = LighthouseConfig(lighthouse_kwargs=lighthouse_kwargs(cfg.ft), backend="gloo",
                              replica_group_size=8)

Two things Ray Train 2.60's torchft support (`ray.train.v2.torch.torchft_config`) does not do
that this module adds, in the process that runs Ray Train's controller (importing this
module, which unpickling the config does, installs `install()`):

- **Replica groups of several workers.** `WorkerGroup` already divides workers into replica
  groups of any size and replaces a whole group (`_assign_worker_ranks`, `ReplicaGroup`,
  `replace_replica_group`), but its start creates the workers with `replica_group_size=1`
  ("TODO: change after we support replica groups of size > 1") and one `ReplicaGroup` per
  worker, and a replacement names its new workers' world ranks `replica_group_index ..` out
  of `len(replica_groups)` workers. With `replica_group_size` k > 1 the start assigns ranks
  per group of k, `LighthouseBackend.on_start` groups the workers k by k before any process
  group forms (one torch process group per replica group: FSDP inside it), and a
  replacement's ranks are `index × k ..` of the whole world. A failure of any member (it
  dies, or its health check hangs past RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S) replaces its
  whole group.
- **A group's shutdown bounded by `SHUTDOWN_S`** (5 s; the environment's
  TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S still wins), not Ray Train's 30 s: a replica
  group is shut down because a member died or hangs (a stopped member never answers), and
  its replacement waited out the whole 30 s while the other groups trained on without it.
- **A Lighthouse that fits a head without CPUs.** Ray starts its `LighthouseServerActor`
  pinned to the controller's node with Ray's default request of one CPU; in a cluster the
  controller runs on the head pod, whose `num-cpus` is 0 (as rendered), so the actor could
  never be placed. Here it requests none (it only answers quorums and heartbeats).
- **A Lighthouse that ends with the worker group.** Ray's actor lives as long as the
  backend that holds its handle; where the controller runs in a process that outlives the
  run (an in-process driver under a test, a notebook), every ft run left one behind. The
  whole worker group's shutdown (the run's end, or a whole restart, whose start makes a
  new one) kills it; a replica group's shutdown leaves it to the others.

tests/ft/test_backend.py checks the Ray source this relies on, so an upgrade that changes
it fails a test rather than a run.
"""

from __future__ import annotations

import functools
import logging
import os

import ray
from ray.exceptions import RayActorError
from ray.train.torch.config import _shutdown_torch
from ray.train.v2._internal.execution.worker_group import ReplicaGroup, WorkerGroup
from ray.train.v2.torch.torchft_config import LighthouseServerActor, TorchftConfig, _TorchftBackend
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

log = logging.getLogger("driver.ft")
SHUTDOWN_S = 5.0
"""The longest a replica group's (or the worker group's) torch shutdown is waited for."""


def group_size_of(worker_group) -> int:
    """The run's replica group size (LighthouseConfig's), 1 for any other backend config."""
    config = worker_group._train_run_context.backend_config
    return int(getattr(config, "replica_group_size", 1) or 1)


def create_args(size: int, groups: int, kwargs: dict) -> dict:
    """`_create_workers`' keyword arguments for groups of `size`: the start's
    `replica_group_size=1` becomes `size`; a replacement's first world rank (its group's
    index) and world size (the number of groups) become the group's first rank and the
    whole world's size. Pure."""
    if size <= 1 or kwargs.get("replica_group_size") is None:
        return kwargs
    if kwargs.get("world_size") is None:  # the worker group's start
        return {**kwargs, "replica_group_size": size}
    return {  # a replacement of group `starting_world_rank`
        **kwargs,
        "starting_world_rank": kwargs.get("starting_world_rank", 0) * size,
        "world_size": groups * size,
    }


def install() -> None:
    """Patch `WorkerGroup._create_workers` (once) to make replica groups of the run's size."""
    original = WorkerGroup._create_workers
    if getattr(original, "_replica_groups_of", False):
        return

    @functools.wraps(original)
    def _create_workers(self, num_workers, placement_group, resources_per_worker, **kwargs):
        groups = len(getattr(self, "_replica_groups", None) or ())
        kwargs = create_args(group_size_of(self), groups, kwargs)
        return original(self, num_workers, placement_group, resources_per_worker, **kwargs)

    _create_workers._replica_groups_of = True
    WorkerGroup._create_workers = _create_workers


def regroup(worker_group, size: int) -> None:
    """The worker group's one-worker ReplicaGroups joined into groups of `size` consecutive
    world ranks (before their process groups form)."""
    groups = worker_group._replica_groups
    if size <= 1 or not groups or len(groups[0].get_workers()) == size:
        return
    workers = [w for group in groups for w in group.get_workers()]
    workers.sort(key=lambda w: w.distributed_context.world_rank)
    worker_group._replica_groups = [
        ReplicaGroup(workers[i : i + size], groups[0]._resources_per_worker, groups[0]._callbacks)
        for i in range(0, len(workers), size)
    ]
    worker_group._worker_rank_to_replica_group_rank = {
        w.distributed_context.world_rank: i
        for i, group in enumerate(worker_group._replica_groups)
        for w in group.get_workers()
    }


def shutdown_outcome(futures: list, timeout_s: float) -> tuple[int, int]:
    """Wait up to `timeout_s` for the members' shutdown calls: (members whose actor was
    gone, calls not done in time). Ray Train's own shutdown raises on the first dead
    member, which its callback logs with a whole traceback on every group replacement."""
    ready, pending = ray.wait(futures, num_returns=len(futures), timeout=timeout_s)
    gone = 0
    for ref in ready:
        try:
            ray.get(ref)
        except RayActorError:
            gone += 1
    return gone, len(pending)


class LighthouseBackend(_TorchftBackend):
    """`_TorchftBackend` with replica groups of the run's size, and a Lighthouse actor that
    requests no CPU."""

    def on_start(self, worker_group, backend_config) -> None:
        if isinstance(worker_group, WorkerGroup):  # the whole group's start: group first
            regroup(worker_group, int(getattr(backend_config, "replica_group_size", 1) or 1))
        super().on_start(worker_group, backend_config)

    def on_shutdown(self, worker_group, backend_config) -> None:
        """Ray Train's `_TorchBackend.on_shutdown`, bounded by `SHUTDOWN_S`, for a group
        whose members may be gone (a group is shut down because one died); the whole
        worker group's shutdown stops the Lighthouse too."""
        try:
            self.shutdown_torch(worker_group)
        finally:
            if isinstance(worker_group, WorkerGroup):
                self.stop_lighthouse()

    def shutdown_torch(self, worker_group) -> None:
        timeout = float(os.environ.get("TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S", SHUTDOWN_S))
        futures = worker_group.execute_async(
            _shutdown_torch, destroy_process_group=len(worker_group) > 1
        )
        gone, late = shutdown_outcome(futures, timeout)
        if late:
            log.warning("ft: a group's process group did not shut down in %g s", timeout)
        if gone:
            log.info("ft: %d member(s) of a group were gone before its shutdown", gone)

    def stop_lighthouse(self) -> None:
        actor, self.lighthouse_actor = self.lighthouse_actor, None
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as err:  # already gone, or Ray shutting down
                log.info("ft: the Lighthouse actor was not killed: %s", err)

    def _maybe_create_lighthouse_actor(self, backend_config: TorchftConfig) -> str:
        if self.lighthouse_actor is None:
            kwargs = {"bind": "[::]:0"} | dict(backend_config.lighthouse_kwargs)
            self.lighthouse_actor = LighthouseServerActor.options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node_id=ray.get_runtime_context().get_node_id(), soft=False
                ),
            ).remote(lighthouse_kwargs=kwargs)
        return super()._maybe_create_lighthouse_actor(backend_config)


class LighthouseConfig(TorchftConfig):
    """TorchftConfig with `LighthouseBackend` and `replica_group_size` workers per group."""

    def __init__(self, lighthouse_kwargs: dict, replica_group_size: int = 1, **kwargs):
        self.replica_group_size = int(replica_group_size)
        super().__init__(lighthouse_kwargs=lighthouse_kwargs, **kwargs)

    @property
    def backend_cls(self):
        return LighthouseBackend


install()
