"""The Ray Train trainer of a run: `trainer_for` builds it from the composed config (the
loop, its arguments, scaling, backend, storage, failure policy); `trainer_class` and
`backend_config` choose Ray Train's base trainer without the callbacks a run does not use,
with Ray Train's torch backend from a module without torch, for every run, embedded or in a
cluster (driver/raytrain/lean.py, driver/raytrain/backend.py)."""

from __future__ import annotations

from pathlib import Path

from driver.raytrain.lean import lean_trainer


def trainer_for(
    cfg, world: int, use_gpu: bool, channel, output_dir: Path, aux=None,
):  # fmt: skip
    """The Ray Train trainer running `driver.trainer.worker.train_worker` on `world` workers
    (`trainer_class`, `backend_config`; torchft's config under `ft.enabled`); `channel` is
    the run's channel address (driver.channel.ChannelAddress) the workers connect to."""
    from ray.train import RunConfig, ScalingConfig

    from driver.checkpoint import failure_config
    from driver.checkpoint.reach import ray_storage_uri
    from driver.metrics import flight
    from driver.trainer.worker import train_worker

    par = cfg.parallelism
    backend = par.backend if par.backend != "auto" else ("nccl" if use_gpu else "gloo")
    resources = {"CPU": par.cpus_per_worker, **({"GPU": 1} if use_gpu else {})}
    storage = ray_storage_uri(cfg, output_dir)
    if cfg.ft.enabled:  # live fault tolerance: TorchftConfig, start gate (driver/ft/launch.py)
        from driver.ft.launch import trainer_parts

        torch_config, failures, ft_args = trainer_parts(cfg, world, backend)
    else:
        torch_config, failures, ft_args = backend_config(backend), None, {}
    # PyTorch's flight recorder on every rank, set before the process group starts.
    torch_config = flight.with_env(torch_config, flight.worker_env(cfg))
    trainer = trainer_class()(
        train_worker,
        train_loop_config={"cfg": cfg, "channel": channel, "aux": aux, **ft_args},
        scaling_config=ScalingConfig(
            num_workers=world, use_gpu=use_gpu, resources_per_worker=resources
        ),
        backend_config=torch_config,
        run_config=RunConfig(
            name=f"{cfg.run.team}-{cfg.run.name}",
            storage_path=storage,
            failure_config=failures or failure_config(cfg.checkpoint),
        ),
    )
    # Ray Train's own Ctrl-C handler aborts the run without a checkpoint; the driver's
    # StopRelay turns SIGINT, like SIGTERM, into a final checkpoint and an orderly stop.
    trainer._register_sigint_handler = lambda controller: None
    return trainer


def backend_config(backend: str):
    """Ray Train's TorchConfig, the same without torch in the driver or Ray Train's
    controller (driver/raytrain/backend.py)."""
    from driver.raytrain.backend import LeanTorchConfig

    return LeanTorchConfig(backend=backend)


def trainer_class() -> type:
    """Ray Train's trainer class: its base
    DataParallelTrainer (which imports no torch; TorchTrainer adds only Ray's TorchConfig)
    without the callbacks a run does not use (driver/raytrain/lean.py). Its workers send
    their unsent rows before Ray Train tears them down (driver.metrics.teardown)."""
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from driver.metrics.teardown import with_rows_kept

    return lean_trainer(with_rows_kept(DataParallelTrainer))
