"""A fake cluster with two runs for the day-2 commands; `runner.kube.connect` returns it.

- `tiny-lm` (research): a RayJob applied by ArgoCD, its RayCluster, a head and two workers;
- `sweep` (media): an indexed Job with two pods, one restarted.
"""

from __future__ import annotations

import pytest

from catalog import labels
from runner.kube.fake import FakeKube
from tests.preflight.conftest import invoke, python_here  # noqa: F401 - shared by day-2 tests

CREATED = "2026-11-30T10:00:00Z"


def tags(run: str, namespace: str, kind: str, role: str | None = None) -> dict:
    out = labels.run_labels(run, namespace, "ultra-usc1", kind)
    return {**out, labels.ROLE: role} if role else out


def obj(api_version: str, kind: str, name: str, namespace: str, labels_: dict, **extra) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": labels_, "creationTimestamp": CREATED}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **extra}


def pod(
    name: str,
    namespace: str,
    labels_: dict,
    container: str,
    node: str,
    restarts: int = 0,
    phase: str = "Running",
) -> dict:
    return obj(
        "v1",
        "Pod",
        name,
        namespace,
        labels_,
        spec={"nodeName": node, "containers": [{"name": container}]},
        status={
            "phase": phase,
            "podIP": "127.0.0.1",
            "containerStatuses": [{"name": container, "restartCount": restarts}],
        },
    )


def event(name: str, namespace: str, kind: str, reason: str, message: str, when: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason.lower()}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
        "type": "Warning" if reason == "BackOff" else "Normal",
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
    }


def objects() -> list[dict]:
    ray = tags("tiny-lm", "research", "rayjob")
    job = tags("sweep", "media", "job")
    rayjob = obj(
        "ray.io/v1",
        "RayJob",
        "tiny-lm",
        "research",
        {
            **ray,
            labels.KUEUE_QUEUE_LABEL: labels.LOCAL_QUEUE,
            "argocd.argoproj.io/instance": "ultra-usc1-apps",
        },
        spec={},
        status={"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
    )
    raycluster = obj(
        "ray.io/v1",
        "RayCluster",
        "tiny-lm-raycluster-x7q2b",
        "research",
        ray,
        spec={},
        status={"state": "ready"},
    )
    indexed = obj(
        "batch/v1", "Job", "sweep", "media", job, spec={"completions": 2}, status={"active": 2}
    )
    return [
        rayjob,
        raycluster,
        indexed,
        pod(
            "tiny-lm-head",
            "research",
            tags("tiny-lm", "research", "rayjob", "head"),
            "ray-head",
            "gke-cpu-1",
        ),
        pod(
            "tiny-lm-worker-a",
            "research",
            tags("tiny-lm", "research", "rayjob", "worker"),
            "ray-worker",
            "gke-h200-1",
        ),
        pod(
            "tiny-lm-worker-b",
            "research",
            tags("tiny-lm", "research", "rayjob", "worker"),
            "ray-worker",
            "gke-h200-2",
        ),
        pod(
            "sweep-1-zz",
            "media",
            {
                **tags("sweep", "media", "job", "job"),
                "batch.kubernetes.io/job-completion-index": "1",
            },
            "main",
            "gke-h200-3",
            restarts=2,
        ),
        pod(
            "sweep-0-yy",
            "media",
            {
                **tags("sweep", "media", "job", "job"),
                "batch.kubernetes.io/job-completion-index": "0",
            },
            "main",
            "gke-h200-4",
        ),
        event(
            "tiny-lm-worker-b",
            "research",
            "Pod",
            "Pulled",
            "Successfully pulled image",
            "2026-11-30T10:01:00Z",
        ),
        event(
            "tiny-lm",
            "research",
            "RayJob",
            "Created",
            "Created RayCluster tiny-lm-raycluster",
            "2026-11-30T10:00:05Z",
        ),
        event("someone-else", "research", "Pod", "BackOff", "not ours", "2026-11-30T10:02:00Z"),
    ]


@pytest.fixture
def fake(monkeypatch) -> FakeKube:
    cluster = FakeKube(objects(), exec_handler=python_here)
    cluster.pod_logs.update(
        {
            (
                "research",
                "tiny-lm-head",
                "ray-head",
            ): "driver: step 1\ndriver: step 2\ndriver: done",
            ("research", "tiny-lm-worker-a", "ray-worker"): "worker a line",
            ("research", "tiny-lm-worker-b", "ray-worker"): "worker b line",
            ("media", "sweep-0-yy", "main"): "index 0",
            ("media", "sweep-1-zz", "main"): "index 1",
        }
    )
    monkeypatch.setattr("runner.kube.connect", lambda cluster=None: cluster_ref[0])
    cluster_ref = [cluster]
    return cluster
