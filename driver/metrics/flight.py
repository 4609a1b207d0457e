"""The PyTorch flight recorder on training ranks (observability.flight_recorder).

    env = worker_env(cfg)                      # {TORCH_FR_BUFFER_SIZE: ..., ...}; {} when off
    TorchTrainer(..., torch_config=torch_config(backend, env))
    TorchTrainer(..., torch_config=with_env(torchft_config, env))   # any backend config

The variables must be in a rank's environment before its process group starts: c10d reads
them when the group is made. Ray Train makes the group in its backend's `on_start`, before
the training function runs, so `torch_config` returns a TorchConfig whose backend first sets
them in every worker (and makes the dump folder). Size: `debug.flight_recorder_entries`
(0: off). A failing rank attaches `observability.flight_recorder.snapshot()` to its failure
record (driver.trainer.loop), which the crash bundle analyses (driver.output.crash).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from observability import flight_recorder as fr


def worker_env(cfg) -> dict[str, str]:
    """The training ranks' flight recorder variables (dumps under the run's output folder)."""
    entries = getattr(getattr(cfg, "debug", None), "flight_recorder_entries", 2000)
    return fr.env(Path(cfg.run.output_dir).resolve(), int(entries or 0))


def set_env(env: dict[str, str]) -> None:
    """In a worker, before its process group: the variables and the dump folder."""
    os.environ.update(env)
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE")
    if prefix:
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)


def torch_config(backend: str | None, env: dict[str, str]):
    """A Ray Train TorchConfig that sets `env` in every worker before the process group."""
    from ray.train.torch import TorchConfig

    return with_env(TorchConfig(backend=backend), env)


def with_env(config, env: dict[str, str]):
    """The same Ray Train backend config (TorchConfig, or torchft's TorchftConfig), whose
    backend first sets `env` in every worker, then starts as before."""
    base = config.backend_cls

    class Backend(base):
        def on_start(self, worker_group, backend_config):
            if backend_config.worker_env:
                worker_group.execute(set_env, backend_config.worker_env)
            super().on_start(worker_group, backend_config)

    class Config(type(config)):
        @property
        def backend_cls(self):
            return Backend

    out = copy.copy(config)  # every field, whatever the class's __init__ takes
    out.__class__ = Config
    out.worker_env = dict(env)
    return out
