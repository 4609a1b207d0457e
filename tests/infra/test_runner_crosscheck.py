"""Node pool labels and taints equal what `runner` renders for the same cluster.

Every example run under runs/examples/ is rendered with `runner.render.render_run`; each pod
template must select at least one node pool the infra program declares (its nodeSelector a
subset of the pool's node labels) and tolerate every taint of that pool. A non-preemptible
run must not tolerate its way onto a spot pool. Every network a pod names in its
`networking.gke.io/interfaces` annotation must be a GKE Network object infra declares.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog import labels as names
from catalog import repo_root
from runner.experiment import is_experiment_file

from .conftest import pools

EXAMPLES = sorted(  # runs only: an experiment's learners are runs rendered the same way
    p for p in (repo_root() / "runs" / "examples").glob("*.yaml") if not is_experiment_file(p)
)
GPU_RESOURCE = "nvidia.com/gpu"
INTERFACES = "networking.gke.io/interfaces"
GKE_NETWORK = "kubernetes:networking.gke.io/v1:Network"
K8S_EFFECT = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}
K8S_EFFECT["PREFER_NO_SCHEDULE"] = "PreferNoSchedule"


def pod_specs(manifest: object):
    """Every pod spec (a dict with `containers`) anywhere inside a manifest."""
    if isinstance(manifest, dict):
        if "containers" in manifest and isinstance(manifest["containers"], list):
            yield manifest
        for value in manifest.values():
            yield from pod_specs(value)
    elif isinstance(manifest, list):
        for item in manifest:
            yield from pod_specs(item)


def interface_networks(manifest: object):
    """Network names of every `networking.gke.io/interfaces` annotation inside a manifest."""
    if isinstance(manifest, dict):
        annotations = manifest.get("annotations")
        if isinstance(annotations, dict) and INTERFACES in annotations:
            yield from (i["network"] for i in json.loads(annotations[INTERFACES]))
        for value in manifest.values():
            yield from interface_networks(value)
    elif isinstance(manifest, list):
        for item in manifest:
            yield from interface_networks(item)


def node_labels(inputs: dict) -> dict[str, str]:
    """Labels a node of the pool carries: ours plus those GKE sets (accelerator, pool, spot)."""
    config = inputs["nodeConfig"]
    labels = {**config.get("labels", {}), names.GKE_NODEPOOL: inputs["name"]}
    for gpu in config.get("guestAccelerators", []):
        labels[names.GKE_ACCELERATOR] = gpu["type"]
    if config.get("spot"):
        labels[names.GKE_SPOT] = "true"
    return labels


def node_taints(inputs: dict) -> list[dict[str, str]]:
    return [
        {"key": t["key"], "value": t["value"], "effect": K8S_EFFECT[t["effect"]]}
        for t in inputs["nodeConfig"].get("taints", [])
    ]


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    for tol in tolerations:
        if tol.get("key") not in (None, taint["key"]):
            continue
        if tol.get("effect") not in (None, "", taint["effect"]):
            continue
        if tol.get("operator") == "Exists" or tol.get("value") == taint["value"]:
            return True
    return False


def schedulable_pools(pod: dict, pool_inputs: dict[str, dict]) -> list[str]:
    selector = pod.get("nodeSelector", {})
    tolerations = pod.get("tolerations", [])
    return [
        name
        for name, inputs in pool_inputs.items()
        if selector.items() <= node_labels(inputs).items()
        and all(tolerates(tolerations, t) for t in node_taints(inputs))
    ]


def wants_gpu(pod: dict) -> bool:
    return any(
        GPU_RESOURCE in (c.get("resources", {}).get("limits") or {})
        or GPU_RESOURCE in (c.get("resources", {}).get("requests") or {})
        for c in pod["containers"]
    )


def test_examples_exist_for_both_clusters():
    from runner.spec import load_run

    clusters = {load_run(path).cluster for path in EXAMPLES}
    assert {"mega-euw4", "ultra-usc1"} <= clusters


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_rendered_pods_land_on_declared_pools(programs, path: Path):
    from catalog import load_cluster
    from runner.render import render_run
    from runner.spec import load_run

    spec = load_run(path)
    cluster = load_cluster(spec.cluster)
    pool_inputs = pools(programs[spec.cluster])
    spot_pools = {p.name for p in cluster.gpu_pools if p.spot}
    pods = [pod for manifest in render_run(spec) for pod in pod_specs(manifest)]
    assert pods, f"{path.name} renders no pod"
    for pod in pods:
        fits = schedulable_pools(pod, pool_inputs)
        assert fits, f"{path.name}: no node pool matches {pod.get('nodeSelector')}"
        if wants_gpu(pod):
            assert cluster.cpu_pool.name not in fits
            assert set(fits) <= {p.name for p in cluster.gpu_pools}
            if not spec.preemptible:
                assert not set(fits) & spot_pools, f"{path.name} would land on spot pools"
        else:
            assert fits == [cluster.cpu_pool.name], f"{path.name}: CPU pod fits {fits}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_pod_interfaces_name_declared_networks(programs, path: Path):
    from runner.render import render_run
    from runner.spec import load_run

    spec = load_run(path)
    program = programs[spec.cluster]
    declared = {r.inputs["metadata"]["name"] for r in program.of_type(GKE_NETWORK)}
    named = {n for m in render_run(spec) for n in interface_networks(m)} - {"default"}
    assert named <= declared, f"{path.name} names undeclared networks {named - declared}"


def test_gpu_runs_name_interfaces():
    """The interface check above is not vacuous: GPU examples do name NIC networks."""
    from runner.render import render_run
    from runner.spec import load_run

    named = {n for p in EXAMPLES for m in render_run(load_run(p)) for n in interface_networks(m)}
    assert {"vpc1", "rdma-0", "gvnic-1"} <= named
