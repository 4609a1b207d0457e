"""The Jobs Warden runs on a node: the preflight node check and the DCGM diag stress test.

Both are batch/v1 Jobs pinned to one node, named per remediation (so a retried activity finds
the Job it created instead of starting another) and labelled with the node and kind. The
Job's success or failure is the verdict. The node check manifest comes from
`runner.nodecheck.check_job` (the preflight suite); the diag Job is built here.
"""

from __future__ import annotations

import hashlib

from catalog import labels
from catalog.loader import accelerators
from warden import annotations
from warden.kube import Object

UNSCHEDULABLE_TOLERATION = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def job_name(kind: str, node: str, remediation_id: str) -> str:
    """`warden-<kind>-<node>-<hash of the remediation id>`, at most 63 characters.

    A hash, not a prefix: Temporal run ids are time-ordered UUIDs whose first characters
    repeat for runs started close together."""
    suffix = hashlib.sha1(remediation_id.encode()).hexdigest()[:10]
    room = 63 - len(f"warden-{kind}--{suffix}")
    return f"warden-{kind}-{node[:room].rstrip('-')}-{suffix}"


def accelerator_key(node: Object) -> str | None:
    """Catalog key (H100, H200) of a node, from GKE's accelerator label."""
    value = (node.get("metadata", {}).get("labels") or {}).get(labels.GKE_ACCELERATOR)
    for key, acc in accelerators().items():
        if acc.gke_accelerator == value:
            return key
    return None


def toleration(taint: dict) -> dict:
    return {"operator": "Equal", **taint}


def tag(job: Object, kind: str, node: str, remediation_id: str, namespace: str) -> Object:
    """Name the Job per remediation and label it with its node and kind."""
    meta = job.setdefault("metadata", {})
    meta["name"] = job_name(kind, node, remediation_id)
    meta["namespace"] = namespace
    meta.setdefault("labels", {}).update({annotations.JOB_NODE: node, annotations.JOB_KIND: kind})
    return job


def check_job(
    cluster: str, node: Object, image: str, namespace: str, remediation_id: str
) -> Object:
    """The preflight node check Job for `node` (built by runner.nodecheck)."""
    from catalog import load_cluster
    from runner.nodecheck import check_job as build  # the preflight suite's own Job

    name = node["metadata"]["name"]
    job = build(load_cluster(cluster), name, accelerator_key(node), image, namespace=namespace)
    return tag(job, "check", name, remediation_id, namespace)


def diag_job(
    node: Object, level: int, image: str, namespace: str, remediation_id: str, deadline_s: int
) -> Object:
    """A Job running `dcgmi diag -r LEVEL` on every GPU of `node`, pinned by nodeName."""
    name = node["metadata"]["name"]
    key = accelerator_key(node)
    gpus = accelerators()[key].gpus_per_node if key else 8
    container = {
        "name": "dcgm-diag",
        "image": image,
        "command": ["bash", "-c", f"nv-hostengine && dcgmi diag -r {int(level)}"],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
    }
    pod_spec = {
        "restartPolicy": "Never",
        "nodeName": name,  # bypasses the scheduler: runs on the cordoned node
        "tolerations": [toleration(labels.GPU_TAINT), UNSCHEDULABLE_TOLERATION],
        "containers": [container],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": {annotations.JOB_KIND: "diag"}}, "spec": pod_spec},
        },
    }
    return tag(job, "diag", name, remediation_id, namespace)
