"""GPU node add-ons: each cluster gets exactly the add-ons its accelerators need, and the
check fails when an add-on a GPU pod relies on is missing."""

from __future__ import annotations

import copy

import pytest

from catalog import accelerator, cluster_names, load_cluster
from kustomize.tooling import addons, generate
from tests.kustomize.conftest import ROOT, by_kind

CLUSTERS = cluster_names(ROOT)


def addon_objects(built, cluster: str) -> list[dict]:
    return built[f"kustomize/overlays/{cluster}-node-addons"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_each_cluster_gets_its_accelerators_addons(built, cluster):
    spec = load_cluster(cluster)
    wanted = {n for key in spec.accelerators() for n in accelerator(key).node_addons}
    daemonsets = by_kind(addon_objects(built, cluster), "DaemonSet")
    folders = {d["metadata"]["name"].replace("device-injector", "nri-device-injector")
               for d in daemonsets}  # fmt: skip
    assert folders == wanted
    assert all(d["metadata"]["namespace"] == "kube-system" for d in daemonsets)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_need_of_a_gpu_pod_is_provided(built, cluster):
    assert addons.problems(load_cluster(cluster), addon_objects(built, cluster)) == []


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_node_addons_application_points_at_the_cluster(built, cluster):
    [app] = [o for o in built[f"kustomize/argocd/{cluster}"]
             if o["metadata"]["name"] == "node-addons"]  # fmt: skip
    assert app["spec"]["source"]["path"] == f"kustomize/overlays/{cluster}-node-addons"


def without(objects: list[dict], name: str) -> list[dict]:
    return [o for o in objects if o["metadata"]["name"] != name]


@pytest.mark.parametrize(
    ("cluster", "removed", "missing"),
    [
        ("ultra-usc1", "nccl-rdma-installer", "/home/kubernetes/bin/gib"),
        ("mega-euw4", "nccl-tcpxo-installer", "/dev/aperture_devices"),
        ("mega-euw4", "device-injector", "devices.gke.io"),
    ],
)
def test_missing_addon_for_an_accelerator_is_reported(built, cluster, removed, missing):
    objects = without(addon_objects(built, cluster), removed)
    [problem] = addons.problems(load_cluster(cluster), objects)
    assert f"nothing provides {missing} on" in problem


def test_an_addon_that_does_not_run_on_the_accelerator_does_not_count(built):
    objects = copy.deepcopy(addon_objects(built, "ultra-usc1"))
    [ds] = by_kind(objects, "DaemonSet")
    term = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]  # fmt: skip
    term["matchExpressions"][0]["values"] = ["nvidia-b200"]
    [problem] = addons.problems(load_cluster("ultra-usc1"), objects)
    assert "/home/kubernetes/bin/gib on nvidia-h200-141gb nodes" in problem


def test_an_accelerator_naming_an_unknown_addon_fails_generation(monkeypatch):
    h200 = accelerator("H200")
    broken = h200.model_copy(update={"node_addons": ["nccl-rdma-installr"]})
    import catalog.loader as loader

    monkeypatch.setitem(loader.accelerators(), "H200", broken)
    with pytest.raises(Exception, match=r"H200.node_addons\[0\]: no add-on 'nccl-rdma-installr'"):
        generate.node_addons(load_cluster("ultra-usc1"), ROOT)
