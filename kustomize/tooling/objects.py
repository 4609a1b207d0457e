"""Pure builders of the per-cluster objects derived from the catalogs.

Teams (namespaces, queues, RBAC, quotas), Kueue flavors and queues, and the image-cache
init containers are facts of `clusters/<name>/cluster.yaml`, `catalog/accelerators.yaml` and
`kustomize/images.yaml`; `kustomize.tooling.generate` writes what these functions return.
"""

from __future__ import annotations

from catalog import Cluster, accelerator, load_peer_pod_ranges
from catalog import labels as names

Obj = dict

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "training"
COHORT = "training"
CPU_FLAVOR = "cpu"
RESEARCHER_ROLE = "training-researcher"
TRAINING_SA = names.TRAINING_KSA
GROUP_DOMAIN = "reve.dev"
# "Admit every job regardless of capacity": a nominal quota no cluster reaches.
UNBOUNDED = {"cpu": "100k", "memory": "100Pi", "nvidia.com/gpu": "100k"}
RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]
WORKLOAD_IDENTITY = "iam.gke.io/gcp-service-account"
# Who may connect to a team's run pods besides the team's own pods: the KubeRay operator
# (Ray dashboard: job submission and status) and Managed Prometheus collectors (Ray's
# metrics agent, scraped by the ClusterPodMonitoring `ray`). Namespace -> ports.
RUN_POD_CLIENTS = {"kuberay-system": [8265], "gmp-system": [8080]}
TEAM_POLICY = "team-isolation"
NAMESPACE_NAME = "kubernetes.io/metadata.name"
# Cross-region DiLoCo (the cluster's `cross_region`): the synchronizer pods' labels (as
# runner.experiment renders them: LEARNER_LABEL = SYNC_ROLE) and the policy admitting peers.
SYNCHRONIZER_POD = {names.LEARNER: names.SYNCHRONIZER}
SYNC_POLICY = "cross-region-synchronizer"
# LocalQueue.spec.clusterQueue is immutable: Argo CD recreates the queue when it changes.
RECREATE = {"argocd.argoproj.io/sync-options": "Force=true,Replace=true"}


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


def gsa_email(cluster: Cluster, role: str) -> str:
    """The Google service account infra creates for a role (training, warden, observability)."""
    return f"{cluster.name}-{role}@{cluster.project}.iam.gserviceaccount.com"


def team_role(team: str) -> str:
    """The Google service account role of one team's runs (infra: `<cluster>-team-<team>`)."""
    return f"team-{team}"


def workload_identity(cluster: Cluster, role: str) -> dict[str, str]:
    """Annotation that lets a Kubernetes service account act as the role's Google account."""
    return {WORKLOAD_IDENTITY: gsa_email(cluster, role)}


def service_account_patches(cluster: Cluster) -> list[Obj]:
    """Workload Identity annotations of the platform's own service accounts."""
    accounts = [(*names.WARDEN_KSA, "warden"), (*names.OBSERVABILITY_KSA, "observability")]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": ns,
                      "annotations": workload_identity(cluster, role)}}
        for ns, name, role in accounts
    ]  # fmt: skip


def team_network_policy(team: str) -> Obj:
    """Ingress to every pod of a team namespace: the team's own pods and the platform's
    components that talk to run pods (RUN_POD_CLIENTS), nothing else."""
    ingress: list[Obj] = [{"from": [{"podSelector": {}}]}]
    for namespace, ports in RUN_POD_CLIENTS.items():
        selector = {"matchLabels": {NAMESPACE_NAME: namespace}}
        ingress.append({"from": [{"namespaceSelector": selector}],
                        "ports": [{"port": p, "protocol": "TCP"} for p in ports]})  # fmt: skip
    spec = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": TEAM_POLICY, "namespace": team}, "spec": spec}  # fmt: skip


def synchronizer_policy(team: str, port: int, ranges: dict[str, str]) -> Obj:
    """Ingress to a team's DiLoCo synchronizer pods from the peer clusters' pods, on the
    synchronizer port only (in addition to team-isolation; NetworkPolicies add up)."""
    ingress = [{"from": [{"ipBlock": {"cidr": cidr}} for cidr in ranges.values()],
                "ports": [{"port": port, "protocol": "TCP"}]}]  # fmt: skip
    spec = {"podSelector": {"matchLabels": dict(SYNCHRONIZER_POD)},
            "policyTypes": ["Ingress"], "ingress": ingress}  # fmt: skip
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": SYNC_POLICY, "namespace": team}, "spec": spec}  # fmt: skip


def team_quota(cluster: Cluster, team: str) -> Obj:
    """GPUs up to the cluster's; no load balancers or node ports, except for a team opted in
    to cross-region experiments: `cross_region.load_balancers` internal load balancers (one
    per synchronizer; each takes a node port too unless the Service turns them off)."""
    gpus = sum(gpu_capacity(cluster, k) for k in cluster.accelerators())
    cross = cluster.cross_region
    lbs = cross.load_balancers if cross and team in cross.teams else 0
    hard = {"requests.nvidia.com/gpu": str(gpus), "services.loadbalancers": str(lbs),
            "services.nodeports": str(lbs)}  # fmt: skip
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "team", "namespace": team}, "spec": {"hard": hard}}  # fmt: skip


def cross_region_objects(cluster: Cluster, team: str) -> list[Obj]:
    """The synchronizer policy of a team opted in to cross-region experiments, else []."""
    cross = cluster.cross_region
    if cross is None or team not in cross.teams:
        return []
    return [synchronizer_policy(team, cross.port, load_peer_pod_ranges(cluster))]


def team_objects(cluster: Cluster, team: str) -> list[Obj]:
    """A team namespace: its queue, its training service account, RBAC, a quota, its
    network policy (and the cross-region synchronizer policy when opted in)."""
    meta = {"name": team, "labels": {names.TEAM: team, names.CLUSTER: cluster.name}}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta},
        {"apiVersion": KUEUE_API, "kind": "LocalQueue",
         "metadata": {"name": names.LOCAL_QUEUE, "namespace": team, "annotations": RECREATE},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": TRAINING_SA, "namespace": team,
                      "annotations": workload_identity(cluster, team_role(team))}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "researchers", "namespace": team},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": RESEARCHER_ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                       "name": f"{team}-researchers@{GROUP_DOMAIN}"}]},
        team_quota(cluster, team),
        team_network_policy(team),
        *cross_region_objects(cluster, team),
    ]  # fmt: skip
