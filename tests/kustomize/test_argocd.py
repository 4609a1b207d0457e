"""The app-of-apps: sync waves put CRDs and operators before what uses them, and each
cluster's Applications point at that cluster's overlay and rendered runs."""

from __future__ import annotations

import pytest

from catalog import cluster_names
from tests.kustomize.conftest import ROOT, by_kind

CLUSTERS = cluster_names(ROOT)
# (earlier, later): the later one uses what the earlier one installs.
ORDER = [
    ("AppProject/platform", "Application/kueue"),  # every Application names the project
    ("AppProject/platform", "Application/kuberay-operator"),
    ("Application/kueue", "Application/platform"),  # Kueue CRDs -> flavors and queues
    ("Application/platform", "Application/temporal"),  # PostgreSQL -> Temporal
    ("Application/kueue", "Application/runs"),  # Kueue webhooks -> queued runs
    ("Application/kuberay-operator", "Application/runs"),  # RayJob CRD -> RayJobs
    ("Application/platform", "Application/runs"),  # namespaces, priority classes, queues
    ("AppProject/platform", "Application/node-addons"),
    # GPU node DaemonSets -> anything that runs on GPU nodes (image cache, DCGM, runs)
    ("Application/node-addons", "Application/platform"),
    ("Application/node-addons", "Application/runs"),
]


def waves(objects: list[dict]) -> dict[str, int]:
    annotation = "argocd.argoproj.io/sync-wave"
    return {
        f"{o['kind']}/{o['metadata']['name']}": int(o["metadata"]["annotations"][annotation])
        for o in objects
    }


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_sync_waves_put_crds_and_operators_first(built, cluster):
    got = waves(built[f"kustomize/argocd/{cluster}"])
    for earlier, later in ORDER:
        assert got[earlier] < got[later], f"{earlier} ({got[earlier]}) before {later}"


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_platform_overlay_ships_no_crds_or_operators(overlay, cluster):
    """CRDs come only from the chart Applications of the earlier wave."""
    assert by_kind(overlay(cluster), "CustomResourceDefinition") == []


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_runs_application_syncs_the_rendered_runs(built, cluster):
    app = next(
        o for o in by_kind(built[f"kustomize/argocd/{cluster}"], "Application")
        if o["metadata"]["name"] == "runs"
    )  # fmt: skip
    source = app["spec"]["source"]
    assert source["path"] == f"apps/{cluster}"
    assert source["directory"]["recurse"] is True  # apps/<cluster>/<namespace>/<run>.yaml
    assert app["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": False}


def test_every_rendered_cluster_folder_has_a_runs_application():
    folders = {p.name for p in (ROOT / "apps").iterdir() if p.is_dir()}
    assert folders <= set(CLUSTERS)
