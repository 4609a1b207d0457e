"""The Ray actors of auxiliary services, and how the coordinator starts one service.

`AuxWorker` hosts one `WorkerServer` with the service's handler on an IPC path that is the
same after Ray restarts the actor (its proxy reconnects by itself); it also answers the
readiness check, its stats for the FleetMonitor, and joins the weight-refresh group.
`AuxProxy` hosts one `ProxyServer` per service per node, on the node's IP, forwarding to the
workers on that node. `start_service(name, svc, layout, root)` places, creates and checks
them (raising `AuxStartError` with one line naming the service).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from catalog.errors import first_line
from driver.aux.coordinator import (
    AuxStartError,
    ServicePlan,
    ServiceRuntime,
    proxy_groups,
    worker_address,
)


def one_line(err: BaseException) -> str:
    """The root cause of a Ray error (its `cause`) as `Type: message`, first line only."""
    return first_line(getattr(err, "cause", None) or err, limit=300, typed=True)


class AuxWorker:
    """Actor body: one service worker. Start-up problems are kept and raised by `ready()`
    (a failing constructor would give a long Ray traceback instead of the cause)."""

    def __init__(self, service: str, spec: str, kwargs: dict, address: str, queue_bound: int,
                 full_policy: str, logs=None, worker: str = ""):  # fmt: skip
        from driver.aux.handler import load_handler
        from driver.aux.worker import WorkerServer

        self.service, self.error, self.server, self.receiver = service, None, None, None
        self.started = time.time()
        if logs is not None:  # the run's log file and OTLP, labelled worker and service
            from driver.output.logs import where_am_i

            logs.install(["", "driver.aux"], service=service, worker=worker, **where_am_i())
        try:
            self.handler = load_handler(spec, kwargs)
            self.handler.setup()
            path = Path(address.removeprefix("ipc://"))
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # left by the previous incarnation of this worker
            self.server = WorkerServer(
                self.handler, address, queue_bound=queue_bound, full_policy=full_policy
            )
            self.address = self.server.start()
        except Exception as err:  # raised again, as it is, by ready()
            self.error = err

    def ready(self) -> dict:
        if self.error is not None:
            raise self.error
        return self.handler.ready()

    def stats(self) -> dict:
        base = {"pid": os.getpid(), "started": self.started, "healthy": self.error is None}
        if self.server is not None:
            base.update(self.server.stats())
        if self.receiver is not None:
            base["weights_version"] = self.receiver.version
        return base

    def refresh_join(self, store: list, prefix: str, rank: int, size: int, layout: list,
                     backend: str, timeout_s: float) -> bool:  # fmt: skip
        """Join rank 0's refresh group (driver.aux.refresh) and receive weights in a thread."""
        from driver.aux.refresh import Receiver

        if self.receiver is not None:
            self.receiver.stop()
        target = getattr(self.handler, "load_weights", None)
        self.receiver = Receiver(store, prefix, rank, size, layout, backend, timeout_s, target)
        self.receiver.start()
        return True

    def refresh_prefix(self) -> str | None:
        """The refresh group this worker receives in (None: none, or its thread ended)."""
        receiver = self.receiver
        if receiver is None or not receiver.thread.is_alive():
            return None
        return receiver.args[1]

    def shutdown(self) -> None:
        """Stop serving and let the handler release what it holds (`teardown`, if any)."""
        if self.server is not None:
            self.server.stop()
            with contextlib.suppress(OSError):
                Path(self.address.removeprefix("ipc://")).unlink()
        teardown = getattr(getattr(self, "handler", None), "teardown", None)
        if callable(teardown):
            teardown()


