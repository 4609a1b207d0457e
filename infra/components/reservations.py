"""A `gcp.compute.FutureReservation` for a GPU pool whose cluster file says `future:`.

The future reservation asks GCE for the pool's capacity in a time window; at delivery GCE
creates the reservation `reservation.name`, which the node pool consumes with
SPECIFIC_RESERVATION affinity. Its SKU (machine type, GPUs, local SSDs, maintenance
interval) is the node pool's, so the pool's VMs match what is reserved.
"""

from __future__ import annotations

from datetime import datetime

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster, GpuPool, accelerator
from infra import derive

LOCAL_SSD_GB = "375"


def future_reservation(
    spec: Cluster, pool: GpuPool, opts: pulumi.ResourceOptions
) -> gcp.compute.FutureReservation:
    """The future reservation behind `pool` (which must have `reservation.future`)."""
    res = pool.reservation
    if res is None or res.future is None:
        raise ValueError(f"pool {pool.name} has no future reservation")
    return gcp.compute.FutureReservation(
        f"{spec.name}-{res.name}",
        name=f"{res.name}-future",
        project=res.project or spec.project,
        zone=pool.zone,
        reservation_name=res.name,
        planning_status="SUBMITTED",
        specific_reservation_required=True,
        auto_delete_auto_created_reservations=res.future.auto_delete,
        deployment_type="DENSE" if pool.placement == "compact" else "FLEXIBLE",
        time_window={
            "start_time": rfc3339(res.future.start_time),
            "end_time": rfc3339(res.future.end_time),
        },
        specific_sku_properties={
            "total_count": str(pool.nodes),
            "instance_properties": instance_properties(pool),
        },
        opts=opts,
    )


def instance_properties(pool: GpuPool) -> dict:
    acc = accelerator(pool.accelerator)
    props = {
        "machine_type": acc.machine_type,
        "guest_accelerators": [
            {"accelerator_type": acc.gke_accelerator, "accelerator_count": acc.gpus_per_node}
        ],
        "local_ssds": [
            {"disk_size_gb": LOCAL_SSD_GB, "interface": "NVME"} for _ in range(acc.local_ssd_count)
        ],
    }
    interval = derive.host_maintenance_interval(pool)
    if interval:
        props["maintenance_interval"] = interval
    return props


def rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
