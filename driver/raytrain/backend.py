"""Ray Train's torch backend, from a module that does not import torch, so that neither the
driver nor Ray Train's controller does (outside torchft).

Ray Train's controller (an actor in a cluster; on an embedded Ray, the driver's own
process: driver/raytrain/controller.py) would import torch with Ray Train's `TorchConfig`
(`ray.train.torch.config` imports it at the top, and the controller calls its backend's
`on_start`): a second of CPU on the path to the first step, before the controller asks
for the training workers. `LeanTorchConfig` is the same configuration (backend, `env://` rendezvous,
timeout) whose backend does, step for step, what Ray 2.60's `_TorchBackend` does for a
worker group of Ray Train v2 on CPUs or GPUs (not TPUs), through functions of this module
that import Ray's torch helpers on the worker, where torch is loaded anyway:

- `on_start`: rank 0's address and a free port, `MASTER_ADDR`/`MASTER_PORT` and the
  `torch.distributed` variables (`LOCAL_RANK`, `RANK`, ...) in every worker, then the
  process group on every rank (`ray.train.torch.config._setup_torch_process_group`,
  which sets NCCL's async error handling for `nccl`).
- `on_shutdown`: the process group destroyed and CUDA caches emptied, with Ray Train's
  shutdown timeout.
- `train_func_context`: Ray Train's own (the worker's CUDA device set before training).

Every run uses it (`TorchTrainer` adds nothing to its base trainer but Ray's `TorchConfig`)
but a torchft run, which uses torchft's TorchftConfig (driver/raytrain/__init__.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError
from ray.train.backend import Backend, BackendConfig
from ray.train.constants import (
    DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S as DEFAULT_SHUTDOWN_TIMEOUT_S,
)
from ray.train.constants import (
    TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S as SHUTDOWN_TIMEOUT_ENV,
)

logger = logging.getLogger(__name__)


def worker_env(addr: str, port: int) -> None:
    """On a worker: the rendezvous address and torch.distributed's variables."""
    from ray.train.torch.config import _set_torch_distributed_env_vars

    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    _set_torch_distributed_env_vars()


def setup_group(**kwargs) -> None:
    """On a worker: join the process group (Ray Train's own set-up)."""
    from ray.train.torch.config import _setup_torch_process_group

    _setup_torch_process_group(**kwargs)


def shutdown_group(destroy_process_group: bool) -> None:
    """On a worker: leave the process group (Ray Train's own shutdown)."""
    from ray.train.torch.config import _shutdown_torch

    _shutdown_torch(destroy_process_group=destroy_process_group)


def address_and_port() -> tuple[str, int]:
    """On rank 0: its address and a free port (Ray Train's own choice)."""
    from ray.train._internal.utils import get_address_and_port

    return get_address_and_port()


class DeviceContext:
    """Ray Train's `TorchConfigContextManager` (the worker's CUDA device), imported on the
    worker when training starts."""

    def __enter__(self):
        from ray.train.torch.config import TorchConfigContextManager

        self._inner = TorchConfigContextManager()
        return self._inner.__enter__()

    def __exit__(self, kind, value, traceback):
        return self._inner.__exit__(kind, value, traceback)


class LeanTorchBackend(Backend):
    """Ray Train's `_TorchBackend` for a v2 worker group, without torch in the controller."""

    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group, backend_config: LeanTorchConfig) -> None:
        addr, port = worker_group.execute_single(0, address_and_port)
        worker_group.execute(worker_env, addr=addr, port=port)
        size = len(worker_group)
        ray.get([
            worker_group.execute_single_async(
                rank, setup_group, backend=backend_config.backend, world_rank=rank,
                world_size=size, init_method="env://", timeout_s=backend_config.timeout_s,
            )
            for rank in range(size)
        ])  # fmt: skip

    def on_shutdown(self, worker_group, backend_config: LeanTorchConfig) -> None:
        futures = worker_group.execute_async(
            shutdown_group, destroy_process_group=len(worker_group) > 1
        )
        timeout_s = float(os.environ.get(SHUTDOWN_TIMEOUT_ENV, DEFAULT_SHUTDOWN_TIMEOUT_S))
        try:
            ray.get(futures, timeout=timeout_s)
        except GetTimeoutError:
            logger.warning("torch process group shutdown timed out after %s s", timeout_s)


@dataclass
class LeanTorchConfig(BackendConfig):
    """`ray.train.torch.TorchConfig` with an explicit backend (`gloo`, `nccl`) and the
    `env://` rendezvous."""

    backend: str = "gloo"
    timeout_s: int = 1800

    @property
    def backend_cls(self):
        return LeanTorchBackend

    @property
    def train_func_context(self):
        return DeviceContext

    @property
    def framework(self):
        from ray.train.v2._internal.util import TrainingFramework

        return TrainingFramework.TORCH

    def to_dict(self) -> dict:
        return {"backend": self.backend, "init_method": "env", "timeout_s": self.timeout_s}
