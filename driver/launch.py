"""The driver's run on the Ray head: connect, plan capacity, start Ray Train, wait, report.

`launch(cfg, config_yaml)` returns the end-of-run summary or raises `RunFailed` after
writing a crash bundle (driver.fit, once Ray is up and the run's channel serves).
Auxiliary services in the plan are started before training (driver.aux.coordinator;
`AuxStartError` when one fails its start-up check) and stopped after it. Ray:
`address=auto` (or `run.address` / RAY_ADDRESS) joins a cluster; otherwise an embedded Ray
starts with just the CPUs the training workers need. Workers: one per GPU with nccl, or one
per CPU slot with gloo.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time

from catalog.errors import InputError
from driver import capacity
from driver.config.aux import check_run
from driver.config.compose import check_batch
from driver.embedded.lean import LOCAL_ENV, quiet_token_notice, started_ray
from driver.embedded.ray_start import lean_ray_start, own_sigterm, short_raylet_wait

# Ray Train's controller polls every worker each health-check interval, and a
# ray.train.report call waits for the next poll. The driver never calls report (metrics and
# the final figures go to the run's channel), so no step waits on the poll. Each poll costs every
# worker CPU time (it is served between training steps), so the interval is set explicitly
# rather than short: 2 s detects a dead worker soon enough and keeps the polls cheap.
HEALTH_CHECK_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
HEALTH_TIMEOUT_ENV = "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S"
HEALTH_CHECK_DEFAULT_S = "2"


def cluster_shape(nodes: list[dict], device: str, cpus_per_worker: float) -> tuple[int, int, bool]:
    """(nodes, slots per node, use GPU) from `ray.nodes()`: GPUs, or CPU slots per node."""
    alive = [n for n in nodes if n.get("Alive", True)]
    gpu_nodes = [int(n["Resources"].get("GPU", 0)) for n in alive]
    gpu_nodes = [g for g in gpu_nodes if g >= 1]
    use_gpu = device == "gpu" or (device == "auto" and bool(gpu_nodes))
    if use_gpu:
        if not gpu_nodes:
            raise InputError(None, "parallelism.device", "gpu, but the Ray cluster has no GPUs")
        return len(gpu_nodes), min(gpu_nodes), True
    slots = [int(n["Resources"].get("CPU", 0) // cpus_per_worker) for n in alive]
    slots = [s for s in slots if s >= 1]
    if not slots:
        raise InputError(None, "parallelism.cpus_per_worker", "no node has that many CPUs")
    return len(slots), min(slots), False


def connect(cfg) -> bool:
    """Join the cluster or start an embedded Ray; True when local (no cluster address)."""
    import ray

    os.environ.setdefault(HEALTH_CHECK_ENV, HEALTH_CHECK_DEFAULT_S)
    if cfg.ft.enabled and cfg.ft.watchdog_s:  # a stopped worker is replaced within it too
        os.environ.setdefault(HEALTH_TIMEOUT_ENV, str(cfg.ft.watchdog_s))
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    address = cfg.run.address or os.environ.get("RAY_ADDRESS")
    if not address:  # nothing to preempt and no Prometheus here: fewer actors to start
        for key, value in LOCAL_ENV.items():
            os.environ.setdefault(key, value)
    if ray.is_initialized():
        return not address
    if address:
        # workers' output to this process's log, but not over a progress display
        ray.init(address=address, log_to_driver=cfg.logging.format != "progress")
        return False
    from driver.aux.coordinator import local_cpus

    quiet_token_notice()
    loading = preload(PRELOAD + (FT_PRELOAD if cfg.ft.enabled else ()))  # while ray.init waits
    cpus = cfg.run.local_cpus or local_cpus(cfg, cfg.parallelism.workers or 2)
    lean = contextlib.nullcontext() if cfg.run.local_dashboard else lean_ray_start()
    try:
        with lean, short_raylet_wait(), own_sigterm():
            ray.init(
                address="local",  # a new Ray of its own, even with a `ray start` here
                num_cpus=cpus,
                include_dashboard=bool(cfg.run.local_dashboard),
                dashboard_host="127.0.0.1",
                log_to_driver=False,
                logging_level="WARNING",
            )
    finally:  # a stop during start-up too: never exit with an import half done
        loading.join()  # no import of the driver's races the preload's (see `preload`)
    started_ray()
    return True


PRELOAD = (
    "ray.train.v2.api.data_parallel_trainer",
    "driver.raytrain.controller",
    "driver.raytrain.lean",
    "driver.raytrain.backend",
    "driver.trainer.worker",
    "driver.raytrain",
)
"""What the driver imports after `ray.init` to build the trainer (Ray Train with pandas and
Ray Data: a second and more), imported while `ray.init` waits for Ray's daemons (and, at a
shape, while its nodes start: driver/embedded/cluster.py). Not torch: outside torchft the
driver never needs it (a test checks)."""
FT_PRELOAD = ("torch", "torch.distributed", "driver.ft.launch")
"""What a torchft run adds (torchft's backend config imports torch). torch.distributed's
C++ initialization runs here, off the main thread: a stop signal's handler (the main
thread's) raising inside it would end the process with SIGABRT."""


def preload(modules: tuple[str, ...]) -> threading.Thread:
    """Import `modules` in a background thread, in order: the driver needs them only after
    `ray.init`, which spends most of its seconds waiting for Ray's daemons to start. The
    driver joins the thread once `ray.init` returns, before it imports anything else: two
    threads importing torch.distributed's C++ part at once can make its initialization
    raise inside C++, which ends the process with SIGABRT (exit 134, seen at start-up of
    torchft runs). A failure here is left to the driver's own import of the module, which
    then raises it."""

    def run() -> None:
        for name in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=run, name="preload", daemon=True)
    thread.start()
    return thread


