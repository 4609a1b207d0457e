"""Names shared across parts agree: catalog/labels.py, clusters/*/cluster.yaml, the
accelerator catalog, infra, runner's rendered runs and the overlays."""

from __future__ import annotations

import glob

import pytest
import yaml

from catalog import accelerator, cluster_names, load_cluster
from catalog import labels as names
from kustomize.tooling import images, kueue, objects
from tests.kustomize.conftest import ROOT, by_kind

CLUSTERS = cluster_names(ROOT)
RUN_KIND_FRAMEWORK = {"RayJob": "ray.io/rayjob", "RayCluster": "ray.io/raycluster",
                      "Job": "batch/job", "Deployment": "deployment", "Pod": "pod"}  # fmt: skip


def named(objs, kind, name, namespace=None):
    found = [o for o in by_kind(objs, kind) if o["metadata"]["name"] == name
             and o["metadata"].get("namespace") == namespace]  # fmt: skip
    assert found, f"no {kind} {namespace}/{name}"
    return found[0]


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations or []:
        if t.get("key") != taint["key"] or t.get("effect", taint["effect"]) != taint["effect"]:
            continue
        if t.get("operator") == "Exists" or t.get("value") == taint["value"]:
            return True
    return False


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_priority_classes_match_the_catalog(overlay, cluster):
    classes = {
        o["metadata"]["name"]: o["value"] for o in by_kind(overlay(cluster), "PriorityClass")
    }
    assert classes == names.PRIORITY_VALUES


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_team_has_a_namespace_and_a_local_queue(overlay, cluster):
    objs = overlay(cluster)
    queue = named(objs, "ClusterQueue", kueue.CLUSTER_QUEUE)
    selector = queue["spec"]["namespaceSelector"]["matchExpressions"][0]
    assert selector == {"key": names.TEAM, "operator": "Exists"}
    for team in load_cluster(cluster).teams:
        namespace = named(objs, "Namespace", team)
        assert namespace["metadata"]["labels"][names.TEAM] == team
        local = named(objs, "LocalQueue", names.LOCAL_QUEUE, team)
        assert local["spec"]["clusterQueue"] == kueue.CLUSTER_QUEUE
    team_namespaces = {
        o["metadata"]["name"] for o in by_kind(objs, "Namespace")
        if names.TEAM in o["metadata"].get("labels", {})
    }  # fmt: skip
    assert team_namespaces == set(load_cluster(cluster).teams)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_fair_sharing_overlay_gives_each_team_its_queue(built, cluster):
    objs = built[f"kustomize/overlays/{cluster}-fair-sharing"]
    spec = load_cluster(cluster)
    queues = {o["metadata"]["name"]: o for o in by_kind(objs, "ClusterQueue")}
    assert set(queues) == {kueue.team_queue(t) for t in spec.teams}
    for team in spec.teams:
        local = named(objs, "LocalQueue", names.LOCAL_QUEUE, team)
        assert local["spec"]["clusterQueue"] == kueue.team_queue(team)
        assert queues[kueue.team_queue(team)]["spec"]["cohortName"] == kueue.COHORT
    for key in spec.accelerators():
        flavor = kueue.flavor_name(key)
        gpus = sum(
            int(r["nominalQuota"])
            for q in queues.values()
            for f in q["spec"]["resourceGroups"][0]["flavors"] if f["name"] == flavor
            for r in f["resources"] if r["name"] == "nvidia.com/gpu"
        )  # fmt: skip
        assert gpus == kueue.gpu_capacity(spec, key)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_resource_flavors_follow_the_accelerator_catalog(overlay, cluster):
    objs = overlay(cluster)
    flavors = {o["metadata"]["name"]: o["spec"] for o in by_kind(objs, "ResourceFlavor")}
    expected = {kueue.CPU_FLAVOR} | {k.lower() for k in load_cluster(cluster).accelerators()}
    assert set(flavors) == expected
    assert flavors[kueue.CPU_FLAVOR]["nodeLabels"] == names.cpu_node_labels()
    for key in load_cluster(cluster).accelerators():
        spec = flavors[key.lower()]
        assert spec["nodeLabels"][names.GKE_ACCELERATOR] == accelerator(key).gke_accelerator
        assert spec["nodeLabels"][names.POOL_ROLE] == "gpu"
        assert spec["nodeTaints"] == [names.GPU_TAINT]
    queue = named(objs, "ClusterQueue", kueue.CLUSTER_QUEUE)
    order = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]]
    assert order[0] == kueue.CPU_FLAVOR and set(order) == expected


