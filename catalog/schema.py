"""Typed schemas of the catalogs: accelerators (one entry per GPU model) and clusters.

Every model rejects unknown keys, so a typo in a YAML file is an error, not a silent default.
The YAML data lives in `catalog/accelerators.yaml` and `clusters/<name>/cluster.yaml`;
`catalog.loader` reads them and turns validation errors into one-line messages.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from catalog.quantity import parse_bytes, parse_cpu

DNS_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
# Namespaces of the platform itself and of GKE: a team may not take one of these names,
# or its runs would land among the platform's components (and inherit their access).
RESERVED_NAMESPACES = frozenset({
    "argocd", "default", "gmp-public", "gmp-system", "image-cache", "kube-node-lease",
    "kube-public", "kube-system", "kuberay-system", "kueue-system", "observability",
    "platform-secrets", "warden",
})  # fmt: skip


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- accelerators -------------------------------------------------------------------------


class HostMount(Strict):
    """A host directory mounted into every GPU container (driver libraries, NCCL plugin)."""

    name: str = Field(pattern=DNS_LABEL, description="volume name in the pod")
    host_path: str = Field(description="directory on the node")
    mount_path: str = Field(description="directory inside the container")
    writable: str = Field(
        default="", description="why the container writes here; empty: mounted read-only"
    )


class NcclInspector(Strict):
    """NCCL Inspector (NCCL's profiler plugin) on the GPU containers: where its library is and
    how often it dumps. Its dump folder is the one host folder a run pod may write: each pod
    writes only its own `<host_path>/<namespace>/<pod>` (a subPathExpr), which the platform's
    Fluent Bit ships (kustomize/bases/observability/fluent-bit)."""

    plugin: str = Field(description="path of libnccl-profiler-inspector.so in the trainer image")
    dump_interval_us: int = Field(default=1_000_000, gt=0, description="dump thread interval")
    host_path: str = Field(default="/var/lib/nccl-inspector", description="dump folder on the "
                           "node (and inside the container)")  # fmt: skip
    writable: str = Field(min_length=1, description="why run pods write this host folder")


class Sidecar(Strict):
    """A container that runs beside the training container (e.g. the TCPXO receive daemon)."""

    name: str = Field(pattern=DNS_LABEL)
    image: str = Field(description="image pinned by tag or digest, as the vendor publishes it")
    command: list[str]
    capabilities: list[str] = Field(default_factory=list, description="added Linux capabilities")
    mounts: list[HostMount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    device_annotation: bool = Field(
        default=False, description="expose /dev/nvidia* to the sidecar through devices.gke.io"
    )


class GpuNetwork(Strict):
    """How pods reach the GPU NICs of a node."""

    transport: Literal["tcpxo", "rdma", "none"] = Field(
        description="GPUDirect-TCPXO (A3 Mega), RDMA over gIB (A3 Ultra) or plain TCP"
    )
    networks: list[str] = Field(
        description="GKE Network object names, in interface order eth1, eth2, ..."
    )
    device_mode: dict[str, Literal["NetDevice", "RDMA"]] = Field(
        description="GKENetworkParamSet deviceMode per network name"
    )
    mtu: int = Field(gt=0, description="MTU of the GPU NIC networks")
    nic_gbps: int = Field(gt=0, description="bandwidth of the GPU NICs per node, Gbit/s")

    @model_validator(mode="after")
    def _modes_cover_networks(self) -> GpuNetwork:
        missing = [n for n in self.networks if n not in self.device_mode]
        if missing:
            raise ValueError(f"device_mode lacks networks {missing}")
        return self

    def interfaces(self) -> list[dict[str, str]]:
        """The `networking.gke.io/interfaces` annotation: eth0 default, then eth1.. in order."""
        rows = [{"interfaceName": "eth0", "network": "default"}]
        rows += [{"interfaceName": f"eth{i}", "network": n} for i, n in enumerate(self.networks, 1)]
        return rows


class Expected(Strict):
    """Figures a healthy node reaches; preflight compares measurements against them."""

    matmul_tflops: float = Field(gt=0, description="dense bf16 matmul per GPU, sustained")
    allreduce_busbw_gbps: float = Field(gt=0, description="all-reduce bus bandwidth, GB/s")


GKE_VERSION = r"^1\.\d+\.\d+-gke\.\d+$"


def gke_version_key(version: str) -> tuple[int, ...]:
    """`1.32.11-gke.1174000` -> (1, 32, 11, 1174000), for ordering GKE versions."""
    core, _, build = version.partition("-gke.")
    return (*(int(p) for p in core.split(".")), int(build or 0))


class GkeVersionFloor(Strict):
    """The oldest GKE patch, per minor, on which the accelerator's GPU networking works."""

    by_minor: dict[str, str] = Field(
        description="minor (1.32) -> oldest patch (1.32.11-gke.1174000); a minor older than "
        "every key is refused, one newer needs nothing more"
    )
    source: str = Field(description="where the floors are published")

    @field_validator("by_minor")
    @classmethod
    def _patches(cls, value: dict[str, str]) -> dict[str, str]:
        for minor, patch in value.items():
            if not re.match(GKE_VERSION, patch) or not patch.startswith(minor + "."):
                raise ValueError(f"{minor}: {patch!r} is not a {minor}.N-gke.N version")
        return value

    def problem(self, minor: str, version: str | None) -> str | None:
        """Why a cluster at `minor` (and full `version`, if known) is below the floor."""
        minors = sorted(self.by_minor, key=lambda m: gke_version_key(m))
        if gke_version_key(minor) < gke_version_key(minors[0]):
            return f"{minor} is older than {minors[0]}, the oldest minor with GPUDirect support"
        floor = self.by_minor.get(minor)
        if floor is None:
            return None
        if version is None:
            return f"minor {minor} alone does not guarantee {floor}: set gke_version"
        if gke_version_key(version) < gke_version_key(floor):
            return f"{version} is below {floor}"
        return None


class Accelerator(Strict):
    """One GPU model as GKE offers it, and everything a pod on it needs."""

    name: str = Field(description="catalog key, as used on the command line (H100, H200)")
    description: str
    machine_type: str = Field(description="GCE machine type, e.g. a3-ultragpu-8g")
    gke_accelerator: str = Field(description="cloud.google.com/gke-accelerator label value")
    gpus_per_node: int = Field(gt=0)
    gpu_memory_gib: int = Field(gt=0)
    node_cpus: int = Field(gt=0, description="vCPUs of the machine type")
    node_memory_gib: int = Field(gt=0, description="memory of the machine type")
    allocatable_cpu: float = Field(gt=0, description="CPU a pod may request on one node")
    allocatable_memory: str = Field(description="memory a pod may request on one node")
    local_ssd_count: int = Field(ge=0)
    host_maintenance_interval: Literal["PERIODIC", "AS_NEEDED"] | None = Field(
        default=None,
        description="GCE host maintenance cadence of reserved node pools (A3 Mega: PERIODIC)",
    )
    default_shm: str = Field(description="/dev/shm size for a whole-node pod")
    network: GpuNetwork
    nccl_env: dict[str, str] = Field(description="NCCL environment every GPU container gets")
    library_path: str = Field(description="LD_LIBRARY_PATH inside GPU containers")
    mounts: list[HostMount] = Field(default_factory=list)
    sidecars: list[Sidecar] = Field(default_factory=list)
    nccl_inspector: NcclInspector | None = Field(
        default=None, description="NCCL Inspector on GPU containers (None: off)"
    )
    node_addons: list[str] = Field(
        default_factory=list,
        description="node DaemonSets a GPU node needs before any GPU pod runs "
        "(kustomize/bases/node-addons/<name>)",
    )
    gke_version_floor: GkeVersionFloor | None = Field(
        default=None, description="oldest GKE patch per minor for this accelerator"
    )
    expected: Expected

    @field_validator("allocatable_memory", "default_shm")
    @classmethod
    def _is_quantity(cls, value: str) -> str:
        parse_bytes(value)
        return value

    @property
    def allocatable_memory_bytes(self) -> int:
        return parse_bytes(self.allocatable_memory)


# --- clusters -------------------------------------------------------------------------------


class CpuPool(Strict):
    """The pool for Ray heads, sentinels and system pods."""

    name: str = Field(default="cpu", pattern=DNS_LABEL)
    machine_type: str
    min_nodes: int = Field(ge=0)
    max_nodes: int = Field(gt=0)
    allocatable_cpu: float = Field(gt=0, description="CPU a pod may request on one node")
    allocatable_memory: str = Field(description="memory a pod may request on one node")

    @field_validator("allocatable_memory")
    @classmethod
    def _is_quantity(cls, value: str) -> str:
        parse_bytes(value)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> CpuPool:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} exceeds max_nodes {self.max_nodes}")
        return self


