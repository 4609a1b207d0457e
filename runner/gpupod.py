"""GPU pod settings: the one place that turns an accelerator and a GPU count into what a pod
needs on a GPU node (placement, the GPU request, NICs, sidecars, NCCL env, host mounts).

Every GPU pod runner builds takes its settings from `gpu_settings`: RayJob and RayCluster
workers and Jobs (`runner.render`), node checks (`runner.nodecheck`) and dev Jobs
(`runner shell --dev`).

    from runner.gpupod import gpu_settings
    gpu = gpu_settings(accelerator("H200"), gpus=8, namespace="research")
    gpu.annotations  # networking.gke.io/interfaces: eth0 default, eth1 gvnic-1, eth2.. rdma-N

The whole-node rule: only a pod that takes every GPU of its node gets the GPUDirect NICs
(the `networking.gke.io` interface annotations, the TCPXO receive daemon and its device
annotation, the catalog's NCCL environment and the NCCL plugin mounts). Google's GPUDirect
guides require a workload that uses them to hold all GPUs and all GPU NICs of the node; a
partial pod holding them would block the node. A partial-node pod gets the default network
(eth0) and NCCL's socket transport (`SOCKET_NCCL_ENV`), plus the driver libraries. Runs of
more than one pod take whole nodes (`runner.resolve` refuses the rest).

A sidecar gets the capabilities the catalog lists for it (the TCPXO receive daemon:
NET_ADMIN, NET_BIND_SERVICE; every other one is dropped, `runner.podcontext`), and every
host path is mounted read-only, but for a sidecar mount the catalog marks `writable` (with
its reason; kustomize.tooling.security reads the same field to validate `apps/`).

With the catalog's `nccl_inspector`, every GPU container loads NCCL Inspector
(`NCCL_PROFILER_PLUGIN`, `NCCL_INSPECTOR_*`) and writes its dumps to the catalog's host
folder through a DirectoryOrCreate hostPath mounted with subPathExpr
`$(POD_NAMESPACE)/$(POD_NAME)` (downward API env): each pod writes only its own folder, the
one writable host mount a run pod has (kustomize.tooling.security allows exactly that).

Every GPU pod also tolerates its namespace's kept-nodes taint and prefers nodes kept for
its namespace (`runner.keepnodes`), so a relaunch lands on the nodes a finished RayJob kept.

Every training pod (role head, worker or job; `runner.podcontext.pod_context` adds
`warden_access`) can reach Warden's gateway (docs/warden.md, "The gateway"): `WARDEN_URL`, a
projected service-account token of audience `warden` (`WARDEN_TOKEN_FILE`, ten minutes,
rotated by the kubelet) and `POD_NAMESPACE`; Ray pods also `RAY_CLUSTER` (KubeRay's
`ray.io/cluster` label: the RayCluster's name, which for a RayJob KubeRay picks) and
`RAY_WORKER_GROUP` (the run's worker group, written by the template next to `groupName`).
Every run gets them, fault tolerance on or not: the runner cannot see the driver's composed
config, and the token grants nothing the namespace's own pods could not already ask for
(docs/security.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog import labels
from runner import keepnodes

if TYPE_CHECKING:
    from catalog.schema import Accelerator

GPU_RESOURCE = "nvidia.com/gpu"
# GKE multi-network and device annotations (docs: reference/gke-a3.md, section 3).
GKE_DEFAULT_INTERFACE = "networking.gke.io/default-interface"
GKE_INTERFACES = "networking.gke.io/interfaces"
GKE_DEVICES = "devices.gke.io/container.{name}"
TCPXO_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dmabuf_import_helper")
# NCCL on the default network: sockets over eth0, no GPUDirect plugin.
SOCKET_NCCL_ENV = {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "eth0"}
# Warden's gateway (kustomize/bases/warden/gateway.yaml; its audience is the Deployment's
# WARDEN_GATEWAY_AUDIENCE) and the projected token training pods present to it.
WARDEN_URL = "http://warden-gateway.warden.svc:8080"
WARDEN_TOKEN = {"volume": "warden-token", "audience": "warden", "seconds": 600,
                "dir": "/var/run/secrets/warden", "file": "token"}  # fmt: skip
TRAINING_ROLES = ("head", "worker", "job")
RAY_ROLES = ("head", "worker")


@dataclass(frozen=True)
class GpuSettings:
    """What a pod on `gpus` GPUs of an accelerator's node needs; plain data for templates."""

    whole_node: bool
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    node_affinity: list[dict[str, Any]]
    resources: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    field_env: dict[str, str] = field(default_factory=dict)
    mounts: list[dict[str, str]] = field(default_factory=list)
    host_volumes: list[dict[str, str]] = field(default_factory=list)
    sidecars: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Fill a pod context (`pod_context`) with these settings: the GPU request joins its
        CPU and memory; its env joins the pod's; placement, NICs, mounts and sidecars replace
        the defaults."""
        pod["resources"] = {**pod["resources"], **self.resources}
        pod.update(
            node_selector=dict(self.node_selector),
            tolerations=list(self.tolerations),
            node_affinity=list(self.node_affinity),
            annotations={**pod["annotations"], **self.annotations},
            env={**pod["env"], **self.env},
            field_env={**pod["field_env"], **self.field_env},
            mounts=list(self.mounts),
            host_volumes=list(self.host_volumes),
            sidecars=list(self.sidecars),
        )
        return pod


def warden_access(role: str | None) -> dict[str, Any]:
    """What a pod of `role` needs to reach Warden's gateway (pod context keys; nothing for
    roles other than TRAINING_ROLES)."""
    if role not in TRAINING_ROLES:
        return {}
    field_env = {labels.POD_NAMESPACE_ENV: "metadata.namespace"}
    if role in RAY_ROLES:
        field_env["RAY_CLUSTER"] = "metadata.labels['ray.io/cluster']"
    token_file = f"{WARDEN_TOKEN['dir']}/{WARDEN_TOKEN['file']}"
    return {
        "field_env": field_env,
        "env": {"WARDEN_URL": WARDEN_URL, "WARDEN_TOKEN_FILE": token_file},
        "warden_token": dict(WARDEN_TOKEN),
    }


def _sidecar(values: dict[str, Any]) -> dict[str, Any]:
    """A sidecar's template values: each mount read-only unless the catalog marks it
    `writable`."""
    mounts = [{**m, "read_only": not m.get("writable")} for m in values["mounts"]]
    return {**values, "mounts": mounts}


def needs_nics(accel: Accelerator, mount) -> bool:
    """A host mount only whole-node pods get: a GPUDirect NCCL plugin or its devices.

    The catalog may say so per mount (`needs_nics`); otherwise the mount holding the driver
    libraries (`library_path`) is the one every GPU pod gets, and the rest serve the NICs.
    """
    flag = getattr(mount, "needs_nics", None)
    if flag is not None:
        return bool(flag)
    root = mount.mount_path.rstrip("/") + "/"
    return not (accel.library_path + "/").startswith(root)


def _nic_annotations(accel: Accelerator) -> dict[str, str]:
    annotations: dict[str, str] = {}
    if accel.network.transport != "none":
        annotations[GKE_DEFAULT_INTERFACE] = "eth0"
        annotations[GKE_INTERFACES] = json.dumps(accel.network.interfaces(), separators=(",", ":"))
    for sidecar in accel.sidecars:
        if sidecar.device_annotation:
            paths = [f"/dev/nvidia{i}" for i in range(accel.gpus_per_node)] + list(TCPXO_DEVICES)
            annotations[GKE_DEVICES.format(name=sidecar.name)] = "".join(
                f"- path: {p}\n" for p in paths
            )
    return annotations


def _placement(
    accel: Accelerator, resource_group: str | None, preemptible: bool, namespace: str | None
) -> tuple[dict, list, list]:
    selector = {labels.GKE_ACCELERATOR: accel.gke_accelerator, labels.POOL_ROLE: "gpu"}
    if resource_group:
        selector[labels.RESOURCE_GROUP] = resource_group
    tolerations = [dict(labels.GPU_TAINT)] + ([dict(labels.SPOT_TAINT)] if preemptible else [])
    affinity: list[dict[str, Any]] = []
    if namespace:
        tolerations.append(keepnodes.toleration(namespace))
        affinity.append(keepnodes.preference(namespace))
    return selector, tolerations, affinity


def inspector(accel: Accelerator) -> tuple[dict, dict, list, list]:
    """NCCL Inspector's env, downward-API env, container mount and host volume (empty when
    the catalog has no `nccl_inspector` for the accelerator)."""
    spec = accel.nccl_inspector
    if spec is None:
        return {}, {}, [], []
    env = {
        "NCCL_PROFILER_PLUGIN": spec.plugin,
        "NCCL_INSPECTOR_ENABLE": "1",
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": str(spec.dump_interval_us),
        "NCCL_INSPECTOR_DUMP_DIR": spec.host_path,
    }
    field_env = {labels.POD_NAMESPACE_ENV: "metadata.namespace",
                 labels.POD_NAME_ENV: "metadata.name"}  # fmt: skip
    mount = {"name": labels.INSPECTOR_VOLUME, "host_path": spec.host_path,
             "mount_path": spec.host_path, "sub_path_expr": labels.INSPECTOR_SUB_PATH}  # fmt: skip
    volume = {"name": labels.INSPECTOR_VOLUME, "host_path": spec.host_path,
              "type": "DirectoryOrCreate"}  # fmt: skip
    return env, field_env, [mount], [volume]


def gpu_settings(
    accel: Accelerator,
    gpus: int,
    *,
    namespace: str | None = None,
    resource_group: str | None = None,
    preemptible: bool = False,
    env_overrides: dict[str, str] | None = None,
) -> GpuSettings:
    """The settings of a pod on `gpus` GPUs of an `accel` node.

    `namespace` adds the kept-nodes toleration and preference of that team; `env_overrides`
    (the run's env values) replace catalog values of the same name.
    """
    whole = gpus == accel.gpus_per_node
    selector, tolerations, affinity = _placement(accel, resource_group, preemptible, namespace)
    mounts = [m for m in accel.mounts if whole or not needs_nics(accel, m)]
    sidecars = list(accel.sidecars) if whole else []
    nccl = dict(sorted(accel.nccl_env.items())) if whole else dict(SOCKET_NCCL_ENV)
    env = {**nccl, "LD_LIBRARY_PATH": accel.library_path}
    env |= {k: v for k, v in (env_overrides or {}).items() if k in env}
    volumes: dict[str, dict] = {}
    for mount in [*mounts, *(m for s in sidecars for m in s.mounts)]:
        volumes.setdefault(mount.name, mount.model_dump())
    sidecar_values = [_sidecar(s.model_dump()) for s in sidecars]
    inspector_env, field_env, inspector_mounts, inspector_volumes = inspector(accel)
    return GpuSettings(
        whole_node=whole,
        node_selector=selector,
        tolerations=tolerations,
        node_affinity=affinity,
        resources={GPU_RESOURCE: str(gpus)},
        annotations=_nic_annotations(accel) if whole else {},
        env={**env, **inspector_env},
        field_env=field_env,
        mounts=[m.model_dump() for m in mounts] + inspector_mounts,
        host_volumes=list(volumes.values()) + inspector_volumes,
        sidecars=sidecar_values,
    )
