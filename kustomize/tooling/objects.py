"""Pure builders of the per-cluster objects derived from the catalogs.

Teams (namespaces, queues, RBAC, quotas, network policies) and the platform's Workload
Identity annotations are facts of `clusters/<name>/cluster.yaml` and
`catalog/accelerators.yaml`; Kueue's flavors and ClusterQueues are built in
`kustomize.tooling.kueue`. `kustomize.tooling.generate` writes what these functions return.
"""

from __future__ import annotations

from catalog import Cluster, load_peer_pod_ranges
from catalog import labels as names
from kustomize.tooling.kueue import CLUSTER_QUEUE, KUEUE_API, gpu_capacity

Obj = dict

RESEARCHER_ROLE = "training-researcher"
TRAINING_SA = names.TRAINING_KSA
GROUP_DOMAIN = "reve.dev"
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
