"""Preflight a placed run: exec the suite in every worker pod, all-reduce across all of them.

The pods are found by the run's identity labels; every pod runs `python -m runner.preflight`
through the Kubernetes adapter at the same time, meeting at a rendezvous on the first pod.
`runner preflight RUN` and `runner submit --apply` call `preflight_run`.

    from runner import kube
    from runner.preflight.remote import preflight_run
    rows = preflight_run(kube.connect("ultra-usc1"), "research", "tiny-lm", placement_timeout=900)
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from catalog import accelerators, labels
from runner.gpupod import GPU_RESOURCE
from runner.kube import KubeError, Object
from runner.preflight.rows import FAIL, Row, cross_node

CHECKED_ROLES = ("worker", "job")
DEFAULT_PORT = 29533


class NotPlaced(KubeError):
    """The run has no worker pods, some are not running yet, or one has already ended."""

    def __init__(self, message: str, final: bool = False):
        super().__init__(message)
        self.final = final
        """True when waiting longer cannot help (a pod Succeeded or Failed)"""


ENDED_PHASES = ("Succeeded", "Failed")


def wait_for_pods(
    kube,
    namespace: str,
    run: str,
    timeout: float,
    poll: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Object]:
    """The run's worker pods once all are Running; NotPlaced after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return worker_pods(kube, namespace, run)
        except NotPlaced as err:
            if err.final or time.monotonic() + poll > deadline:
                raise
        sleep(poll)


@dataclass(frozen=True)
class PodPlan:
    """How the suite runs in one pod."""

    pod: str
    node: str
    container: str
    command: list[str]


def pod_gpus(pod: Object) -> int:
    total = 0
    for container in pod.get("spec", {}).get("containers", []):
        limits = container.get("resources", {}).get("limits", {})
        total += int(limits.get(GPU_RESOURCE, 0))
    return total


def pod_accelerator(pod: Object) -> str | None:
    """The catalog key of the accelerator the pod selects (by its GKE accelerator label)."""
    wanted = pod.get("spec", {}).get("nodeSelector", {}).get(labels.GKE_ACCELERATOR)
    for key, acc in accelerators().items():
        if wanted and acc.gke_accelerator == wanted:
            return key
    return None


def pod_shm(pod: Object) -> str | None:
    for volume in pod.get("spec", {}).get("volumes", []):
        empty = volume.get("emptyDir") or {}
        if empty.get("medium") == "Memory" and empty.get("sizeLimit"):
            return str(empty["sizeLimit"])
    return None


def worker_pods(kube, namespace: str, run: str) -> list[Object]:
    """The run's worker (or job) pods, all running; NotPlaced otherwise."""
    pods = [
        p
        for p in kube.pods_of_run(namespace, run)
        if p["metadata"].get("labels", {}).get(labels.ROLE) in CHECKED_ROLES
    ]
    if not pods:
        raise NotPlaced(f"run {run} has no worker pods in namespace {namespace}")
    ended = [p for p in pods if p.get("status", {}).get("phase") in ENDED_PHASES]
    if ended:
        name, phase = ended[0]["metadata"]["name"], ended[0]["status"]["phase"]
        raise NotPlaced(f"pod {name} of run {run} has already ended ({phase})", final=True)
    waiting = [p for p in pods if p.get("status", {}).get("phase") != "Running"]
    if waiting:
        first = waiting[0]
        phase = first.get("status", {}).get("phase", "Unknown")
        raise NotPlaced(
            f"{len(waiting)} of {len(pods)} pods are not running yet "
            f"({first['metadata']['name']}: {phase}); preflight needs placed pods"
        )
    return pods


def plan(
    pods: list[Object], port: int = DEFAULT_PORT, python: str = "python", skip: str = ""
) -> list[PodPlan]:
    """The suite command for each pod: ranks numbered pod by pod, rendezvous on the first."""
    master = pods[0].get("status", {}).get("podIP") or pods[0]["metadata"]["name"]
    sizes = [max(pod_gpus(p), 1) for p in pods]
    world = sum(sizes)
    plans, base = [], 0
    for pod, size in zip(pods, sizes, strict=True):
        name, node = pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "")
        command = [
            python,
            "-m",
            "runner.preflight",
            "--json",
            "--pod",
            name,
            "--node",
            node,
            "--master-addr",
            master,
            "--master-port",
            str(port),
            "--world-size",
            str(world),
            "--rank-base",
            str(base),
            "--local-procs",
            str(size),
        ]
        if accelerator := pod_accelerator(pod):
            command += ["--accelerator", accelerator, "--gpus", str(pod_gpus(pod))]
        if shm := pod_shm(pod):
            command += ["--shm", shm]
        if skip:
            command += ["--skip", skip]
        container = pod["spec"]["containers"][0]["name"]
        plans.append(PodPlan(name, node, container, command))
        base += size
    return plans


def parse_output(stdout: bytes) -> list[Row]:
    """The JSON rows a pod printed (other lines, e.g. warnings, are ignored)."""
    rows = []
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith("{"):
            rows.append(Row.from_json(line))
    return rows


def _run_one(kube, namespace: str, item: PodPlan, timeout: float) -> list[Row]:
    try:
        result = kube.exec(namespace, item.pod, item.command, item.container, timeout=timeout)
    except KubeError as err:
        return [Row("exec", FAIL, str(err), item.pod, item.node)]
    rows = parse_output(result.stdout)
    if not rows:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"exit status {result.returncode}"
        return [Row("exec", FAIL, f"{shlex.join(item.command[:3])}: {why}", item.pod, item.node)]
    return rows


def preflight_run(
    kube,
    namespace: str,
    run: str,
    *,
    placement_timeout: float = 0.0,
    timeout: float = 900.0,
    port: int = DEFAULT_PORT,
    skip: str = "",
    python: str = "python",
    poll: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Row]:
    """Run the suite in every worker pod of `run`; rows of all pods plus cross-node rows.

    Needs: a `runner.kube.Kube` adapter, the run's namespace and name; the run's pods carry
    its identity labels with role `worker` (or `job`) and an image with this package and
    `python` on PATH. Waits up to `placement_timeout` seconds (polling every `poll`) for
    every worker pod to be Running, then up to `timeout` seconds for the suite in each pod.
    `skip` is a comma-separated list of check groups (see suite.GROUPS).

    Returns the rows (`runner.preflight.rows.failed(rows)` says whether any FAILed,
    `failing_nodes(rows)` names the nodes). A pod whose exec fails gives an `exec` FAIL row.
    Raises NotPlaced when the pods are not all Running in time (or one has ended), and
    runner.kube.KubeError when the API fails.
    """
    pods = wait_for_pods(kube, namespace, run, placement_timeout, poll, sleep)
    plans = plan(pods, port, python, skip)
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        futures = [pool.submit(_run_one, kube, namespace, p, timeout) for p in plans]
        rows = [row for f in futures for row in f.result()]
    return rows + cross_node(rows)
