"""The Cluster component: the GKE control plane and a Kubernetes provider that talks to it.

Private nodes, release channel, Workload Identity, Dataplane V2 (ADVANCED_DATAPATH) with
multi-networking for the GPU NICs, the GCS FUSE CSI driver, Google Cloud Managed Service for
Prometheus with DCGM GPU metrics, and a weekend maintenance window. The default node pool is
removed; node pools are declared by `infra.components.nodepools`.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from catalog import Cluster as ClusterSpec
from infra import derive
from infra.components import TYPE_PREFIX
from infra.components.network import PODS_RANGE, SERVICES_RANGE, Network
from infra.settings import Settings

# Weekly maintenance: Saturday and Sunday 02:00-08:00 UTC (the dates only anchor the times).
MAINTENANCE = {
    "start_time": "2026-01-03T02:00:00Z",
    "end_time": "2026-01-03T08:00:00Z",
    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
}
MONITORED = ["SYSTEM_COMPONENTS", "DCGM"]
LOGGED = ["SYSTEM_COMPONENTS", "WORKLOADS"]


class Cluster(pulumi.ComponentResource):
    """A GKE cluster built from the catalog; `provider` reaches its Kubernetes API."""

    def __init__(
        self,
        spec: ClusterSpec,
        network: Network,
        settings: Settings,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(f"{TYPE_PREFIX}:Cluster", spec.name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.gke = gcp.container.Cluster(
            spec.name,
            name=spec.name,
            project=spec.project,
            location=spec.region,
            node_locations=spec.zones,
            network=network.vpc.id,
            subnetwork=network.subnet.id,
            initial_node_count=1,
            remove_default_node_pool=True,
            deletion_protection=True,
            min_master_version=spec.min_master_version,
            release_channel={"channel": spec.release_channel},
            ip_allocation_policy={
                "cluster_secondary_range_name": PODS_RANGE,
                "services_secondary_range_name": SERVICES_RANGE,
            },
            private_cluster_config={
                "enable_private_nodes": True,
                "enable_private_endpoint": False,
                "master_ipv4_cidr_block": spec.network.master_cidr,
                "master_global_access_config": {"enabled": True},
            },
            master_authorized_networks_config={
                "cidr_blocks": [
                    {"cidr_block": c, "display_name": f"admin-{i}"}
                    for i, c in enumerate(settings.admin_cidrs)
                ],
                "gcp_public_cidrs_access_enabled": False,
            },
            workload_identity_config={"workload_pool": derive.workload_pool(spec)},
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=True,
            enable_shielded_nodes=True,
            addons_config={
                "gcs_fuse_csi_driver_config": {"enabled": True},
                "gce_persistent_disk_csi_driver_config": {"enabled": True},
            },
            monitoring_config={
                "enable_components": MONITORED,
                "managed_prometheus": {"enabled": True},
            },
            logging_config={"enable_components": LOGGED},
            maintenance_policy={"recurring_window": MAINTENANCE},
            opts=child,
        )
        self.endpoint = self.gke.endpoint
        self.provider = k8s.Provider(
            spec.name,
            kubeconfig=pulumi.Output.all(
                self.gke.endpoint, self.gke.master_auth.cluster_ca_certificate
            ).apply(lambda args: kubeconfig(spec.name, args[0], args[1])),
            enable_server_side_apply=True,
            opts=child,
        )
        self.register_outputs({"endpoint": self.endpoint})


def kubeconfig(name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with gke-gcloud-auth-plugin (no static credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate,
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "gke-gcloud-auth-plugin",
                        "provideClusterInfo": True,
                        "installHint": "gcloud components install gke-gcloud-auth-plugin",
                    }
                },
            }
        ],
    }
    return json.dumps(config)
