"""The coordinator: starts a run's auxiliary services from the capacity plan, on the driver.

`start_services(cfg, plan, use_gpu, say)` turns `Plan.replicas` into one Ray placement
group per service (its `placement` strategy, SPREAD by default), creates the workers
(persistent actors, `driver.aux.actors.AuxWorker`, restarted by Ray, each serving the
service's handler on a per-worker IPC path that survives a restart), calls every worker's
readiness check with the service's `ready_timeout_s`, then starts one proxy per service per
node that holds its workers and registers everything with the run's FleetMonitor. It
returns an `AuxRuntime`: the proxy table the training ranks build their clients from, with
each proxy's node and each node's worker endpoints, so that a rank calls the workers on its
own node directly (driver.aux.session).
A service that fails to start raises `AuxStartError` naming it (the run stops before
training, exit 1). The planning itself is pure (`service_plan`, `proxy_groups`).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field

from driver.capacity import cpu_slots, whole_gpus, workers_per_gpu


class AuxStartError(RuntimeError):
    """A service could not start; the message names the service and why (one line)."""


@dataclass(frozen=True)
class ServicePlan:
    """Placement of one service's workers: placement-group bundles and who goes where."""

    name: str
    bundles: list[dict[str, float]]
    """The placement group's bundles (resources each reserves)."""
    worker_bundle: list[int]
    """Bundle index of each worker (several fractional workers may share one GPU bundle)."""
    resources: dict[str, float]
    """What one worker actor requests inside its bundle."""
    strategy: str = "SPREAD"


