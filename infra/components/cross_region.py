"""The CrossRegion component: the network path of cross-region DiLoCo between clusters.

Declared only for a cluster with peering partners (`infra.cross_region.partners`): this
cluster's side of a VPC peering toward each partner's primary VPC, and, where the cluster
hosts synchronizers (`cross_region` in its file), one firewall rule that admits TCP on
`cross_region.port` from the peers' pod ranges to this cluster's nodes, and nothing else.
A peering is active once both stacks have declared their side (docs/infra.md).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster
from infra import cross_region
from infra.components import TYPE_PREFIX
from infra.components.network import Network


class CrossRegion(pulumi.ComponentResource):
    """`peerings` by partner name, and `firewall` (None where no synchronizers run here)."""

    def __init__(
        self,
        cluster: Cluster,
        partners: dict[str, Cluster],
        network: Network,
        node_sa_email: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(f"{TYPE_PREFIX}:CrossRegion", cluster.name, None, opts)
        self.peerings: dict[str, gcp.compute.NetworkPeering] = {}
        previous: list[pulumi.Resource] = []
        for name in sorted(partners):
            # One peering operation at a time per network: GCP refuses concurrent ones.
            opts_ = pulumi.ResourceOptions(parent=self, depends_on=previous)
            self.peerings[name] = self._peering(cluster, partners[name], network, opts_)
            previous = [self.peerings[name]]
        self.firewall = None
        rule = cross_region.sync_ingress(cluster, partners)
        if rule is not None:
            self.firewall = gcp.compute.Firewall(
                rule.name,
                name=rule.name,
                project=cluster.project,
                network=network.vpc.id,
                description="cross-region DiLoCo: peer clusters' pods to the synchronizers' "
                "internal load balancers",
                direction="INGRESS",
                source_ranges=list(rule.sources),
                allows=[{"protocol": "tcp", "ports": [str(rule.port)]}],
                target_service_accounts=[node_sa_email],
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"peerings": list(self.peerings)})

    @staticmethod
    def _peering(cluster, peer, network, opts) -> gcp.compute.NetworkPeering:
        """Subnet routes only (primary, pod and service ranges are exchanged by default);
        no custom routes, so neither side's NAT default route or Google's control-plane
        peering route travels, and no public-IP subnets."""
        name = cross_region.peering_name(cluster, peer.name)
        return gcp.compute.NetworkPeering(
            name,
            name=name,
            network=network.vpc.id,
            peer_network=cross_region.network_link(peer),
            export_custom_routes=False,
            import_custom_routes=False,
            export_subnet_routes_with_public_ip=False,
            import_subnet_routes_with_public_ip=False,
            stack_type="IPV4_ONLY",
            opts=opts,
        )