def plan_capacity(cfg) -> tuple[capacity.Plan, bool]:
    """The capacity plan for the connected cluster, and whether workers use GPUs. With a
    shape the plan is the shape's (what `runner render` checked), once the cluster holds it."""
    import ray

    par = cfg.parallelism
    nodes, slots, use_gpu = cluster_shape(ray.nodes(), par.device, par.cpus_per_worker)
    if cfg.shape.nodes:
        nodes, slots = fit_shape(cfg.shape, nodes, slots)
    try:
        result = capacity.plan(nodes, slots, capacity.services_of(cfg, use_gpu),
                               par.replica_group_size, max_workers=par.workers)  # fmt: skip
    except capacity.CapacityError as err:
        raise InputError(None, "parallelism", str(err)) from None
    check_batch(cfg, result.world_size)  # the world size is known only now
    check_run(cfg)  # across sections: aux, model, data
    return result, use_gpu


def fit_shape(shape, nodes: int, slots: int) -> tuple[int, int]:
    """The shape's (nodes, GPUs per node) when the Ray cluster holds it, else InputError."""
    if nodes < shape.nodes or slots < shape.gpus_per_node:
        raise InputError(
            None, "shape", f"the run's shape is {shape.nodes} nodes x {shape.gpus_per_node} "
            f"GPUs; the Ray cluster has {nodes} x {slots}",
        )  # fmt: skip
    return shape.nodes, shape.gpus_per_node


def launch(cfg, config_yaml: str, fmt: str, say=print, stops=None) -> dict:
    """Run training to the end; the summary, or RunFailed after writing a crash bundle.
    `stops` (a driver.channel.stops.StopRelay, installed) turns SIGTERM and SIGINT into
    a final checkpoint and an early end; the summary then has `stopped_by`."""
    from driver.channel.drain import watch_drains
    from driver.channel.server import start_channel
    from driver.fit import train

    started = time.monotonic()
    with stops.held() if stops is not None else contextlib.nullcontext():
        embedded = connect(cfg)  # a stop signal takes effect once Ray is up
    result, use_gpu = plan_capacity(cfg)
    say(capacity.format_plan(result))
    channel = start_channel()  # metrics, failures, attempts, preemption notices
    drains = watch_drains(channel)  # a draining Ray node: its ranks' pods are ending
    try:
        return train(cfg, config_yaml, fmt, stops, channel, result, use_gpu, embedded, started)
    finally:
        drains.close()
        channel.close()
