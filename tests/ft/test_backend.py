"""The torchft backend's Lighthouse fits a node without CPUs (driver.ft.backend): the Ray
source it relies on is as read, and on a real Ray whose driver's node has no CPUs (a head
with `num-cpus: 0`) the actor is placed and answers."""

from __future__ import annotations

import inspect

import pytest


def test_the_ray_source_it_overrides_is_as_read():
    from ray.train.v2.torch import torchft_config

    source = inspect.getsource(torchft_config._TorchftBackend._maybe_create_lighthouse_actor)
    assert "if self.lighthouse_actor is not None:" in source  # an actor made first is kept
    assert "soft=False" in source and "LighthouseServerActor.options(" in source


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