EVERY_NODE = {"fluent-bit"}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_gpu_daemonsets_select_gpu_nodes_and_tolerate_their_taints(overlay, cluster):
    for ds in by_kind(overlay(cluster), "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        if ds["metadata"]["name"] in EVERY_NODE:  # the log shipper: CPU nodes hold run pods too
            assert "nodeSelector" not in spec
        else:
            assert spec["nodeSelector"] == {names.POOL_ROLE: "gpu"}
        assert tolerates(spec["tolerations"], names.GPU_TAINT)
        assert tolerates(spec["tolerations"], names.SPOT_TAINT)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_image_cache_pulls_the_committed_list_but_unbuilt_images_and_the_sidecars(overlay, cluster):
    ds = named(overlay(cluster), "DaemonSet", "image-cache", "image-cache")
    inits = ds["spec"]["template"]["spec"]["initContainers"]
    assert inits[0]["name"] == "copy-busybox"
    pulled = [c["image"] for c in inits[1:]]
    spec = load_cluster(cluster)
    entries = yaml.safe_load((ROOT / images.IMAGES_FILE).read_text())["images"]
    for entry in entries:
        if spec.name in entry.get("clusters", [spec.name]):
            ref = entry["image"].replace("{registry}", images.registry_url(spec))
            # an image not built yet is left out: its pull could only fail
            assert (ref in pulled) != entry.get("unbuilt", False), ref
    for key in spec.accelerators():
        for sidecar in accelerator(key).sidecars:
            assert sidecar.image in pulled


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_app_of_apps_points_at_the_cluster_overlay(built, cluster):
    import infra.derive

    assert infra.derive.argocd_path(load_cluster(cluster)) == f"kustomize/argocd/{cluster}"
    platform = named(built[f"kustomize/argocd/{cluster}"], "Application", "platform", "argocd")
    path = platform["spec"]["source"]["path"]
    assert path in (f"kustomize/overlays/{cluster}", f"kustomize/overlays/{cluster}-fair-sharing")
    assert (ROOT / path / "kustomization.yaml").is_file()


def test_this_repository_url_agrees_with_infra(built):
    from kustomize.tooling.validate import OWN_REPO

    infra_default = yaml.safe_load((ROOT / "infra/Pulumi.yaml").read_text())["config"]["repoUrl"]
    assert infra_default["default"] == OWN_REPO
    for cluster in CLUSTERS:
        objs = built[f"kustomize/argocd/{cluster}"]
        apps = by_kind(objs, "Application")
        for app in apps:
            wanted = "runs" if app["metadata"]["name"] == "runs" else "platform"
            assert app["spec"]["project"] == wanted
            project = named(objs, "AppProject", wanted, "argocd")
            assert app["spec"]["source"]["repoURL"] in project["spec"]["sourceRepos"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_service_accounts_infra_binds_exist(overlay, cluster):
    import infra.derive as derive

    objs = overlay(cluster)
    spec = load_cluster(cluster)
    accounts = [(*derive.WARDEN_KSA, "warden"), (*derive.OBSERVABILITY_KSA, "observability")]
    accounts += [(team, derive.TRAINING_KSA, f"team-{team}") for team in spec.teams]
    for namespace, name, role in accounts:
        account = named(objs, "ServiceAccount", name, namespace)
        annotation = account["metadata"]["annotations"][objects.WORKLOAD_IDENTITY]
        assert annotation == f"{cluster}-{role}@{spec.project}.iam.gserviceaccount.com"


def test_google_service_account_names_follow_infra():
    """infra names each Google service account `<cluster>-<role>`."""
    identity = (ROOT / "infra/components/identity.py").read_text()
    assert 'account_id=f"{self.spec.name}-{role}"' in identity
    for role in ("warden", "observability"):
        assert f'"{role}"' in identity
    assert 'f"team-{team}"' in identity


def kueue_config(built) -> dict:
    app = named(built[f"kustomize/argocd/{CLUSTERS[0]}"], "Application", "kueue", "argocd")
    values = app["spec"]["source"]["helm"]["valuesObject"]
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


def rendered_runs():
    from runner.experiment import is_experiment_file, load_experiment, render_experiment
    from runner.render import render_run
    from runner.spec import load_run

    for path in sorted(glob.glob(str(ROOT / "runs/examples/*.yaml"))):
        if is_experiment_file(path):  # every learner and the synchronizer
            yield path, [m for ms in render_experiment(load_experiment(path)).values() for m in ms]
        else:
            yield path, render_run(load_run(path))


def run_pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec", {})
    if obj["kind"] == "RayJob":
        spec = spec.get("rayClusterSpec", {})
    if obj["kind"] in ("RayJob", "RayCluster"):
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        return [g["template"]["spec"] for g in groups]
    if "template" in spec:
        return [spec["template"]["spec"]]
    return []


def requested_resources(pod: dict) -> set[str]:
    containers = (pod.get("initContainers") or []) + pod["containers"]
    return {name for c in containers for part in ("requests", "limits")
            for name in (c.get("resources") or {}).get(part, {})}  # fmt: skip


def test_rendered_runs_fit_queues_priorities_and_flavors(built):
    """Every example run lands in a team namespace with a LocalQueue and its service account,
    names a priority class the cluster has, requests only resources the ClusterQueue covers
    (or Kueue is told to ignore), and each pod fits one ResourceFlavor (Kueue admits only
    then)."""
    config = kueue_config(built)
    frameworks = set(config["integrations"]["frameworks"])
    ignored = tuple(config["resources"]["excludeResourcePrefixes"])
    checked = 0
    for path, manifests in rendered_runs():
        for obj in manifests:
            queue = obj["metadata"].get("labels", {}).get(names.KUEUE_QUEUE_LABEL)
            if queue is None:
                continue
            cluster = obj["metadata"]["labels"][names.CLUSTER]
            objs = built[f"kustomize/overlays/{cluster}"]
            assert queue == names.LOCAL_QUEUE, path
            assert RUN_KIND_FRAMEWORK[obj["kind"]] in frameworks, path
            named(objs, "LocalQueue", queue, obj["metadata"]["namespace"])
            flavors = [o["spec"] for o in by_kind(objs, "ResourceFlavor")]
            queue = named(objs, "ClusterQueue", kueue.CLUSTER_QUEUE)
            covered = set(queue["spec"]["resourceGroups"][0]["coveredResources"])
            for pod in run_pod_specs(obj):
                assert pod["priorityClassName"] in names.PRIORITY_VALUES, path
                named(
                    objs, "ServiceAccount", pod["serviceAccountName"], obj["metadata"]["namespace"]
                )
                for resource in requested_resources(pod):
                    assert resource in covered or resource.startswith(ignored), (path, resource)
                assert any(fits(pod, f) for f in flavors), f"{path}: no flavor fits a pod"
                checked += 1
    assert checked > 0


def fits(pod: dict, flavor: dict) -> bool:
    """Kueue's flavor check: the pod's node selector agrees on the flavor's labels, and the
    pod tolerates the flavor's taints."""
    selector = pod.get("nodeSelector") or {}
    labels = flavor.get("nodeLabels") or {}
    if any(k in labels and labels[k] != v for k, v in selector.items()):
        return False
    return all(tolerates(pod.get("tolerations"), t) for t in flavor.get("nodeTaints") or [])


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_warden_node_check_jobs_fit_the_overlay(overlay, cluster):
    from runner.nodecheck import check_job

    spec = load_cluster(cluster)
    key = spec.accelerators()[0]
    job = check_job(spec, "node-1", key, "img@sha256:" + "0" * 64)
    objs = overlay(cluster)
    namespace = job["metadata"]["namespace"]
    env = {e["name"]: e.get("value") for e in named(objs, "Deployment", "warden", "warden")
           ["spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert namespace == env["WARDEN_CHECK_NAMESPACE"]
    role = named(objs, "Role", "warden-checks", namespace)
    assert any("jobs" in r["resources"] and "create" in r["verbs"] for r in role["rules"])
    pod = job["spec"]["template"]["spec"]
    assert tolerates(pod["tolerations"], names.GPU_TAINT)
    if pod.get("priorityClassName"):
        assert pod["priorityClassName"] in names.PRIORITY_VALUES
