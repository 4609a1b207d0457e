"""Pure builders of the Kueue objects derived from the catalogs: flavors and ClusterQueues.

One ResourceFlavor for CPU nodes and one per accelerator the cluster has pools for
(`resource_flavors`); by default one ClusterQueue that admits every workload
(`admit_all_queue`), or, in the `-fair-sharing` overlay, one per team with an even share of
the cluster's capacity (`fair_share_queues`). Each team's LocalQueue is one of its team
objects (`kustomize.tooling.objects.team_objects`); `kustomize.tooling.generate` writes
what these functions return.
"""

from __future__ import annotations

from catalog import Cluster, accelerator
from catalog import labels as names

Obj = dict

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "training"
COHORT = "training"
CPU_FLAVOR = "cpu"
# "Admit every job regardless of capacity": a nominal quota no cluster reaches.
UNBOUNDED = {"cpu": "100k", "memory": "100Pi", "nvidia.com/gpu": "100k"}
RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]


def flavor_name(accelerator_key: str) -> str:
    """ResourceFlavor name of an accelerator: its catalog key in lower case (h100, h200)."""
    return accelerator_key.lower()


def resource_flavors(cluster: Cluster) -> list[Obj]:
    """One flavor for CPU nodes and one per accelerator the cluster has pools for."""
    flavors = [_flavor(CPU_FLAVOR, {names.POOL_ROLE: "cpu"}, [])]
    for key in cluster.accelerators():
        acc = accelerator(key)
        node_labels = {names.GKE_ACCELERATOR: acc.gke_accelerator, names.POOL_ROLE: "gpu"}
        flavors.append(_flavor(flavor_name(key), node_labels, [dict(names.GPU_TAINT)]))
    return flavors


def _flavor(name: str, node_labels: dict, taints: list[dict]) -> Obj:
    spec: dict = {"nodeLabels": node_labels}
    if taints:
        spec["nodeTaints"] = taints
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def _quotas(flavor: str, cpu: str, memory: str, gpus: str) -> Obj:
    values = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}
    return {
        "name": flavor,
        "resources": [{"name": r, "nominalQuota": values[r]} for r in RESOURCES],
    }


def team_selector() -> Obj:
    """Namespaces a training ClusterQueue serves: those labelled with a team."""
    return {"matchExpressions": [{"key": names.TEAM, "operator": "Exists"}]}


def admit_all_queue(cluster: Cluster) -> Obj:
    """The default policy: one ClusterQueue that admits every workload at once.

    The CPU flavor comes first with no GPUs, so CPU-only pods (Ray heads) land on CPU nodes
    and GPU pods fall through to their accelerator's flavor. Pods that do not fit stay
    pending in the scheduler, where priority classes decide preemption.
    """
    flavors = [_quotas(CPU_FLAVOR, UNBOUNDED["cpu"], UNBOUNDED["memory"], "0")]
    flavors += [
        _quotas(flavor_name(k), UNBOUNDED["cpu"], UNBOUNDED["memory"], UNBOUNDED["nvidia.com/gpu"])
        for k in cluster.accelerators()
    ]
    spec = {
        "namespaceSelector": team_selector(),
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
        "resourceGroups": [{"coveredResources": RESOURCES, "flavors": flavors}],
    }
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE}, "spec": spec}  # fmt: skip


def gpu_capacity(cluster: Cluster, key: str) -> int:
    """GPUs of all pools of one accelerator."""
    return sum(p.nodes for p in cluster.pools_for(key)) * accelerator(key).gpus_per_node


def _share(total: float, teams: int, index: int) -> int:
    """Team `index`'s part of `total` split evenly; the first teams take the remainder."""
    base, rest = divmod(int(total), teams)
    return base + (1 if index < rest else 0)


def fair_share_queues(cluster: Cluster) -> list[Obj]:
    """Capacity mode: one ClusterQueue per team in one cohort, nominal quota an even share.

    Teams borrow idle quota from the cohort and fair sharing reclaims it by preemption.
    """
    teams = cluster.teams
    pool = cluster.cpu_pool
    cpu_total = pool.max_nodes * pool.allocatable_cpu
    mem_gib = pool.max_nodes * _gib(pool.allocatable_memory)
    queues = []
    for i, team in enumerate(teams):
        flavors = [_quotas(CPU_FLAVOR, str(_share(cpu_total, len(teams), i)),
                           f"{_share(mem_gib, len(teams), i)}Gi", "0")]  # fmt: skip
        for key in cluster.accelerators():
            acc = accelerator(key)
            nodes = sum(p.nodes for p in cluster.pools_for(key))
            flavors.append(_quotas(
                flavor_name(key),
                str(_share(nodes * acc.allocatable_cpu, len(teams), i)),
                f"{_share(nodes * _gib(acc.allocatable_memory), len(teams), i)}Gi",
                str(_share(gpu_capacity(cluster, key), len(teams), i)),
            ))  # fmt: skip
        spec = {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {names.TEAM: team}},
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": 1},
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
            "resourceGroups": [{"coveredResources": RESOURCES, "flavors": flavors}],
        }
        queues.append({"apiVersion": KUEUE_API, "kind": "ClusterQueue",
                       "metadata": {"name": team_queue(team)}, "spec": spec})  # fmt: skip
    return queues


def team_queue(team: str) -> str:
    return f"{CLUSTER_QUEUE}-{team}"


def _gib(quantity: str) -> int:
    from catalog.quantity import parse_bytes

    return parse_bytes(quantity) // 2**30