def service_plan(name: str, svc, replicas: int, use_gpu: bool, multi_node: bool,
                 slot_cpus: float = 1.0) -> ServicePlan:  # fmt: skip
    """Bundles for `replicas` workers of `svc` (an AuxServiceConfig). GPU runs on several
    nodes give each service whole GPUs of its own (fractional workers of the same service
    packed into one GPU bundle); single-node runs reserve each worker's fraction, so
    several services may share a GPU there, as the capacity planner pooled them. On runs
    without GPUs a worker takes the CPUs of its slots (driver.capacity.cpu_slots)."""
    gpus = svc.gpus_per_worker if use_gpu else 0.0
    cpus = svc.cpus_per_worker if use_gpu else cpu_slots(svc, slot_cpus) * slot_cpus
    resources = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    if not gpus or not multi_node or gpus >= 1:
        per_worker = dict(resources)
        if gpus >= 1 and multi_node:
            per_worker["GPU"] = float(math.ceil(gpus - 1e-9))
            resources = dict(per_worker)
        return ServicePlan(
            name, [dict(per_worker) for _ in range(replicas)], list(range(replicas)),
            resources, svc.placement,
        )  # fmt: skip
    per_gpu = workers_per_gpu(gpus)
    count = whole_gpus(gpus, replicas)
    sizes = [min(per_gpu, replicas - i * per_gpu) for i in range(count)]
    bundles = [{"CPU": cpus * n, "GPU": 1.0} for n in sizes]
    return ServicePlan(name, bundles, [i // per_gpu for i in range(replicas)], resources,
                       svc.placement)  # fmt: skip


def proxy_groups(worker_nodes: list[str]) -> dict[str, list[int]]:
    """Workers by node (one proxy per node that holds any), in worker order."""
    groups: dict[str, list[int]] = {}
    for index, node in enumerate(worker_nodes):
        groups.setdefault(node, []).append(index)
    return groups


def worker_address(root: str, service: str, index: int) -> str:
    """The IPC address of one worker; the same after a restart, so its proxy reconnects."""
    return f"ipc://{root}/{service}-{index}.sock"


def ipc_root(run_id: str | None = None) -> str:
    """A short folder for the run's IPC sockets (unix socket paths hold ~100 bytes)."""
    return os.path.join(tempfile.gettempdir(), f"aux-{run_id or uuid.uuid4().hex[:10]}")


def local_cpus(cfg, world: int) -> int:
    """CPUs an embedded Ray needs for `world` training workers and the planned services."""
    from driver.capacity import replicas_for, services_of

    slot = cfg.parallelism.cpus_per_worker
    train = world * slot
    aux = sum(replicas_for(s, world) * s.gpus_per_worker * slot for s in services_of(cfg, False))
    return max(1, math.ceil(train + aux - 1e-9))


@dataclass
class ServiceRuntime:
    """One started service: its actors and what training ranks need to reach it."""

    name: str
    workers: list = field(default_factory=list)
    proxies: dict[str, object] = field(default_factory=dict)
    """Proxy actor per node id."""
    table: dict[str, int] = field(default_factory=dict)
    """Proxy address -> live workers behind it."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Proxy address -> its Ray node id."""
    endpoints: dict[str, list[str]] = field(default_factory=dict)
    """Ray node id -> the IPC endpoints of the workers there (stable across restarts)."""
    info: dict = field(default_factory=dict)
    """The first worker's readiness reply (e.g. an encoder's embedding size)."""
    group: object = None


@dataclass
class AuxRuntime:
    """Every service of the run, and the FleetMonitor that watches them."""

    services: dict[str, ServiceRuntime] = field(default_factory=dict)
    fleet: object = None
    root: str = ""
    """The folder of the workers' IPC sockets (`ipc_root`), removed by `stop`."""

    def spec(self, cfg) -> dict:
        """What a training rank gets (driver.aux.session.AuxSession's argument)."""
        return {
            "fleet": self.fleet,
            "services": {
                name: {
                    "proxies": dict(rt.table),
                    "nodes": dict(rt.nodes),
                    "endpoints": {node: list(e) for node, e in rt.endpoints.items()},
                    "info": dict(rt.info),
                    "deadline_s": cfg.aux.services[name].deadline_s,
                    "retries": 1 if cfg.aux.services[name].on_worker_death == "retry" else 0,
                    "workers": list(rt.workers),
                }
                for name, rt in self.services.items()
            },
        }

    def summary(self) -> dict:
        """Per service: workers, proxies, requests served, errors and worker restarts since
        the start (from a last poll of the FleetMonitor), for the run's summary."""
        import ray

        totals = {}
        if self.fleet is not None:
            try:
                ray.get(self.fleet.poll.remote(), timeout=30)
                totals = ray.get(self.fleet.totals.remote(), timeout=10)
            except Exception:  # the summary goes without the counts
                totals = {}
        return {
            name: {
                "workers": len(rt.workers),
                "proxies": len(rt.proxies),
                **totals.get(name, {}),
            }  # fmt: skip
            for name, rt in self.services.items()
        }

    def stop(self) -> None:
        """Kill the actors, remove the placement groups and the sockets' folder (this
        machine's: on a cluster, a worker node's goes with its pod)."""
        import ray
        from ray.util import remove_placement_group

        for rt in self.services.values():
            try:  # a graceful stop first: a data stage's teardown, sockets closed
                ray.get([w.shutdown.remote() for w in rt.workers], timeout=5)
            except Exception:  # a worker that does not answer is killed all the same
                pass
            for actor in [*rt.workers, *rt.proxies.values()]:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # already gone with its node
                    pass
            if rt.group is not None:
                remove_placement_group(rt.group)
        if self.fleet is not None:
            ray.kill(self.fleet, no_restart=True)
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


def start_services(cfg, plan, use_gpu: bool, say=print) -> AuxRuntime:
    """Start every planned service, or raise AuxStartError naming the first that fails."""
    from driver.aux.actors import start_fleet, start_service

    runtime = AuxRuntime()
    if not plan.replicas:
        return runtime
    from driver.output.runlogs import LogSpec

    runtime.fleet = start_fleet(cfg.aux.fleet_interval_s)
    root = runtime.root = ipc_root()
    logs = LogSpec.of(cfg)  # each worker's log lines: labelled with its service and worker
    try:
        for name, replicas in plan.replicas.items():
            svc = cfg.aux.services[name]
            layout = service_plan(
                name, svc, replicas, use_gpu, plan.nodes > 1, cfg.parallelism.cpus_per_worker
            )
            rt = start_service(name, svc, layout, root, runtime, logs)
            runtime.fleet.add_service.remote(name, rt.workers, list(rt.proxies.values()))
            say(f"aux {name}: {len(rt.workers)} workers ready behind {len(rt.proxies)} proxies")
    except BaseException:
        runtime.stop()
        raise
    return runtime
