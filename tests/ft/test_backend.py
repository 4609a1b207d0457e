"""The torchft backend (driver.ft.backend): replica groups of several workers in Ray Train's
worker group, and a Lighthouse that fits a node without CPUs; the Ray source it relies on is
as read, the arguments it rewrites (a table), and on a real Ray whose driver's node has no
CPUs (a head with `num-cpus: 0`) the actor is placed and answers. Groups of several workers
end to end: tests/ft/test_groups.py."""

from __future__ import annotations

import inspect

import pytest


def test_the_ray_source_it_overrides_is_as_read():
    from ray.train.v2.torch import torchft_config

    source = inspect.getsource(torchft_config._TorchftBackend._maybe_create_lighthouse_actor)
    assert "if self.lighthouse_actor is not None:" in source  # an actor made first is kept
    assert "soft=False" in source and "LighthouseServerActor.options(" in source


def test_the_shutdown_it_bounds_is_ray_trains_own():
    from ray.train.torch.config import _TorchBackend

    from driver.ft.backend import LighthouseBackend

    source = inspect.getsource(_TorchBackend.on_shutdown)
    assert "_shutdown_torch," in source and "destroy_process_group=len(worker_group) > 1" in source
    assert "TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S" in source
    assert "on_shutdown" in LighthouseBackend.__dict__


def test_only_the_whole_groups_shutdown_reaches_on_shutdown_as_a_worker_group():
    """The Lighthouse ends with the whole worker group: Ray Train passes the group being
    shut down to the backend, and a replica group's replacement is not a WorkerGroup."""
    from ray.train.v2._internal.callbacks.backend_setup import BackendSetupCallback
    from ray.train.v2._internal.execution.worker_group import ReplicaGroup, WorkerGroup

    source = inspect.getsource(BackendSetupCallback.before_execution_group_shutdown)
    assert "self._backend.on_shutdown(execution_group, self._backend_config)" in source
    assert not issubclass(ReplicaGroup, WorkerGroup)


def test_the_worker_group_source_it_patches_is_as_read():
    from ray.train.v2._internal.execution.worker_group import worker_group

    start = inspect.getsource(worker_group.WorkerGroup)
    assert "replica_group_size=1 if self._manages_replica_groups else None," in start
    assert "starting_world_rank=replica_group_index," in start  # a replacement's ranks
    assert "world_size=len(self._replica_groups)," in start
    assert "replica_group_size=len(old_workers)," in start
    assert "self._worker_rank_to_replica_group_rank = {" in start


@pytest.mark.parametrize(
    ("size", "groups", "given", "made"),
    [
        (1, 2, {"replica_group_size": 1}, {"replica_group_size": 1}),
        (2, 0, {"replica_group_size": 1}, {"replica_group_size": 2}),  # the start
        (2, 3, {"starting_world_rank": 1, "world_size": 3, "replica_group_size": 2},
         {"starting_world_rank": 2, "world_size": 6, "replica_group_size": 2}),  # group 1
        (4, 2, {"replica_group_size": None}, {"replica_group_size": None}),  # no ft
    ],
)  # fmt: skip
def test_create_args(size, groups, given, made):
    from driver.ft.backend import create_args

    assert create_args(size, groups, given) == made


@pytest.mark.slow
def test_the_lighthouse_is_placed_on_a_node_without_cpus():
    import ray
    from ray.cluster_utils import Cluster

    from driver.ft.backend import LighthouseBackend, LighthouseConfig

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        backend = LighthouseBackend()
        address = backend._maybe_create_lighthouse_actor(
            LighthouseConfig(lighthouse_kwargs={"min_replicas": 1})
        )
        assert address.startswith("http")
        assert ray.get(backend.lighthouse_actor.address.remote()) == address
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def ray_two():
    from tests.driver.conftest import embedded_ray

    yield from embedded_ray(2)


def test_a_groups_shutdown_counts_members_gone_and_late_without_raising(ray_two):
    """A group is shut down because a member died: its shutdown call fails with the actor
    gone, which is counted, not raised (Ray Train's own logs a whole traceback); a call that
    does not end in time is counted as late."""
    import time

    from driver.ft.backend import shutdown_outcome

    ray = ray_two

    @ray.remote(num_cpus=0)
    class Member:
        def shut(self, hold_s: float = 0.0) -> None:
            time.sleep(hold_s)

    alive, dead, slow = Member.remote(), Member.remote(), Member.remote()
    ray.get([alive.shut.remote(), dead.shut.remote(), slow.shut.remote()])
    ray.kill(dead)
    with pytest.raises(ray.exceptions.RayActorError):  # known dead before the measured call
        ray.get(dead.shut.remote(), timeout=60)
    futures = [alive.shut.remote(), dead.shut.remote(), slow.shut.remote(30.0)]
    assert shutdown_outcome(futures, timeout_s=3.0) == (1, 1)
    assert shutdown_outcome([alive.shut.remote()], timeout_s=30.0) == (0, 0)
