"""Pure derivations from the catalogs: everything infra computes about a cluster.

No Pulumi here, so each rule has a table test (`tests/infra/test_derive.py`). The components
in `infra/components/` turn these values into resources. Try it:

    python -c "import catalog, infra.derive as d
    print(d.nic_networks(catalog.load_cluster('ultra-usc1')))"
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from catalog import Cluster, GpuPool, accelerator
from catalog import labels as names

# Kubernetes taint effects as the GKE API spells them.
GKE_EFFECT = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
GKE_EFFECT["NoExecute"] = "NO_EXECUTE"

# Kubernetes service accounts that impersonate the platform's Google service accounts
# (names in catalog/labels.py). The training account is bound once per team namespace.
TRAINING_KSA = names.TRAINING_KSA
WARDEN_KSA = names.WARDEN_KSA
OBSERVABILITY_KSA = names.OBSERVABILITY_KSA


@dataclass(frozen=True)
class NicNetwork:
    """One extra GPU NIC network: its VPC, its subnet and the GKE objects that name it."""

    name: str
    """GKE Network / GKENetworkParamSet name (from the accelerator catalog)."""
    vpc: str
    """VPC name; RDMA networks of one zone share one RoCE VPC."""
    subnet: str
    """Subnet name inside the VPC."""
    cidr: str
    """Subnet range, carved from the cluster's gpu_cidr."""
    device_mode: str
    """NetDevice (gVNIC, TCPXO) or RDMA."""
    mtu: int
    """MTU of the VPC."""
    zone: str | None
    """Zone of the RoCE network profile (RDMA only)."""


def reservation_uri(cluster: Cluster, pool: GpuPool) -> str:
    """`projects/P/reservations/R[/reservationBlocks/B]`, the node pool's affinity value."""
    if pool.reservation is None:
        raise ValueError(f"pool {pool.name} has no reservation")
    res = pool.reservation
    uri = f"projects/{res.project or cluster.project}/reservations/{res.name}"
    return f"{uri}/reservationBlocks/{res.block}" if res.block else uri


def pool_taints(pool: GpuPool) -> list[dict[str, str]]:
    """Kubernetes-form taints of a GPU pool: the GPU taint, plus the spot taint on spot pools."""
    taints = [dict(names.GPU_TAINT)]
    if pool.spot:
        taints.append(dict(names.SPOT_TAINT))
    return taints


def gke_taint(taint: dict[str, str]) -> dict[str, str]:
    """A Kubernetes taint as the GKE node pool API wants it (NoSchedule -> NO_SCHEDULE)."""
    return {"key": taint["key"], "value": taint["value"], "effect": GKE_EFFECT[taint["effect"]]}


def host_maintenance_interval(pool: GpuPool) -> str | None:
    """PERIODIC for reserved A3 Mega pools (spot VMs take GCE's default), else None."""
    if pool.spot:
        return None
    return accelerator(pool.accelerator).host_maintenance_interval


def pool_labels(pool: GpuPool) -> dict[str, str]:
    """Labels our GPU node pools add (GKE adds accelerator, node pool and spot labels itself)."""
    return names.gpu_node_labels(pool.resource_group)


def _subnet_bits(count: int) -> int:
    return max(0, math.ceil(math.log2(count))) if count > 1 else 0


def nic_network_names(cluster: Cluster) -> list[str]:
    """Extra NIC network names of every accelerator in the cluster, in catalog order."""
    seen: dict[str, None] = {}
    for key in cluster.accelerators():
        for name in accelerator(key).network.networks:
            seen.setdefault(name, None)
    return list(seen)


def nic_subnet_prefix(cluster: Cluster) -> int:
    """Prefix length of each NIC subnet: gpu_cidr split into a power of two >= the count."""
    base = ipaddress.ip_network(cluster.network.gpu_cidr)
    return base.prefixlen + _subnet_bits(len(nic_network_names(cluster)))


def rdma_zone(cluster: Cluster, key: str) -> str:
    """The one zone of the pools of an RDMA accelerator (the RoCE profile is zonal)."""
    return next(p.zone for p in cluster.pools_for(key))