class FutureReservation(Strict):
    """A future reservation the GPU pool consumes once Google delivers it."""

    start_time: datetime
    end_time: datetime
    auto_delete: bool = Field(default=False, description="delete auto-created reservations at end")
    delivered: bool = Field(
        default=False,
        description="Google has delivered the capacity: until then the pool holds 0 nodes",
    )

    @model_validator(mode="after")
    def _window(self) -> FutureReservation:
        if self.end_time <= self.start_time:
            raise ValueError("end_time must be after start_time")
        return self


class Reservation(Strict):
    """A specific reservation (`SPECIFIC_RESERVATION` affinity) in this cluster's project."""

    name: str = Field(pattern=DNS_LABEL)
    project: str | None = Field(default=None, description="owner project if shared across")
    block: str | None = Field(default=None, description="reservation block to target")
    future: FutureReservation | None = Field(
        default=None, description="create it as a future reservation with this window"
    )


class GpuPool(Strict):
    """A pool of identical GPU nodes bound to one reservation."""

    name: str = Field(pattern=DNS_LABEL)
    accelerator: str = Field(description="accelerator catalog key (H100, H200)")
    nodes: int = Field(gt=0)
    zone: str
    reservation: Reservation | None = Field(default=None, description="required unless spot: true")
    placement: Literal["compact", "none"] = "compact"
    spot: bool = False
    resource_group: str = Field(
        default="default", pattern=DNS_LABEL, description="node label runs may select on"
    )

    @model_validator(mode="after")
    def _reservation_or_spot(self) -> GpuPool:
        if self.reservation is None and not self.spot:
            raise ValueError("reservation: required for a non-spot GPU pool")
        if self.reservation is not None and self.spot:
            raise ValueError("reservation: a spot pool cannot consume a reservation")
        return self


