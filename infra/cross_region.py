"""Pure derivations of the network path between clusters for cross-region DiLoCo.

A cluster's `cross_region` (clusters/<name>/cluster.yaml) names the peer clusters whose
learners dial its synchronizers' internal load balancers. Infra peers the primary VPCs of
the two clusters (each stack declares its own side of the peering) and, on the
synchronizer's cluster, opens only the synchronizer port of its nodes to the peers' pod
ranges. No Pulumi here: table tests in `tests/infra/test_cross_region.py`. Try it:

    python -c "import catalog, infra.cross_region as c
    print(c.network_link(catalog.load_cluster('mega-euw4')))"
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from catalog import Cluster

# The ranges VPC peering exchanges as subnet routes: the primary subnet and its pod and
# service secondary ranges. `master_cidr` lives in Google's own VPC, reached over a peering
# of its own (peerings are not transitive); `gpu_cidr` lives in the NIC VPCs, not peered.
PEERED_RANGES = ("primary_cidr", "pods_cidr", "services_cidr")


@dataclass(frozen=True)
class SyncIngress:
    """The firewall rule that lets the peers' learner pods reach the synchronizers."""

    name: str
    sources: tuple[str, ...]
    """The peers' pod ranges, in `cross_region.peers` order."""
    port: int
    """`cross_region.port`: the synchronizers' TCP port (and their Service's port)."""


def vpc_name(cluster: Cluster) -> str:
    """Name of the cluster's primary VPC (the one its nodes and pods live in)."""
    return cluster.name


def network_link(cluster: Cluster) -> str:
    """The primary VPC as another project's peering names it (Compute's relative link)."""
    return f"projects/{cluster.project}/global/networks/{vpc_name(cluster)}"


def peering_name(cluster: Cluster, peer: str) -> str:
    """This cluster's side of the peering toward `peer`'s VPC."""
    return f"{cluster.name}-to-{peer}"


def partners(cluster: Cluster, others: Mapping[str, Cluster]) -> list[str]:
    """Clusters whose VPC this cluster's VPC peers with, sorted.

    Its own `cross_region.peers` (learners dial in), and every cluster whose
    `cross_region.peers` names it (its learners dial out): a peering is active only when
    both networks declare their side, so both stacks derive it from the catalog.
    """
    own = set(cluster.cross_region.peers) if cluster.cross_region else set()
    dial_out = {
        name
        for name, other in others.items()
        if name != cluster.name and other.cross_region and cluster.name in other.cross_region.peers
    }
    return sorted(own | dial_out)


def sync_ingress(cluster: Cluster, peers: Mapping[str, Cluster]) -> SyncIngress | None:
    """The synchronizer port, open to the pod ranges of `cross_region.peers`; None if the
    cluster hosts no cross-region synchronizers. `peers` holds at least those clusters."""
    cross = cluster.cross_region
    if cross is None:
        return None
    sources = tuple(peers[name].network.pods_cidr for name in cross.peers)
    return SyncIngress(name=f"{cluster.name}-cross-region-sync", sources=sources, port=cross.port)


def overlap(a: Cluster, b: Cluster) -> tuple[str, str] | None:
    """The first of `a`'s peered ranges that overlaps one of `b`'s, as (field of `a`,
    message); None when peering the two VPCs is possible."""
    for key_a in PEERED_RANGES:
        net_a = ipaddress.ip_network(getattr(a.network, key_a))
        for key_b in PEERED_RANGES:
            net_b = ipaddress.ip_network(getattr(b.network, key_b))
            if net_a.overlaps(net_b):
                return f"network.{key_a}", f"{net_a} overlaps {b.name}'s network.{key_b} {net_b}"
    return None
