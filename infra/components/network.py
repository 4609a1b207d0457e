"""The Network component: cluster VPC, subnet with pod/service ranges, NAT, firewall, GPU NICs.

A3 Mega gets one VPC with one subnet per GPU NIC (GPUDirect-TCPXO); A3 Ultra one gVNIC VPC
plus one RDMA VPC with the zone's RoCE network profile and one subnet per RDMA NIC. The
layout comes from `infra.derive.nic_networks`, which reads the accelerator catalog.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster
from infra import cross_region, derive
from infra.components import TYPE_PREFIX

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
# Ports the control plane calls on nodes beyond GKE's own rules: admission webhooks.
WEBHOOK_PORTS = ["8443", "9443"]
ALL_TRAFFIC = [{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}]


class Network(pulumi.ComponentResource):
    """Every network a cluster needs; `vpc`, `subnet` and `nic` are what others attach to."""

    def __init__(self, cluster: Cluster, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{TYPE_PREFIX}:Network", cluster.name, None, opts)
        self.cluster = cluster
        child = pulumi.ResourceOptions(parent=self)
        self.vpc = gcp.compute.Network(
            cluster.name,
            name=cross_region.vpc_name(cluster),  # peers derive its link from the catalog
            project=cluster.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=derive.primary_mtu(cluster),
            opts=child,
        )
        self.subnet = self._primary_subnet(child)
        self._nat(child)
        self._primary_firewall(child)
        self.nic_vpcs: dict[str, gcp.compute.Network] = {}
        self.nic_subnets: dict[str, gcp.compute.Subnetwork] = {}
        for nic in derive.nic_networks(cluster):
            self._nic(nic, child)
        self.register_outputs({"vpc": self.vpc.name, "subnet": self.subnet.name})

    def _primary_subnet(self, child: pulumi.ResourceOptions) -> gcp.compute.Subnetwork:
        net = self.cluster.network
        return gcp.compute.Subnetwork(
            self.cluster.name,
            name=self.cluster.name,
            project=self.cluster.project,
            region=self.cluster.region,
            network=self.vpc.id,
            ip_cidr_range=net.primary_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[
                {"range_name": PODS_RANGE, "ip_cidr_range": net.pods_cidr},
                {"range_name": SERVICES_RANGE, "ip_cidr_range": net.services_cidr},
            ],
            opts=child,
        )

    def _nat(self, child: pulumi.ResourceOptions) -> None:
        """Private nodes reach the internet (images, pip) only through Cloud NAT."""
        name = f"{self.cluster.name}-nat"
        router = gcp.compute.Router(
            name,
            name=name,
            project=self.cluster.project,
            region=self.cluster.region,
            network=self.vpc.id,
            opts=child,
        )
        gcp.compute.RouterNat(
            name,
            name=name,
            project=self.cluster.project,
            region=self.cluster.region,
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            enable_dynamic_port_allocation=True,
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
            opts=child,
        )

    def _primary_firewall(self, child: pulumi.ResourceOptions) -> None:
        net = self.cluster.network
        self._firewall(
            f"{self.cluster.name}-internal",
            self.vpc,
            [net.primary_cidr, net.pods_cidr, net.services_cidr],
            ALL_TRAFFIC,
            child,
        )
        self._firewall(
            f"{self.cluster.name}-webhooks",
            self.vpc,
            [net.master_cidr],
            [{"protocol": "tcp", "ports": WEBHOOK_PORTS}],
            child,
        )

    def _firewall(self, name, vpc, sources, allows, child) -> None:
        gcp.compute.Firewall(
            name,
            name=name,
            project=self.cluster.project,
            network=vpc.id,
            direction="INGRESS",
            source_ranges=sources,
            allows=allows,
            opts=child,
        )

    def _nic(self, nic: derive.NicNetwork, child: pulumi.ResourceOptions) -> None:
        """One GPU NIC subnet, creating its VPC on first use (RDMA NICs share one VPC)."""
        project = self.cluster.project
        vpc = self.nic_vpcs.get(nic.vpc)
        if vpc is None:
            profile = None
            if nic.zone:
                profile = f"projects/{project}/global/networkProfiles/{nic.zone}-vpc-roce"
            vpc = gcp.compute.Network(
                nic.vpc,
                name=nic.vpc,
                project=project,
                auto_create_subnetworks=False,
                routing_mode="REGIONAL",
                mtu=nic.mtu,
                network_profile=profile,
                opts=child,
            )
            if nic.device_mode != "RDMA":  # RoCE VPCs take no firewall rules
                net = self.cluster.network
                self._firewall(f"{nic.vpc}-internal", vpc, [net.gpu_cidr], ALL_TRAFFIC, child)
        self.nic_vpcs[nic.vpc] = vpc
        self.nic_subnets[nic.name] = gcp.compute.Subnetwork(
            nic.subnet,
            name=nic.subnet,
            project=project,
            region=self.cluster.region,
            network=vpc.id,
            ip_cidr_range=nic.cidr,
            private_ip_google_access=True,
            opts=child,
        )
