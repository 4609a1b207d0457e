"""Security checks of the platform's manifests: what validate enforces.

`scripts/validate` runs them on every built overlay and app-of-apps:
- every hostPath mount is read-only, and no container is privileged, unless HOST_PATH_WRITERS
  or PRIVILEGED name it with a reason;
- every team namespace has the NetworkPolicy `team-isolation` (ingress from its own pods
  and the platform's run-pod clients only) and no other policy but the cross-region
  synchronizer policy its cluster's `cross_region` opts it in to, as generated;
- the `runs` Application belongs to a project that admits exactly RUN_KINDS into team
  namespaces.
`run_pod_problems` checks a rendered run (`apps/`). What these rules are checked against is
built in `kustomize.tooling.security_objects` (the runs project, the secret-maker's list)
and `kustomize.tooling.objects` (the team policies).
"""

from __future__ import annotations

from catalog import labels as names
from catalog import load_cluster
from kustomize.tooling import objects
from kustomize.tooling.security_objects import RUN_KINDS, RUNS_PROJECT

Obj = dict
# (namespace, workload, volume or container) -> why it may write a host path / be privileged.
# Google's GPU node add-ons (kustomize/bases/node-addons, vendored) exist to change the
# host: they install NCCL plugins into host folders and inject devices.
_INSTALLS = "installs the NCCL plugin and its libraries onto the node (Google's add-on)"
_INJECTS = "NRI plugin that adds the TCPXO devices to pods (Google's add-on)"
HOST_PATH_WRITERS = {
    ("observability", "fluent-bit", "state"): "Fluent Bit's read positions and buffer "
    "(/var/lib/fluent-bit) must outlive the pod, or NCCL records are sent twice",
    ("kube-system", "nccl-tcpxo-installer", "var-lib"): _INSTALLS,
    ("kube-system", "nccl-tcpxo-installer", "library-dir-host"): _INSTALLS,
    ("kube-system", "nccl-rdma-installer", "library-dir-host"): _INSTALLS,
    ("kube-system", "nccl-rdma-installer", "gib"): _INSTALLS,
    ("kube-system", "device-injector", "dev"): _INJECTS,
    ("kube-system", "device-injector", "nri"): _INJECTS,
}
PRIVILEGED = {
    ("observability", "dcgm-exporter", "dcgm-exporter"): "DCGM reads every GPU of the node; "
    "GKE exposes GPU devices only to privileged containers or to pods that request them",
    ("kube-system", "nccl-tcpxo-installer", "pre-installation"): _INSTALLS,
    ("kube-system", "nccl-tcpxo-installer", "nccl-tcpxo-installer"): _INSTALLS,
    ("kube-system", "nccl-rdma-installer", "disable-log-martian"): _INSTALLS,
    ("kube-system", "nccl-rdma-installer", "nccl-rdma-installer"): _INSTALLS,
    ("kube-system", "device-injector", "device-injector"): _INJECTS,
}


# Runs: (container, host path) -> why that sidecar may write the host path.


def _workload(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def all_pod_specs(obj: Obj) -> list[Obj]:
    """Pod specs of a workload, KubeRay's head and worker group templates included."""
    from kustomize.tooling import checks

    spec = obj.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or (spec if obj.get("kind") == "RayCluster" else {})
    groups = [cluster.get("headGroupSpec") or {}, *(cluster.get("workerGroupSpecs") or [])]
    if spec.get("submitterPodTemplate"):
        groups.append({"template": spec["submitterPodTemplate"]})
    return checks.pod_specs(obj) + [g["template"]["spec"] for g in groups
                                    if g.get("template", {}).get("spec")]  # fmt: skip


def host_path_problems(obj: Obj) -> list[str]:
    """Writable hostPath mounts and privileged containers that no allow-list names.

    Runs (`apps/`) have no exceptions: their workload names are not platform ones."""
    found = []
    namespace, name = _workload(obj)
    for spec in all_pod_specs(obj):
        host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes") or []
                if "hostPath" in v}  # fmt: skip
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for m in c.get("volumeMounts") or []:
                volume = m.get("name")
                if volume in host and not m.get("readOnly"):
                    if (namespace, name, volume) not in HOST_PATH_WRITERS:
                        found.append(f"container {c.get('name')}: host path {host[volume]} "
                                     "is mounted writable (readOnly: true, or list it with a "
                                     "reason in security.HOST_PATH_WRITERS)")  # fmt: skip
            if (c.get("securityContext") or {}).get("privileged"):
                if (namespace, name, c.get("name")) not in PRIVILEGED:
                    found.append(f"container {c.get('name')}: privileged (drop it, or list it "
                                 "with a reason in security.PRIVILEGED)")  # fmt: skip
    return found


