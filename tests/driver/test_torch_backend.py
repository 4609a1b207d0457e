"""The torch-free backend config of an embedded run (driver/raytrain/backend.py): the same
steps as Ray Train's own torch backend, checked against a recording worker group and
against Ray's source (a Ray upgrade that changes its backend fails here). The real
process group is set up by every embedded run (tests/driver/test_e2e.py)."""

from __future__ import annotations

import inspect

import pytest

from driver.raytrain import backend as local_backend
from driver.raytrain.backend import LeanTorchBackend, LeanTorchConfig


class RecordingGroup:
    """Ray Train's worker group as the backend sees it: what it was asked to run, where."""

    def __init__(self, size: int):
        self.size, self.calls = size, []

    def __len__(self) -> int:
        return self.size

    def execute_single(self, rank, fn, *args, **kwargs):
        self.calls.append(("single", rank, fn.__name__, kwargs))
        return ("10.0.0.1", 29500)

    def execute(self, fn, *args, **kwargs):
        self.calls.append(("all", None, fn.__name__, kwargs))

    def execute_single_async(self, rank, fn, *args, **kwargs):
        self.calls.append(("async", rank, fn.__name__, kwargs))
        return rank

    def execute_async(self, fn, *args, **kwargs):
        self.calls.append(("all-async", None, fn.__name__, kwargs))
        return []


@pytest.fixture
def no_ray_get(monkeypatch):
    got = []
    monkeypatch.setattr(local_backend.ray, "get", lambda refs, **kw: got.append(refs) or refs)
    return got


@pytest.mark.parametrize(("backend", "size"), [("gloo", 1), ("gloo", 3), ("nccl", 2)])
def test_on_start_joins_every_rank_at_rank_0s_address(no_ray_get, backend, size):
    group = RecordingGroup(size)
    LeanTorchBackend().on_start(group, LeanTorchConfig(backend=backend, timeout_s=60))
    assert group.calls[0] == ("single", 0, "address_and_port", {})
    assert group.calls[1] == ("all", None, "worker_env", {"addr": "10.0.0.1", "port": 29500})
    setups = group.calls[2:]
    assert [(kind, rank, name) for kind, rank, name, _ in setups] == [
        ("async", rank, "setup_group") for rank in range(size)
    ]
    for rank, (*_, kwargs) in enumerate(setups):
        assert kwargs == {"backend": backend, "world_rank": rank, "world_size": size,
                          "init_method": "env://", "timeout_s": 60}  # fmt: skip
    assert no_ray_get == [list(range(size))]  # waits for every rank together


@pytest.mark.parametrize(("size", "destroy"), [(1, False), (2, True)])
def test_on_shutdown_destroys_the_group_only_with_peers(no_ray_get, size, destroy):
    group = RecordingGroup(size)
    LeanTorchBackend().on_shutdown(group, LeanTorchConfig())
    kwargs = {"destroy_process_group": destroy}
    assert group.calls == [("all-async", None, "shutdown_group", kwargs)]


def test_the_config_is_ray_trains_torch_config_in_kind():
    from ray.train.v2._internal.util import TrainingFramework

    config = LeanTorchConfig(backend="nccl")
    assert config.backend_cls is LeanTorchBackend
    assert config.train_func_context is local_backend.DeviceContext
    assert config.framework is TrainingFramework.TORCH
    assert LeanTorchBackend.share_cuda_visible_devices  # one GPU per worker, all visible


def test_ray_trains_torch_backend_still_does_these_steps():
    """Ray 2.60's `_TorchBackend`, whose steps LeanTorchBackend repeats for CPUs and GPUs."""
    from ray.train.torch import config

    on_start = inspect.getsource(config._TorchBackend.on_start)
    for step in ("get_address_and_port", "MASTER_ADDR", "MASTER_PORT",
                 "_set_torch_distributed_env_vars", "_setup_torch_process_group",
                 "timeout_s=backend_config.timeout_s"):  # fmt: skip
        assert step in on_start
    assert "destroy_process_group=len(worker_group) > 1" in inspect.getsource(
        config._TorchBackend.on_shutdown
    )
    assert config.TorchConfig().train_func_context is config.TorchConfigContextManager
    assert config._TorchBackend.share_cuda_visible_devices is True


def test_the_device_context_is_ray_trains(monkeypatch):
    from ray.train.torch import config

    entered = []
    monkeypatch.setattr(config.TorchConfigContextManager, "__enter__",
                        lambda self: entered.append(True))  # fmt: skip
    with LeanTorchConfig().train_func_context():
        pass
    assert entered == [True]
