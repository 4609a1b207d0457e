"""The node check: the preflight suite as a Kubernetes Job pinned to one node.

Warden runs it for ambiguous faults; `runner check NODE --cluster C` runs it by hand. The
Job's success or failure is the verdict (the suite exits 1 on any FAIL). Its image is, by
default, the `preflight` entry of the committed image list (`kustomize/images.yaml`, which
the image cache pre-pulls on every GPU node) in the cluster's Artifact Registry.

    from runner.nodecheck import check_job, default_image
    cluster = load_cluster("ultra-usc1")
    job = check_job(cluster, "gke-ultra-usc1-h200-main-5c1a-x7q2", "H200", default_image(cluster))
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from catalog import InputError, labels
from catalog import accelerator as find_accelerator
from catalog.loader import repo_root
from catalog.schema import Cluster
from runner.gpupod import gpu_settings
from runner.podcontext import pod_context
from runner.templating import render_template

ROLE = "node-check"
# The entry of catalog.images.IMAGES_FILE the node check runs (an image holding this package).
IMAGE_ENTRY = "preflight"
DEADLINE_SECONDS = 1800
TTL_SECONDS = 3600
CPU_SHM = "1Gi"
UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def job_name(node: str) -> str:
    """`nodecheck-<node>`, shortened with a hash when it would pass 63 characters."""
    name = f"nodecheck-{node}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def default_image(cluster: Cluster, entry_name: str = IMAGE_ENTRY, root: Path | None = None) -> str:
    """The image named `entry_name` (default `preflight`) in `kustomize/images.yaml` for
    `cluster`, `{registry}` expanded to the cluster's Artifact Registry.

    Raises InputError naming the file and field when the list has no such entry.
    """
    from catalog.images import image_named, load_entries

    try:
        return image_named(cluster, load_entries(root or repo_root()), entry_name)
    except InputError as err:
        if err.field != "images":
            raise
        raise InputError(err.source, err.field, f"{err.message}; pass --image") from None


def check_context(
    cluster: Cluster, node: str, accelerator: str | None, image: str, namespace: str
) -> dict:
    """The values check-job.yaml.j2 reads; a GPU node's check takes the whole node, with
    the GPU settings every whole-node pod gets (`runner.gpupod`)."""
    tags = {labels.CLUSTER: cluster.name, labels.MANAGED_BY: labels.MANAGED_BY_VALUE}
    tags[labels.ROLE] = ROLE
    command = ["python", "-m", "runner.preflight", "--node", node]
    pod = pod_context(
        labels=tags,
        container="preflight",
        image=image,
        restart_policy="Never",
        resources={"cpu": "1", "memory": "4Gi"},
        shm=CPU_SHM,
        capabilities=["SYSLOG"],
        field_env={"POD_NAME": "metadata.name", labels.NODE_NAME_ENV: "spec.nodeName"},
    )
    if accelerator is not None:
        acc = find_accelerator(accelerator, field="accelerator")
        pod["resources"] = {"cpu": "8", "memory": "64Gi"}
        gpu_settings(acc, acc.gpus_per_node).apply(pod)
        pod["shm"] = acc.default_shm
        gpus = str(acc.gpus_per_node)
        command += ["--accelerator", accelerator, "--gpus", gpus, "--local-world", gpus]
    else:
        command += ["--local-world", "2"]
    # nodeName, not a selector: the check runs on this node even while it is cordoned
    pod.update(command=command, node_name=node, node_selector={}, node_affinity=[])
    pod["tolerations"] = [labels.GPU_TAINT, labels.SPOT_TAINT, UNSCHEDULABLE_TOLERATION]
    return {
        "name": job_name(node),
        "namespace": namespace,
        "labels": tags,
        "deadline_seconds": DEADLINE_SECONDS,
        "ttl_seconds": TTL_SECONDS,
        "pod": pod,
    }


def check_job(
    cluster: Cluster,
    node: str,
    accelerator: str | None,
    image: str,
    namespace: str = "warden",
) -> dict:
    """A batch/v1 Job pinned to `node` that runs the preflight suite."""
    (job,) = render_template(
        "check-job.yaml.j2", check=check_context(cluster, node, accelerator, image, namespace)
    )
    return job


def verdict(job: dict) -> str | None:
    """`passed`, `failed`, or None while the Job runs."""
    status = job.get("status", {})
    for condition in status.get("conditions", []) or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "passed"
        if condition.get("type") == "Failed":
            return "failed"
    if status.get("succeeded"):
        return "passed"
    if status.get("failed"):
        return "failed"
    return None


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set by Kubernetes on a Job's pods


def node_accelerator(node: dict) -> str | None:
    """The catalog key of a Node's GPUs, from its GKE accelerator label (None: CPU node)."""
    from catalog import accelerators

    value = node["metadata"].get("labels", {}).get(labels.GKE_ACCELERATOR)
    return next(
        (k for k, a in accelerators().items() if value and a.gke_accelerator == value), None
    )


def run_node_check(
    kube,
    cluster: Cluster,
    node: str,
    image: str,
    namespace: str = "warden",
    timeout: float = DEADLINE_SECONDS + 300,
    poll: float = 5.0,
    sleep=None,
) -> tuple[str, list[str]]:
    """Create the node-check Job for `node`, wait for it; returns (verdict, log lines).

    The verdict is `passed`, `failed` or `timeout`. A finished Job of the same name is
    replaced. Raises runner.kube.NotFound when the node does not exist.
    """
    import time

    from runner.kube import KubeError, NotFound

    sleep = sleep or time.sleep
    try:
        accelerator = node_accelerator(kube.get("v1", "Node", None, node))
    except NotFound:
        raise NotFound(f"node {node} not found in cluster {cluster.name}") from None
    job = check_job(cluster, node, accelerator, image, namespace)
    name = job["metadata"]["name"]
    try:
        kube.delete("batch/v1", "Job", namespace, name)
    except NotFound:
        pass
    kube.apply(job)
    deadline = time.monotonic() + timeout
    result = None
    while result is None and time.monotonic() < deadline:
        result = verdict(kube.get("batch/v1", "Job", namespace, name))
        if result is None:
            sleep(poll)
    lines: list[str] = []
    for pod in kube.list("v1", "Pod", namespace, {JOB_NAME_LABEL: name}):
        try:
            lines += list(kube.logs(namespace, pod["metadata"]["name"], "preflight"))
        except KubeError as err:
            lines.append(f"(logs of {pod['metadata']['name']} unavailable: {err})")
    return result or "timeout", lines