class Network(Strict):
    """Address plan of the cluster VPC; GPU NIC ranges are carved from gpu_cidr."""

    primary_cidr: str
    pods_cidr: str
    services_cidr: str
    master_cidr: str = Field(description="/28 for the private control plane")
    gpu_cidr: str = Field(description="range split into one subnet per GPU NIC network")

    @field_validator("primary_cidr", "pods_cidr", "services_cidr", "master_cidr", "gpu_cidr")
    @classmethod
    def _is_cidr(cls, value: str) -> str:
        ipaddress.ip_network(value)
        return value

    @model_validator(mode="after")
    def _disjoint(self) -> Network:
        named = {
            k: ipaddress.ip_network(getattr(self, k))
            for k in ("primary_cidr", "pods_cidr", "services_cidr", "master_cidr", "gpu_cidr")
        }
        keys = list(named)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                if named[a].overlaps(named[b]):
                    raise ValueError(f"{a} {named[a]} overlaps {b} {named[b]}")
        return self


class CrossRegion(Strict):
    """Teams allowed DiLoCo experiments whose synchronizer runs in this cluster and whose
    learners run in `peers` (docs/diloco.md). Off unless listed: the generated team objects
    then hold a quota of internal load balancers and a NetworkPolicy admitting `port` from
    the peers' pod ranges to the team's synchronizer pods only."""

    teams: list[str] = Field(min_length=1, description="teams of this cluster opted in")
    peers: list[str] = Field(min_length=1, description="clusters whose learners dial in")
    port: int = Field(default=5555, ge=1024, le=65535, description="the synchronizers' port")
    load_balancers: int = Field(default=2, ge=1, le=20, description="per team (one a run)")

    @field_validator("teams", "peers")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not re.match(DNS_LABEL, name):
                raise ValueError(f"[{i}]: {name!r} is not a DNS label")
            if name in value[:i]:
                raise ValueError(f"[{i}]: {name!r} is listed twice")
        return value


