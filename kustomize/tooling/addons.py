"""GPU node add-ons: every host path and device annotation a GPU pod relies on is provided.

A GPU pod mounts host folders (`catalog/accelerators.yaml` `mounts`, sidecar `mounts`) that
only Google's installer DaemonSets create, and its TCPXO sidecar's `devices.gke.io`
annotation works only with the NRI device injector. Each vendored add-on says what it
creates in the annotation `platform.reve.dev/provides`; this check takes the objects of a
cluster's `overlays/<cluster>-node-addons` build and reports, per accelerator of the
cluster, what nothing provides on that accelerator's nodes.
"""

from __future__ import annotations

from catalog import Accelerator, Cluster, accelerator

PROVIDES = "platform.reve.dev/provides"
DEVICE_ANNOTATION = "devices.gke.io"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
# Host folders GKE itself makes on every GPU node (the driver installer) or the kernel has.
GKE_PROVIDED = {"/home/kubernetes/bin/nvidia", "/sys", "/proc/sys"}


def needs(acc: Accelerator) -> list[str]:
    """What a GPU pod on `acc` relies on: host paths beyond GKE's own, and the annotation."""
    paths = [m.host_path for m in acc.mounts]
    paths += [m.host_path for s in acc.sidecars for m in s.mounts]
    wanted = list(dict.fromkeys(p for p in paths if p not in GKE_PROVIDED))
    if any(s.device_annotation for s in acc.sidecars):
        wanted.append(DEVICE_ANNOTATION)
    return wanted


def runs_on(daemonset: dict, gke_accelerator: str) -> bool:
    """True when the DaemonSet's required node affinity admits the accelerator's nodes."""
    spec = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    required = (
        (spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        selector = spec.get("nodeSelector") or {}
        return selector.get(ACCELERATOR_LABEL, gke_accelerator) == gke_accelerator
    for term in required.get("nodeSelectorTerms", []):
        exprs = [e for e in term.get("matchExpressions", []) if e.get("key") == ACCELERATOR_LABEL]
        if all(e.get("operator") == "In" and gke_accelerator in e.get("values", []) for e in exprs):
            return True
    return False


def provided(objects: list[dict], gke_accelerator: str) -> set[str]:
    """What the DaemonSets among `objects` provide on nodes of one accelerator."""
    out: set[str] = set()
    for obj in objects:
        if obj.get("kind") != "DaemonSet" or not runs_on(obj, gke_accelerator):
            continue
        value = obj.get("metadata", {}).get("annotations", {}).get(PROVIDES, "")
        out |= {item.strip() for item in value.split(",") if item.strip()}
    return out


def problems(cluster: Cluster, objects: list[dict]) -> list[str]:
    """One line per need of an accelerator of `cluster` that no add-on provides."""
    found = []
    for key in cluster.accelerators():
        acc = accelerator(key)
        have = provided(objects, acc.gke_accelerator)
        for need in needs(acc):
            if not any(need == p or need.startswith(p.rstrip("/") + "/") for p in have):
                found.append(
                    f"{key}: nothing provides {need} on {acc.gke_accelerator} nodes "
                    f"(catalog node_addons: {', '.join(acc.node_addons) or 'none'})"
                )
    return found
