"""Resolve a RunSpec against the catalogs: resources, pools, placement and priority.

Pure functions. `resolve(spec)` fills every default from the cluster and accelerator catalogs
and refuses requests the cluster cannot place, each as one `InputError` naming where the
value came from (the run file and key, or the flag). Each pod's requests are sized by
`runner.sizing`.

    from runner.resolve import resolve
    plan = resolve(load_run("runs/examples/tiny-lm.yaml"))
    plan.totals()  # "2 pods × 8 H200 GPUs = 16 GPUs, 432 CPUs, 5.27 TiB"
"""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog import labels
from catalog.loader import accelerator as find_accelerator
from catalog.loader import load_cluster
from catalog.quantity import format_bytes, format_cpu
from catalog.saving import GraceError, GracePlan, grace_plan
from catalog.schema import Accelerator, Cluster, GpuPool
from runner import keepnodes
from runner.runfile import shown
from runner.sizing import cpu_requests, gpu_requests, head_requests
from runner.spec_schema import RunSpec


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
    keep_seconds: int | None = None
    """`keep_nodes` in seconds: how long Warden keeps the worker nodes after the run."""
    grace: GracePlan = field(default_factory=lambda: grace_plan(None, 1, "cpu", False))
    """The final checkpoint's budget and the pods' grace period (catalog.saving)."""

    @property
    def whole_node(self) -> bool:
        """A pod that takes all GPUs of a node (and so the node's allocatable CPU and memory)."""
        return self.accelerator is not None and self.gpus == self.accelerator.gpus_per_node

    def totals(self) -> str:
        """Job totals: `2 pods × 8 H200 GPUs = 16 GPUs, 160 CPUs, 1 TiB` (head not counted)."""
        pods = self.spec.pods
        noun = "pod" if pods == 1 else "pods"
        cpus = format_cpu(self.cpus * pods)
        memory = human_bytes(self.memory * pods)
        if self.gpus:
            each = "GPU" if self.gpus == 1 else "GPUs"
            total = "GPU" if self.gpus * pods == 1 else "GPUs"
            return (
                f"{pods} {noun} × {self.gpus} {self.accelerator.name} {each} = "
                f"{pods * self.gpus} {total}, {cpus} CPUs, {memory}"
            )
        return f"{pods} {noun} × {format_cpu(self.cpus)} CPUs = {cpus} CPUs, {memory}, no GPUs"


