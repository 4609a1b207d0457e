"""Kubernetes objects as the fake cluster holds them: GKE A3 Ultra nodes and running pods."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from catalog import labels
from runner import keepnodes
from warden.kube import Object

ZONE_LABEL = "topology.kubernetes.io/zone"


def _stamp(seconds_ago: float = 0.0) -> str:
    moment = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_node(name: str, pool: str = "h200-main", zone: str = "us-central1-b") -> Object:
    """A healthy, schedulable A3 Ultra node as GKE registers it."""
    node_labels = {labels.GKE_ACCELERATOR: "nvidia-h200-141gb", labels.GKE_NODEPOOL: pool}
    node_labels |= {
        ZONE_LABEL: zone,
        "kubernetes.io/hostname": name,
        **labels.gpu_node_labels("pretrain"),
    }
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": _stamp(86400)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {},
            "uid": str(uuid.uuid4()),
            "resourceVersion": "1",
        },
        "spec": {},
        "status": {"conditions": [ready], "nodeInfo": {"bootID": str(uuid.uuid4())}},
    }


def make_pod(
    name: str, namespace: str, node: str, priority: str = labels.PRIORITY_DEFAULT,
    run: str | None = None, owner: tuple[str, str] | None = None, keep_s: int | None = None,
) -> Object:  # fmt: skip
    """A running pod; `run` sets the run label, `owner` a (kind, name) controller, `keep_s`
    the marks of a RayJob worker asking to keep its node that long (`keep_nodes`)."""
    meta: dict = {"name": name, "namespace": namespace, "labels": {}, "uid": str(uuid.uuid4())}
    if run:
        meta["labels"][labels.RUN] = run
    if keep_s:
        meta["labels"][keepnodes.POD_LABEL] = "true"
        meta["annotations"] = {keepnodes.POD_SECONDS: str(keep_s)}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    spec = {"nodeName": node, "priorityClassName": priority}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running"},
    }
