"""Ray Train's torchft backend with a Lighthouse that fits on a head without CPUs.

Ray Train 2.60's `_TorchftBackend` starts its `LighthouseServerActor` pinned to the node of
Ray Train's controller (`NodeAffinitySchedulingStrategy(soft=False)`) with Ray's default
actor request of one CPU. In a cluster the controller runs on the head pod, whose
`num-cpus` is 0 (as rendered: nothing of the run's work lands on the head), so the actor
could never be placed and a torchft run failed before its first step (`runner run --local
--shape` shows it). `LighthouseConfig` is `TorchftConfig` whose backend creates the same
actor, on the same node, requesting no CPU (it only answers quorum and heartbeat calls).

    config = LighthouseConfig(lighthouse_kwargs=lighthouse_kwargs(cfg.ft), backend="gloo")

tests/ft/test_backend.py checks the Ray source this relies on, so an upgrade that changes it
fails a test rather than a run.
"""

from __future__ import annotations

import ray
from ray.train.v2.torch.torchft_config import LighthouseServerActor, TorchftConfig, _TorchftBackend
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


class LighthouseBackend(_TorchftBackend):
    """`_TorchftBackend` whose Lighthouse actor requests no CPU."""

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
    """TorchftConfig with `LighthouseBackend`."""

    @property
    def backend_cls(self):
        return LighthouseBackend