def nic_networks(cluster: Cluster) -> list[NicNetwork]:
    """The extra GPU NIC networks: NetDevice ones get a VPC each, RDMA ones share one."""
    names_ = nic_network_names(cluster)
    if not names_:
        return []
    base = ipaddress.ip_network(cluster.network.gpu_cidr)
    subnets = list(base.subnets(prefixlen_diff=_subnet_bits(len(names_))))
    owner = {
        n: k for k in reversed(cluster.accelerators()) for n in accelerator(k).network.networks
    }
    rows = []
    for name, cidr in zip(names_, subnets, strict=False):
        acc = accelerator(owner[name])
        mode = acc.network.device_mode[name]
        zone = rdma_zone(cluster, acc.name) if mode == "RDMA" else None
        vpc = f"{cluster.name}-rdma-{zone}" if zone else f"{cluster.name}-{name}"
        rows.append(
            NicNetwork(
                name=name,
                vpc=vpc,
                subnet=f"{cluster.name}-{name}",
                cidr=str(cidr),
                device_mode=mode,
                mtu=acc.network.mtu,
                zone=zone,
            )
        )
    return rows


def pool_nic_networks(cluster: Cluster, pool: GpuPool) -> list[NicNetwork]:
    """The NIC networks a pool's nodes attach, in interface order (eth1, eth2, ...)."""
    wanted = accelerator(pool.accelerator).network.networks
    by_name = {n.name: n for n in nic_networks(cluster)}
    return [by_name[name] for name in wanted]


def primary_mtu(cluster: Cluster) -> int:
    """MTU of the cluster VPC: the largest GPU network MTU, so pod traffic is not fragmented."""
    return max(accelerator(k).network.mtu for k in cluster.accelerators())


def registry_url(cluster: Cluster) -> str:
    """Docker URL of the cluster's Artifact Registry repository."""
    return cluster.registry_url


def workload_pool(cluster: Cluster) -> str:
    return f"{cluster.project}.svc.id.goog"


def ksa_member(cluster: Cluster, namespace: str, name: str) -> str:
    """The IAM member string of a Kubernetes service account under Workload Identity."""
    return f"serviceAccount:{workload_pool(cluster)}[{namespace}/{name}]"


def team_account_id(cluster: Cluster, team: str) -> str:
    """Google service account id of one team's runs: `<cluster>-team-<team>`."""
    return f"{cluster.name}-team-{team}"


def team_prefix(team: str) -> str:
    """The object-name prefix of a team in the checkpoint and bundle buckets: `<team>/`.

    Checkpoints live under `gs://<checkpoints>/<team>/<run>/` (driver/checkpoint/layout.py).
    """
    return f"{team}/"


def team_bucket_condition(bucket: str, team: str) -> dict[str, str]:
    """IAM condition that limits a bucket grant to the team's objects.

    Object reads and writes name the object (`projects/_/buckets/B/objects/<team>/...`);
    a list request names the bucket, so it is allowed only when its prefix is the team's
    (`storage.googleapis.com/objectListPrefix`).
    """
    prefix = team_prefix(team)
    objects = f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}")'
    listing = (
        'resource.type == "storage.googleapis.com/Bucket" && '
        f'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("{prefix}")'
    )
    return {
        "title": f"team {team} only",
        "description": f"objects under {prefix} of {bucket}, and listing that prefix",
        "expression": f"{objects} || ({listing})",
    }


def node_vm_prefix(cluster: Cluster) -> str:
    """Name prefix GKE gives the VMs and instance groups of the cluster's node pools."""
    return f"gke-{cluster.name}-"


def warden_instance_condition(cluster: Cluster) -> dict[str, str]:
    """IAM condition: only this cluster's node VMs and instance groups, in its zones."""
    prefix = node_vm_prefix(cluster)
    names = [
        f"projects/{cluster.project}/zones/{zone}/{kind}/{prefix}"
        for zone in cluster.zones
        for kind in ("instances", "instanceGroupManagers")
    ]
    return {
        "title": f"{cluster.name} nodes only",
        "description": f"VMs and instance groups named {prefix}* in {', '.join(cluster.zones)}",
        "expression": " || ".join(f'resource.name.startsWith("{n}")' for n in names),
    }


def argocd_path(cluster: Cluster) -> str:
    """Folder of this cluster's app-of-apps in the repository."""
    return f"kustomize/argocd/{cluster.name}"


def awaiting_delivery(cluster: Cluster, pool: GpuPool, settings: tuple[str, ...] = ()) -> bool:
    """A reserved pool whose capacity is not there yet: declared with 0 nodes.

    Either its future reservation says `delivered: false` (the cluster file), or the stack
    setting `awaitingDelivery` names it (a reservation that exists but is not fulfilled).
    """
    if pool.spot:
        return False
    return pool.name in settings or pool.name in cluster.awaiting_delivery()
