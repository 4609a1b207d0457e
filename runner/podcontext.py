"""The pod context: the one set of keys `_pod.yaml.j2` reads for every pod runner builds.

RayJob and RayCluster pods and Jobs (`runner.render`), node checks (`runner.nodecheck`) and
dev Jobs (`runner shell --dev`) all start from `pod_context`: the values a builder gives
over `POD_DEFAULTS`, and Warden's gateway access for a training pod
(`runner.gpupod.warden_access`). A GPU pod's settings then fill it
(`runner.gpupod.GpuSettings.apply`).

    from runner.podcontext import pod_context
    pod = pod_context(labels=tags, container="dev", image=image, resources=res, shm="2Gi")

Every container of every pod gets a securityContext (`_pod.yaml.j2`): no privilege
escalation, every capability dropped except those the catalog lists for a sidecar or a pod
asks for (`capabilities`: the node check's SYSLOG), and a non-root user where
`run_as_user` is set (`NOBODY` for containers that only wait).
"""

from __future__ import annotations

from typing import Any

from catalog import labels
from runner.gpupod import warden_access

# A non-root user for containers that only wait (the sentinel): `nobody`.
NOBODY = 65534

POD_DEFAULTS: dict[str, Any] = {
    "annotations": {},
    "restart_policy": None,
    "priority_class": None,
    "service_account": None,
    "node_name": None,
    "node_selector": {},
    "tolerations": [],
    "node_affinity": [],
    "avoid_nodes": [],
    "rack_topology": None,
    "sidecars": [],
    "command": None,
    "working_dir": None,
    "capabilities": [],
    "run_as_user": None,
    "field_env": {labels.NODE_NAME_ENV: "spec.nodeName"},
    "env": {},
    "secrets": {},
    "configmap": None,
    "mounts": [],
    "host_volumes": [],
    "warden_token": None,
    "termination_grace": None,
}


def pod_context(**values: Any) -> dict[str, Any]:
    """The keys `_pod.yaml.j2` reads: `values` over `POD_DEFAULTS`, and Warden's gateway
    access for a training pod (`warden_access`). Required: labels, container, image,
    resources, shm. Every pod runner renders goes through here."""
    missing = {"labels", "container", "image", "resources", "shm"} - values.keys()
    if missing:
        raise TypeError(f"pod_context lacks {sorted(missing)}")
    fresh = {k: v.copy() if isinstance(v, dict | list) else v for k, v in POD_DEFAULTS.items()}
    pod = {**fresh, **values}
    access = warden_access(pod["labels"].get(labels.ROLE))
    if access:
        pod["field_env"] = {**pod["field_env"], **access["field_env"]}
        pod["env"] = {**pod["env"], **access["env"]}
        pod["warden_token"] = access["warden_token"]
    return pod
