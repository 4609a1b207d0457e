"""Resolve a RunSpec against the catalogs: resources, pools, placement and priority.

Pure functions. `resolve(spec)` fills every default from the cluster and accelerator catalogs
and refuses requests the cluster cannot place, each as one `InputError` naming where the
value came from (the run file and key, or the flag).

    from runner.resolve import resolve
    plan = resolve(load_run("runs/examples/tiny-lm.yaml"))
    plan.totals()  # "2 pods × 8 GPUs = 16 GPUs, 432 CPUs, 5.27Ti"
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from catalog import labels
from catalog.loader import accelerator as find_accelerator
from catalog.loader import load_cluster
from catalog.quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_cpu
from catalog.schema import Accelerator, Cluster, GpuPool
from runner.spec import RunSpec

CPU_ONLY_CPUS = 4.0
CPU_ONLY_MEMORY = 16 * 2**30
CPU_ONLY_SHM = 2**30
GIB = 2**30


@dataclass(frozen=True)
class Plan:
    """A run with every default resolved: what the templates render."""

    spec: RunSpec
    cluster: Cluster
    accelerator: Accelerator | None
    gpus: int
    cpus: float
    memory: int
    shm: int
    head_cpus: float
    head_memory: int
    pools: list[GpuPool] = field(default_factory=list)
    priority_class: str = labels.PRIORITY_DEFAULT

    @property
    def whole_node(self) -> bool:
        """A pod that takes all GPUs of a node (and so the node's allocatable CPU and memory)."""
        return self.accelerator is not None and self.gpus == self.accelerator.gpus_per_node

    def totals(self) -> str:
        """Job totals: `2 pods × 8 GPUs = 16 GPUs, 432 CPUs, 5.27Ti`."""
        pods = self.spec.pods
        noun = "pod" if pods == 1 else "pods"
        cpus = format_cpu(self.cpus * pods)
        memory = format_bytes(self.memory * pods)
        if self.gpus:
            each = "GPU" if self.gpus == 1 else "GPUs"
            total = "GPU" if self.gpus * pods == 1 else "GPUs"
            return (
                f"{pods} {noun} × {self.gpus} {self.accelerator.name} {each} = "
                f"{pods * self.gpus} {total}, {cpus} CPUs, {memory}"
            )
        return f"{pods} {noun} × {format_cpu(self.cpus)} CPUs = {cpus} CPUs, {memory}, no GPUs"


MAX_CPUS = 10**5
MAX_BYTES = 2**60


def _finite(spec: RunSpec, name: str, value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise spec.error(name, f"{value!r} is not a quantity (e.g. 8, 500m, 512Gi)")


def _cpu(spec: RunSpec, name: str) -> float | None:
    value = getattr(spec, name)
    if value is None:
        return None
    _finite(spec, name, value)
    try:
        cores = parse_cpu(value)
    except (QuantityError, ValueError, OverflowError) as err:
        raise spec.error(name, str(err)) from None
    if cores > MAX_CPUS:
        raise spec.error(name, f"{value!r} is more CPUs than any node has")
    if cores < 0.001:
        raise spec.error(name, f"{value!r} is below the smallest CPU request, 1m")
    return cores


def _bytes(spec: RunSpec, name: str) -> int | None:
    value = getattr(spec, name)
    if value is None:
        return None
    _finite(spec, name, value)
    try:
        count = parse_bytes(value)
    except (QuantityError, ValueError, OverflowError) as err:
        raise spec.error(name, str(err)) from None
    if count > MAX_BYTES:
        raise spec.error(name, f"{value!r} is more memory than any node has")
    if count <= 0:
        raise spec.error(name, f"{value!r} must be more than 0")
    return count


def _cluster(spec: RunSpec) -> Cluster:
    source, label = spec.where("cluster")
    cluster = load_cluster(spec.cluster, source=source, field=label)
    if spec.namespace not in cluster.teams:
        teams = ", ".join(cluster.teams)
        raise spec.error(
            "namespace", f"{spec.namespace!r} is not a team of {cluster.name} (teams: {teams})"
        )
    return cluster


def _accelerator(spec: RunSpec, cluster: Cluster) -> Accelerator | None:
    if spec.accelerator is None:
        if spec.gpus:
            raise spec.error("gpus", f"{spec.gpus} GPUs need an accelerator (--accelerator)")
        return None
    source, label = spec.where("accelerator")
    accel = find_accelerator(spec.accelerator, source, label)
    if accel.name not in cluster.accelerators():
        have = ", ".join(cluster.accelerators())
        raise spec.error(
            "accelerator", f"cluster {cluster.name} has no {accel.name} pool (it has: {have})"
        )
    return accel


def _pools(spec: RunSpec, cluster: Cluster, accel: Accelerator) -> list[GpuPool]:
    pools = cluster.pools_for(accel.name)
    if spec.resource_group is not None:
        groups = sorted({p.resource_group for p in pools})
        pools = [p for p in pools if p.resource_group == spec.resource_group]
        if not pools:
            raise spec.error(
                "resource_group",
                f"no {accel.name} pool of {cluster.name} is in resource group "
                f"{spec.resource_group!r} (groups: {', '.join(groups)})",
            )
    if not spec.preemptible:
        reserved = [p for p in pools if not p.spot]
        if not reserved:
            raise spec.error("preemptible", "only spot pools match; set preemptible: true")
        pools = reserved
    return pools


def _gpu_requests(spec: RunSpec, accel: Accelerator) -> tuple[int, float, int, int]:
    """(gpus, cpus, memory, shm) per pod on an accelerator; defaults scale with the GPUs."""
    gpus = accel.gpus_per_node if spec.gpus is None else spec.gpus
    if gpus == 0:
        raise spec.error("gpus", f"0 GPUs on {accel.name}; leave out accelerator for a CPU run")
    if gpus > accel.gpus_per_node:
        raise spec.error(
            "gpus", f"{gpus} GPUs exceed the {accel.gpus_per_node} of one {accel.name} node"
        )
    share = gpus / accel.gpus_per_node
    cpus = _cpu(spec, "cpus")
    if cpus is None:
        cpus = float(int(accel.allocatable_cpu * share)) or 1.0
    memory = _bytes(spec, "memory")
    if memory is None:
        memory = (int(accel.allocatable_memory_bytes * share) // GIB or 1) * GIB
    shm = _bytes(spec, "shm")
    if shm is None:
        shm = min((int(parse_bytes(accel.default_shm) * share) // GIB or 1) * GIB, memory // 2)
    _fits(spec, cpus, memory, accel.allocatable_cpu, accel.allocatable_memory_bytes, accel.name)
    return gpus, cpus, memory, shm


def _fits(spec: RunSpec, cpus: float, memory: int, node_cpu: float, node_mem: int, what: str):
    if cpus > node_cpu:
        raise spec.error(
            "cpus",
            f"{format_cpu(cpus)} CPUs exceed the {format_cpu(node_cpu)} "
            f"allocatable on one {what} node",
        )
    if memory > node_mem:
        raise spec.error(
            "memory",
            f"{format_bytes(memory)} exceeds the {format_bytes(node_mem)} "
            f"allocatable on one {what} node",
        )


def _cpu_requests(spec: RunSpec, cluster: Cluster) -> tuple[int, float, int, int]:
    cpus = _cpu(spec, "cpus") or CPU_ONLY_CPUS
    memory = _bytes(spec, "memory") or CPU_ONLY_MEMORY
    shm = _bytes(spec, "shm") or min(CPU_ONLY_SHM, memory // 2)
    pool = cluster.cpu_pool
    _fits(spec, cpus, memory, pool.allocatable_cpu, parse_bytes(pool.allocatable_memory), "CPU")
    return 0, cpus, memory, shm


def _head(spec: RunSpec, cluster: Cluster) -> tuple[float, int]:
    cpus, memory = _cpu(spec, "head_cpus"), _bytes(spec, "head_memory")
    pool = cluster.cpu_pool
    if cpus > pool.allocatable_cpu:
        raise spec.error(
            "head_cpus",
            f"{format_cpu(cpus)} CPUs exceed the {format_cpu(pool.allocatable_cpu)}"
            " allocatable on one CPU node",
        )
    if memory > parse_bytes(pool.allocatable_memory):
        raise spec.error(
            "head_memory",
            f"{format_bytes(memory)} exceeds the {pool.allocatable_memory}"
            " allocatable on one CPU node",
        )
    return cpus, memory


def _priority(spec: RunSpec) -> str:
    if spec.priority is not None and spec.priority not in labels.PRIORITY_VALUES:
        known = ", ".join(labels.PRIORITY_VALUES)
        raise spec.error("priority", f"unknown priority class {spec.priority!r} (known: {known})")
    if spec.preemptible:
        if spec.priority not in (None, labels.PRIORITY_PREEMPTIBLE):
            raise spec.error("priority", f"{spec.priority!r} conflicts with preemptible")
        return labels.PRIORITY_PREEMPTIBLE
    return spec.priority or labels.PRIORITY_DEFAULT


def resolve(spec: RunSpec) -> Plan:
    """Fill defaults from the catalogs and refuse what the cluster cannot place."""
    cluster = _cluster(spec)
    accel = _accelerator(spec, cluster)
    if accel is not None:
        pools = _pools(spec, cluster, accel)
        gpus, cpus, memory, shm = _gpu_requests(spec, accel)
        nodes = sum(p.nodes for p in pools)
        if gpus == accel.gpus_per_node and spec.pods > nodes:
            raise spec.error(
                "pods",
                f"{spec.pods} whole-node pods exceed the {nodes} {accel.name} nodes"
                f" {cluster.name} offers this run",
            )
    else:
        pools = []
        gpus, cpus, memory, shm = _cpu_requests(spec, cluster)
    if shm > memory:
        raise spec.error(
            "shm", f"{format_bytes(shm)} exceeds the pod memory {format_bytes(memory)}"
        )
    head_cpus, head_memory = _head(spec, cluster)
    return Plan(
        spec=spec,
        cluster=cluster,
        accelerator=accel,
        gpus=gpus,
        cpus=cpus,
        memory=memory,
        shm=shm,
        head_cpus=head_cpus,
        head_memory=head_memory,
        pools=pools,
        priority_class=_priority(spec),
    )