class AuxProxy:
    """Actor body: the service's proxy on one node."""

    def __init__(self, service: str, workers: list[str], on_worker_loss: str = "retry"):
        import ray

        from driver.aux.proxy import ProxyServer

        host = ray.util.get_node_ip_address()
        self.node = ray.get_runtime_context().get_node_id()
        self.server = ProxyServer(service, workers, host=host, on_worker_loss=on_worker_loss)
        self.addr = self.server.start()

    def address(self) -> str:
        return self.addr

    def stats(self) -> dict:
        live = self.server.live_workers()
        return {**self.server.stats(), "address": self.addr, "live": live, "node": self.node}


def start_fleet(interval_s: float):
    """The run's FleetMonitor actor on the driver's node (0 CPUs)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from driver.aux.fleet import FleetMonitor

    node = ray.get_runtime_context().get_node_id()
    strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=True)
    actor = ray.remote(num_cpus=0, max_concurrency=4)(FleetMonitor)
    return actor.options(scheduling_strategy=strategy).remote(interval_s)


def start_service(name: str, svc, layout: ServicePlan, root: str, runtime,
                  logs=None) -> ServiceRuntime:  # fmt: skip
    """Placement group, workers, readiness, proxies (added to `runtime` as they are made,
    so a failure stops them); AuxStartError naming the service."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    rt = runtime.services[name] = ServiceRuntime(name)
    rt.group = placement_group(layout.bundles, strategy=layout.strategy)
    try:
        ray.get(rt.group.ready(), timeout=svc.ready_timeout_s)
    except Exception as err:
        wanted = f"{len(layout.bundles)} x {layout.bundles[0]}"
        raise AuxStartError(
            f"aux service {name}: no room for its workers ({wanted}, {layout.strategy}) "
            f"within {svc.ready_timeout_s:g} s ({one_line(err)})"
        ) from None
    nodes = placement_group_table(rt.group)["bundles_to_node_id"]
    worker = ray.remote(AuxWorker)
    resources = layout.resources
    kwargs = plain(svc.kwargs)
    for index, bundle in enumerate(layout.worker_bundle):
        options = dict(
            num_cpus=resources["CPU"], num_gpus=resources.get("GPU", 0),
            max_restarts=svc.max_restarts, max_concurrency=4, name=f"aux-{name}-{index}",
            max_task_retries=-1 if svc.max_restarts else 0,  # a call waits out a restart
            scheduling_strategy=PlacementGroupSchedulingStrategy(rt.group, bundle),
        )  # fmt: skip
        address = worker_address(root, name, index)
        rt.workers.append(
            worker.options(**options).remote(
                name,
                svc.handler,
                kwargs,
                address,
                svc.queue_bound,
                svc.full_policy,
                logs,
                f"{name}-{index}",
            )
        )
    rt.info = check_ready(name, rt.workers, svc.ready_timeout_s)
    worker_nodes = [nodes[bundle] for bundle in layout.worker_bundle]
    proxy = ray.remote(AuxProxy)
    for index, (node, members) in enumerate(proxy_groups(worker_nodes).items()):
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False)
        rt.proxies[node] = proxy.options(
            num_cpus=0,
            max_restarts=-1,
            scheduling_strategy=strategy,
            name=f"aux-{name}-proxy-{index}",
        ).remote(name, [worker_address(root, name, i) for i in members], svc.on_worker_death)
        address = ray.get(rt.proxies[node].address.remote(), timeout=svc.ready_timeout_s)
        rt.table[address], rt.nodes[address] = len(members), node
        rt.endpoints[node] = [worker_address(root, name, i) for i in members]
    return rt


def check_ready(name: str, workers: list, timeout_s: float) -> dict:
    """Every worker's readiness reply within `timeout_s`; the first worker's is returned."""
    import ray

    refs = [w.ready.remote() for w in workers]
    try:
        replies = ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise AuxStartError(
            f"aux service {name}: not ready within ready_timeout_s={timeout_s:g} s"
        ) from None
    except Exception as err:
        message = f"aux service {name}: readiness check failed: {one_line(err)}"
        raise AuxStartError(message) from None
    return dict(replies[0] or {})


def plain(value):
    """Config values as plain dicts, lists and scalars (dataclasses from interpolations)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