def team_policy_problems(built: list[Obj]) -> list[str]:
    """Every team namespace of a built overlay has the `team-isolation` NetworkPolicy, and
    no other but the cross-region synchronizer policy its cluster's catalog opts it in to."""
    teams = {o["metadata"]["name"]: o["metadata"]["labels"] for o in built
             if o.get("kind") == "Namespace"
             and names.TEAM in (o["metadata"].get("labels") or {})}  # fmt: skip
    policies = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
                for o in built if o.get("kind") == "NetworkPolicy"}  # fmt: skip
    found = []
    for team, team_labels in teams.items():
        expected = {objects.TEAM_POLICY: objects.team_network_policy(team)}
        if cluster := team_labels.get(names.CLUSTER):
            expected |= {
                p["metadata"]["name"]: p
                for p in objects.cross_region_objects(load_cluster(cluster), team)
            }
        if (team, objects.TEAM_POLICY) not in policies:
            found.append(f"Namespace {team}: no NetworkPolicy {objects.TEAM_POLICY}")
        for (namespace, name), policy in policies.items():
            if namespace != team:
                continue
            if name not in expected:
                found.append(f"NetworkPolicy {team}/{name}: not generated for a team namespace")
            elif policy.get("spec") != expected[name]["spec"]:
                found.append(f"NetworkPolicy {team}/{name}: spec differs from "
                             "kustomize.tooling.objects (team_objects)")  # fmt: skip
        if (team, objects.SYNC_POLICY) not in policies and objects.SYNC_POLICY in expected:
            found.append(f"Namespace {team}: no NetworkPolicy {objects.SYNC_POLICY}")
    return found


def runs_gate_problems(built: list[Obj]) -> list[str]:
    """In an app-of-apps: the `runs` Application uses the project RUN_KINDS-only project."""
    apps = [o for o in built if o.get("kind") == "Application"
            and o["metadata"]["name"] == RUNS_PROJECT]  # fmt: skip
    if not apps:
        return []
    project_name = apps[0]["spec"].get("project")
    projects = {o["metadata"]["name"]: o for o in built if o.get("kind") == "AppProject"}
    project = projects.get(project_name)
    if project is None:
        return [f"Application runs: project {project_name!r} is not in this app-of-apps"]
    spec = project["spec"]
    found = []
    if spec.get("clusterResourceWhitelist"):
        found.append(f"AppProject {project_name}: clusterResourceWhitelist must be empty")
    kinds = sorted((e.get("group", ""), e.get("kind", ""))
                   for e in spec.get("namespaceResourceWhitelist") or [])  # fmt: skip
    if kinds != sorted(RUN_KINDS) or spec.get("namespaceResourceBlacklist"):
        found.append(f"AppProject {project_name}: namespaceResourceWhitelist must be exactly "
                     f"{sorted(RUN_KINDS)}")  # fmt: skip
    if any(any(c in (d.get("namespace") or "*") for c in "*?[")
           for d in spec.get("destinations") or []):  # fmt: skip
        found.append(f"AppProject {project_name}: destinations must name team namespaces")
    return found


def inspector_write(volume: dict, mount: dict) -> bool:
    """A writable host mount allowed as NCCL Inspector's dump folder: a host folder the
    catalog declares (`nccl_inspector`, with its reason), DirectoryOrCreate, mounted with
    the per-pod subPathExpr (each pod writes only `<namespace>/<pod>` under it)."""
    from catalog import accelerators, labels

    folders = {a.nccl_inspector.host_path for a in accelerators().values()
               if a.nccl_inspector is not None and a.nccl_inspector.writable}  # fmt: skip
    host = volume.get("hostPath") or {}
    return (host.get("path") in folders and host.get("type") == "DirectoryOrCreate"
            and mount.get("subPathExpr") == labels.INSPECTOR_SUB_PATH)  # fmt: skip


def run_pod_problems(obj: Obj) -> list[str]:
    """A rendered run (`apps/`): host paths read-only (the catalog's `writable` sidecar
    mounts and NCCL Inspector's per-pod dump folder aside: `inspector_write`), nothing
    privileged, and every container with `allowPrivilegeEscalation: false`."""
    from catalog import sidecar_host_writes

    writers, found = sidecar_host_writes(), []
    for spec in all_pod_specs(obj):
        volumes = {v["name"]: v for v in spec.get("volumes") or [] if "hostPath" in v}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            name, context = c.get("name"), c.get("securityContext") or {}
            for m in c.get("volumeMounts") or []:
                volume = volumes.get(m.get("name"))
                if volume is None or m.get("readOnly") or inspector_write(volume, m):
                    continue
                path = volume["hostPath"]["path"]
                if (name, path) not in writers:
                    found.append(f"container {name}: host path {path} is mounted writable")
            if context.get("privileged"):
                found.append(f"container {name}: privileged")
            if context.get("allowPrivilegeEscalation") is not False:
                found.append(f"container {name}: securityContext.allowPrivilegeEscalation "
                             "must be false")  # fmt: skip
    return found
