"""The NodePools component: the CPU pool and one node pool per GPU pool of the catalog.

GPU pools: machine type and accelerators from the accelerator catalog with GKE-managed driver
installation, SPECIFIC_RESERVATION affinity (or spot with no reservation), a
`FutureReservation` where the cluster file says `future:` (infra/components/reservations.py),
PERIODIC host maintenance on A3 Mega, compact placement, auto-repair,
auto-upgrade one node at a time, the GPU (and spot) taints and labels from `catalog.labels`,
the extra GPU NICs, gVNIC, local SSDs and no public IPs.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster, GpuPool, accelerator
from catalog import labels as names
from infra import derive
from infra.components import TYPE_PREFIX
from infra.components.network import Network
from infra.components.reservations import future_reservation
from infra.settings import Settings

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
DRIVER_VERSION = "LATEST"
IMAGE_TYPE = "COS_CONTAINERD"
MAX_PODS_PER_GPU_NODE = 32
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
# Reserved capacity has no spare machines to surge into: replace one node at a time.
RESERVED_UPGRADE = {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}
ELASTIC_UPGRADE = {"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0}


class NodePools(pulumi.ComponentResource):
    """Every node pool of a cluster; `gpu` maps pool name to its NodePool."""

    def __init__(
        self,
        spec: Cluster,
        gke: gcp.container.Cluster,
        network: Network,
        node_sa_email: pulumi.Input[str],
        settings: Settings,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(f"{TYPE_PREFIX}:NodePools", spec.name, None, opts)
        self.spec, self.gke, self.network, self.settings = spec, gke, network, settings
        self.node_sa_email = node_sa_email
        self.cpu = self._cpu_pool()
        self.future: dict[str, gcp.compute.FutureReservation] = {}
        self.gpu = {pool.name: self._gpu_pool(pool) for pool in spec.gpu_pools}
        self.register_outputs({"pools": [spec.cpu_pool.name, *self.gpu]})

    def _base_node_config(self) -> dict:
        return {
            "image_type": IMAGE_TYPE,
            "service_account": self.node_sa_email,
            "oauth_scopes": SCOPES,
            "workload_metadata_config": {"mode": "GKE_METADATA"},
            "shielded_instance_config": {
                "enable_secure_boot": True,
                "enable_integrity_monitoring": True,
            },
            "gvnic": {"enabled": True},
        }

    def _cpu_pool(self) -> gcp.container.NodePool:
        pool = self.spec.cpu_pool
        return gcp.container.NodePool(
            f"{self.spec.name}-{pool.name}",
            name=pool.name,
            project=self.spec.project,
            location=self.spec.region,
            cluster=self.gke.name,
            node_locations=self.spec.zones,
            autoscaling={
                "total_min_node_count": pool.min_nodes,
                "total_max_node_count": pool.max_nodes,
                "location_policy": "BALANCED",
            },
            management={"auto_repair": True, "auto_upgrade": True},
            upgrade_settings=ELASTIC_UPGRADE,
            network_config={"enable_private_nodes": True},
            node_config={
                **self._base_node_config(),
                "machine_type": pool.machine_type,
                "labels": names.cpu_node_labels(),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _gpu_pool(self, pool: GpuPool) -> gcp.container.NodePool:
        acc = accelerator(pool.accelerator)
        depends = []
        if pool.reservation is not None and pool.reservation.future is not None:
            opts = pulumi.ResourceOptions(parent=self)
            self.future[pool.name] = future_reservation(self.spec, pool, opts)
            depends.append(self.future[pool.name])
        node_config = {
            **self._base_node_config(),
            "machine_type": acc.machine_type,
            "guest_accelerators": [
                {
                    "type": acc.gke_accelerator,
                    "count": acc.gpus_per_node,
                    "gpu_driver_installation_config": {"gpu_driver_version": DRIVER_VERSION},
                }
            ],
            "ephemeral_storage_local_ssd_config": {"local_ssd_count": acc.local_ssd_count},
            "labels": derive.pool_labels(pool),
            "taints": [derive.gke_taint(t) for t in derive.pool_taints(pool)],
            **self._capacity(pool),
        }
        interval = derive.host_maintenance_interval(pool)
        if interval:
            node_config["host_maintenance_policy"] = {"maintenance_interval": interval}
        waiting = derive.awaiting_delivery(self.spec, pool, self.settings.awaiting_delivery)
        return gcp.container.NodePool(
            f"{self.spec.name}-{pool.name}",
            name=pool.name,
            project=self.spec.project,
            location=self.spec.region,
            cluster=self.gke.name,
            node_locations=[pool.zone],
            max_pods_per_node=MAX_PODS_PER_GPU_NODE,
            placement_policy={"type": "COMPACT"} if pool.placement == "compact" else None,
            management={"auto_repair": True, "auto_upgrade": True},
            upgrade_settings=ELASTIC_UPGRADE if pool.spot else RESERVED_UPGRADE,
            network_config={
                "enable_private_nodes": True,
                "additional_node_network_configs": [
                    {"network": nic.vpc, "subnetwork": nic.subnet}
                    for nic in derive.pool_nic_networks(self.spec, pool)
                ],
            },
            node_config=node_config,
            **self._size(pool, waiting),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*depends, *self.network.nic_subnets.values()]
            ),
        )

    def _capacity(self, pool: GpuPool) -> dict:
        """Spot pools take spot VMs and no reservation; the rest their specific reservation."""
        if pool.spot:
            return {
                "spot": True,
                "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"},
            }
        return {
            "reservation_affinity": {
                "consume_reservation_type": "SPECIFIC_RESERVATION",
                "key": RESERVATION_KEY,
                "values": [derive.reservation_uri(self.spec, pool)],
            },
        }

    @staticmethod
    def _size(pool: GpuPool, waiting: bool) -> dict:
        """Reserved pools hold a fixed size (0 until delivery); spot pools scale from zero."""
        if pool.spot:
            return {
                "initial_node_count": 0,
                "autoscaling": {"total_min_node_count": 0, "total_max_node_count": pool.nodes},
            }
        return {"node_count": 0 if waiting else pool.nodes}