class Buckets(Strict):
    checkpoints: str = Field(description="GCS bucket for checkpoints: <bucket>/<team>/<run>/")
    bundles: str = Field(description="GCS bucket for run bundles and crash bundles")


class Registry(Strict):
    location: str = Field(description="Artifact Registry location, e.g. us")
    repository: str = Field(pattern=DNS_LABEL)


class Cluster(Strict):
    """One GKE cluster: the single source of truth infra, runner and kustomize read."""

    name: str = Field(pattern=DNS_LABEL, description="must equal its folder under clusters/")
    project: str = Field(description="GCP project id")
    region: str
    zones: list[str] = Field(min_length=1)
    kubernetes_version: str = Field(pattern=r"^1\.\d+$", description="minor version, e.g. 1.33")
    gke_version: str | None = Field(
        default=None,
        pattern=GKE_VERSION,
        description="GKE patch the control plane runs at least (min_master_version), "
        "e.g. 1.32.11-gke.1174000; its minor must be kubernetes_version",
    )
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = "REGULAR"
    network: Network
    cpu_pool: CpuPool
    gpu_pools: list[GpuPool] = Field(min_length=1)
    buckets: Buckets
    registry: Registry
    teams: list[str] = Field(min_length=1, description="team namespaces runs may target")
    cross_region: CrossRegion | None = Field(
        default=None, description="teams opted in to cross-cluster DiLoCo synchronizers here"
    )

    @field_validator("teams")
    @classmethod
    def _team_names(cls, value: list[str]) -> list[str]:
        for i, team in enumerate(value):
            if not re.match(DNS_LABEL, team):
                raise ValueError(f"[{i}]: {team!r} is not a namespace name (a DNS label)")
            if team in RESERVED_NAMESPACES:
                raise ValueError(f"[{i}]: {team!r} is a namespace of the platform")
            if team in value[:i]:
                raise ValueError(f"[{i}]: {team!r} is listed twice")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Cluster:
        if self.gke_version and not self.gke_version.startswith(self.kubernetes_version + "."):
            raise ValueError(
                f"gke_version: {self.gke_version} is not a {self.kubernetes_version} version"
            )
        cross = self.cross_region
        for i, team in enumerate(cross.teams if cross else []):
            if team not in self.teams:
                raise ValueError(f"cross_region.teams[{i}]: {team!r} is not one of teams")
        if cross and self.name in cross.peers:
            raise ValueError(f"cross_region.peers: {self.name!r} is this cluster")
        names = [p.name for p in self.gpu_pools]
        if len(set(names)) != len(names):
            raise ValueError(f"gpu_pools: pool names repeat: {names}")
        for i, pool in enumerate(self.gpu_pools):
            if pool.zone not in self.zones:
                raise ValueError(f"gpu_pools[{i}].zone: {pool.zone} is not one of zones")
            if not pool.zone.startswith(self.region + "-"):
                raise ValueError(f"gpu_pools[{i}].zone: {pool.zone} is not in {self.region}")
        return self

    @property
    def registry_url(self) -> str:
        """Docker URL of the cluster's Artifact Registry repository."""
        return f"{self.registry.location}-docker.pkg.dev/{self.project}/{self.registry.repository}"

    def accelerators(self) -> list[str]:
        """Accelerator keys this cluster has pools for, in pool order, without repeats."""
        return list(dict.fromkeys(p.accelerator for p in self.gpu_pools))

    def pools_for(self, accelerator: str) -> list[GpuPool]:
        return [p for p in self.gpu_pools if p.accelerator == accelerator]

    @property
    def min_master_version(self) -> str:
        """The version infra asks GKE for: the patch when given, else the minor."""
        return self.gke_version or self.kubernetes_version

    def awaiting_delivery(self) -> list[str]:
        """Pools bound to a future reservation that Google has not delivered yet."""
        return [
            p.name
            for p in self.gpu_pools
            if p.reservation and p.reservation.future and not p.reservation.future.delivered
        ]


__all__ = [
    "Accelerator",
    "Cluster",
    "CpuPool",
    "GpuPool",
    "parse_cpu",
]