def human_bytes(count: int) -> str:
    """`1 TiB`, `5.27 TiB`, `512 GiB`: a memory total for people."""
    text = format_bytes(count)
    if text[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        return f"{text[:-2]} {text[-2:]}B"
    return f"{text} B"


def _whole_nodes(spec: RunSpec, accel: Accelerator, gpus: int) -> None:
    """A run of several pods takes whole nodes: only whole-node pods get the GPUDirect NICs
    (`runner.gpupod`), and a multi-node run without them would crawl over eth0."""
    if spec.pods > 1 and gpus < accel.gpus_per_node:
        raise spec.error(
            "gpus",
            f"{gpus} of the {accel.gpus_per_node} GPUs of an {accel.name} node on {spec.pods} "
            f"pods: a multi-pod run takes whole nodes (gpus: {accel.gpus_per_node}), "
            "or runs as one pod",
        )


def _capacity(spec: RunSpec, cluster: Cluster, accel: Accelerator, pools: list[GpuPool]):
    """Refuse more whole-node pods than the matching pools have nodes."""
    nodes = sum(p.nodes for p in pools)
    if spec.pods > nodes:
        raise spec.error(
            "pods",
            f"{spec.pods} whole-node pods exceed the {nodes} {accel.name} nodes "
            f"{cluster.name} offers this run",
        )


def _keep_seconds(spec: RunSpec, accel: Accelerator | None, gpus: int) -> int | None:
    """`keep_nodes` in seconds; only a rayjob on whole GPU nodes keeps its nodes."""
    if spec.keep_nodes is None:
        return None
    if spec.type != "rayjob":
        raise spec.error("keep_nodes", f"only a rayjob keeps its nodes, not a {spec.type}")
    if accel is None:
        raise spec.error("keep_nodes", "a CPU run has no GPU nodes to keep")
    if gpus < accel.gpus_per_node:
        raise spec.error(
            "keep_nodes",
            f"only whole nodes are kept; this run takes {gpus} of the {accel.gpus_per_node} "
            f"GPUs of an {accel.name} node",
        )
    try:
        seconds = keepnodes.parse_duration(spec.keep_nodes)
        keepnodes.check_seconds(seconds)
    except ValueError as err:
        raise spec.error("keep_nodes", str(err)) from None
    return seconds


def _cluster(spec: RunSpec) -> Cluster:
    source, label = spec.where("cluster")
    cluster = load_cluster(spec.cluster, source=source, field=label)
    if spec.namespace not in cluster.teams:
        teams = ", ".join(cluster.teams)
        raise spec.error(
            "namespace", f"{shown(spec.namespace)} is not a team of {cluster.name} (teams: {teams})"
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
                f"{shown(spec.resource_group)} (groups: {', '.join(groups)})",
            )
    if not spec.preemptible:
        reserved = [p for p in pools if not p.spot]
        if not reserved:
            raise spec.error("preemptible", "only spot pools match; set preemptible: true")
        pools = reserved
    return pools


def _priority(spec: RunSpec) -> str:
    if spec.priority is not None and spec.priority not in labels.PRIORITY_VALUES:
        known = ", ".join(labels.PRIORITY_VALUES)
        message = f"unknown priority class {shown(spec.priority)} (known: {known})"
        raise spec.error("priority", message)
    if spec.preemptible:
        if spec.priority not in (None, labels.PRIORITY_PREEMPTIBLE):
            raise spec.error("priority", f"{shown(spec.priority)} conflicts with preemptible")
        return labels.PRIORITY_PREEMPTIBLE
    return spec.priority or labels.PRIORITY_DEFAULT


def resolve(spec: RunSpec) -> Plan:
    """Fill defaults from the catalogs and refuse what the cluster cannot place."""
    cluster = _cluster(spec)
    accel = _accelerator(spec, cluster)
    if accel is not None:
        pools = _pools(spec, cluster, accel)
        gpus, cpus, memory, shm = gpu_requests(spec, accel)
        _whole_nodes(spec, accel, gpus)
        _capacity(spec, cluster, accel, pools)
    else:
        pools = []
        gpus, cpus, memory, shm = cpu_requests(spec, cluster)
    if shm > memory:
        raise spec.error(
            "shm", f"{format_bytes(shm)} exceeds the pod memory {format_bytes(memory)}"
        )
    head_cpus, head_memory = head_requests(spec, cluster)
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
        keep_seconds=_keep_seconds(spec, accel, gpus),
        grace=_grace(spec, accel),
    )


BUDGET_KEY = "checkpoint.preemption_budget_s"


def _grace(spec: RunSpec, accel: Accelerator | None) -> GracePlan:
    """The pods' grace period and the driver's final-save budget, from the model size and
    the device's measured save throughput (catalog.saving); refused when the save cannot
    fit, or when the run sets the budget itself."""
    for item in spec.train_overrides:
        if item.split("=", 1)[0].lstrip("+") == BUDGET_KEY:
            raise spec.error("train_overrides", f"{BUDGET_KEY} is the runner's (the pods' grace "
                             "period): set model_params (and model_shards) instead")  # fmt: skip
    if spec.model_shards > spec.pods:
        raise spec.error("model_shards", f"{spec.model_shards} is more than the run's pods "
                         f"({spec.pods})")  # fmt: skip
    device = accel.name if accel is not None else "cpu"
    try:
        return grace_plan(spec.model_params, spec.model_shards, device, spec.preemptible)
    except GraceError as err:
        raise spec.error("model_params", str(err)) from None
