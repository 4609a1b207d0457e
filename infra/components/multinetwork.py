"""The MultiNetwork component: one GKENetworkParamSet and one Network object per GPU NIC.

Pods attach the GPU NICs by naming these `Network` objects in their
`networking.gke.io/interfaces` annotation (the names come from the accelerator catalog, the
same list `runner` renders). RDMA NICs take `deviceMode: RDMA`, the others `NetDevice`.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from catalog import Cluster
from infra import derive
from infra.components import TYPE_PREFIX

API_VERSION = "networking.gke.io/v1"


class MultiNetwork(pulumi.ComponentResource):
    """The Kubernetes side of GKE multi-networking for a cluster's GPU NICs."""

    def __init__(
        self,
        spec: Cluster,
        provider: k8s.Provider,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(f"{TYPE_PREFIX}:MultiNetwork", spec.name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on)
        self.networks: dict[str, k8s.apiextensions.CustomResource] = {}
        for nic in derive.nic_networks(spec):
            params = k8s.apiextensions.CustomResource(
                f"{spec.name}-paramset-{nic.name}",
                api_version=API_VERSION,
                kind="GKENetworkParamSet",
                metadata={"name": nic.name},
                spec={"vpc": nic.vpc, "vpcSubnet": nic.subnet, "deviceMode": nic.device_mode},
                opts=child,
            )
            self.networks[nic.name] = k8s.apiextensions.CustomResource(
                f"{spec.name}-network-{nic.name}",
                api_version=API_VERSION,
                kind="Network",
                metadata={"name": nic.name},
                spec={
                    "parametersRef": {
                        "group": "networking.gke.io",
                        "kind": "GKENetworkParamSet",
                        "name": nic.name,
                    },
                    "type": "Device",
                },
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=[params])
                ),
            )
        self.register_outputs({"networks": list(self.networks)})
