"""Every per-node DaemonSet that runs on GPU nodes also runs on the nodes Warden keeps for a
relaunch (runner's keep_nodes taints them `platform.reve.dev/kept-for=<ns>:NoSchedule`)
and on spot nodes: a new rollout must reach every GPU node."""

from __future__ import annotations

from runner.keepnodes import KEPT_FOR
from tests.kustomize.conftest import by_kind

GPU_NODE_TAINTS = ("nvidia.com/gpu", "cloud.google.com/gke-spot", KEPT_FOR)


def tolerates(tolerations: list[dict], key: str) -> bool:
    for t in tolerations:
        if t.get("operator") == "Exists" and not t.get("key"):
            return True  # tolerates every taint
        if t.get("key") == key and t.get("effect") in (None, "", "NoSchedule"):
            return True
    return False


def gpu_daemonsets(built) -> list[tuple[str, dict]]:
    found = []
    for folder, objects in built.items():
        for ds in by_kind(objects, "DaemonSet"):
            tolerations = ds["spec"]["template"]["spec"].get("tolerations", [])
            if tolerates(tolerations, "nvidia.com/gpu"):
                found.append((f"{folder}:{ds['metadata']['name']}", ds))
    return found


def test_gpu_daemonsets_tolerate_every_gpu_node_taint(built):
    daemonsets = gpu_daemonsets(built)
    assert len({name.split(":")[1] for name, _ in daemonsets}) >= 3  # dcgm, fluent-bit, cache
    missing = [
        f"{name} does not tolerate {key}"
        for name, ds in daemonsets
        for key in GPU_NODE_TAINTS
        if not tolerates(ds["spec"]["template"]["spec"].get("tolerations", []), key)
    ]
    assert missing == []


def test_the_rule_fails_without_the_kept_for_toleration():
    gpu_only = [{"key": "nvidia.com/gpu", "operator": "Equal", "effect": "NoSchedule"}]
    assert tolerates(gpu_only, "nvidia.com/gpu") and not tolerates(gpu_only, KEPT_FOR)
    assert tolerates([{"operator": "Exists"}], KEPT_FOR)
