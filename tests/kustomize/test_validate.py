"""Every overlay builds with the real kustomize, every object validates, versions are pinned."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess

import pytest

from catalog import cluster_names
from kustomize.tooling import build, checks, validate
from tests.kustomize.conftest import ROOT, by_kind, cluster_version

TARGETS = [t.name(ROOT) for t in build.targets(ROOT)]


def test_every_cluster_has_an_overlay_and_an_app_of_apps():
    for name in cluster_names(ROOT):
        assert f"kustomize/overlays/{name}" in TARGETS
        assert f"kustomize/overlays/{name}-fair-sharing" in TARGETS
        assert f"kustomize/argocd/{name}" in TARGETS


@pytest.mark.parametrize("target", TARGETS)
def test_target_builds_and_validates(built, target):
    objects = built[target]
    assert objects, f"{target} built nothing"
    cluster = next(t.cluster for t in build.targets(ROOT) if t.name(ROOT) == target)
    assert validate.check_objects(objects, cluster_version(cluster)) == []


def _deployment(overlay):
    return copy.deepcopy(next(o for o in by_kind(overlay("ultra-usc1"), "Deployment")))


def test_unknown_field_of_a_builtin_kind_is_an_error(overlay):
    obj = _deployment(overlay)
    obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert any("imagePullPolcy" in p for p in validate.check_objects([obj], "1.33"))


def test_custom_resource_is_checked_against_its_crd_schema(overlay):
    queue = copy.deepcopy(by_kind(overlay("ultra-usc1"), "ClusterQueue")[0])
    queue["spec"]["queueingStrategy"] = "Random"
    problems = validate.check_objects([queue], "1.33")
    assert any("queueingStrategy" in p for p in problems)


def test_kind_without_a_schema_is_an_error_not_a_skip():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert any("no schema" in p for p in validate.check_objects([obj], "1.33"))


def test_old_api_version_of_a_shipped_crd_is_an_error():
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
           "metadata": {"name": "cpu"}, "spec": {}}  # fmt: skip
    assert any("no schema" in p for p in validate.check_objects([obj], "1.33"))


def test_scope_is_checked(overlay):
    obj = _deployment(overlay)
    del obj["metadata"]["namespace"]
    assert any("has no namespace" in p for p in validate.check_objects([obj], "1.33"))
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "namespace": "y"}}
    assert any("cluster-scoped" in p for p in validate.check_objects([ns], "1.33"))


def test_duplicates_are_reported(overlay):
    obj = _deployment(overlay)
    assert any("defined twice" in p for p in validate.check_objects([obj, obj], "1.33"))


@pytest.mark.parametrize(
    "image, pinned",
    [
        ("busybox:1.37.0", True),
        ("us-docker.pkg.dev/p/r/train:2026.11.0", True),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04", True),
        ("gke.gcr.io/prometheus-engine/frontend:v0.15.3-gke.0", True),
        ("repo/img@sha256:" + "a" * 64, True),
        ("busybox", False),
        ("busybox:latest", False),
        ("kueue/kueue:release-0.19", False),
        ("localhost:5000/img", False),
        ("img:main", False),
    ],
)
def test_image_pinning(overlay, image, pinned):
    obj = _deployment(overlay)
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
    assert (checks.image_problems(obj) == []) is pinned


@pytest.mark.parametrize(
    "revision, pinned",
    [("1.6.2", True), ("v0.19.2", True), (">=1.6.0", False), ("1.6.*", False),
     ("HEAD", False), ("", False), ("~1.6", False)],
)  # fmt: skip
def test_chart_revisions_must_be_exact(built, revision, pinned):
    apps = by_kind(built["kustomize/argocd/ultra-usc1"], "Application")
    app = copy.deepcopy(next(a for a in apps if a["metadata"]["name"] == "kuberay-operator"))
    app["spec"]["source"]["targetRevision"] = revision
    assert (checks.application_problems(app, validate.OWN_REPO) == []) is pinned


def test_this_repository_is_tracked_on_main(built):
    apps = by_kind(built["kustomize/argocd/ultra-usc1"], "Application")
    app = copy.deepcopy(next(a for a in apps if a["metadata"]["name"] == "platform"))
    assert checks.application_problems(app, validate.OWN_REPO) == []
    app["spec"]["source"]["targetRevision"] = "feature-x"
    assert checks.application_problems(app, validate.OWN_REPO)


def test_unpinned_image_in_chart_values_is_an_error(built):
    apps = by_kind(built["kustomize/argocd/mega-euw4"], "Application")
    app = copy.deepcopy(next(a for a in apps if a["metadata"]["name"] == "kueue"))
    image = app["spec"]["source"]["helm"]["valuesObject"]["controllerManager"]["manager"]["image"]
    image["tag"] = "latest"
    assert any("latest" in p for p in checks.application_problems(app, validate.OWN_REPO))


@pytest.mark.parametrize(
    "value, ok",
    [("grafana-clickhouse-datasource 4.5.1", True), ("grafana-clickhouse-datasource", False),
     ("a 1.0.0,b", False)],
)  # fmt: skip
def test_grafana_plugins_are_pinned(overlay, value, ok):
    grafana = copy.deepcopy(
        next(
            o
            for o in by_kind(overlay("mega-euw4"), "Deployment")
            if o["metadata"]["name"] == "grafana"
        )
    )
    env = grafana["spec"]["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "GF_INSTALL_PLUGINS")["value"] = value
    assert (checks.image_problems(grafana) == []) is ok


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda s: s["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"].update(key="nope"),
         "has no key nope"),
        (lambda s: s["volumes"].append({"name": "x", "configMap": {"name": "missing"}}),
         "ConfigMap missing not found"),
        (lambda s: s.update(serviceAccountName="ghost"), "ServiceAccount ghost not found"),
        (lambda s: s.update(priorityClassName="urgent"), "PriorityClass urgent not found"),
    ],
)  # fmt: skip
def test_dangling_references_are_reported(overlay, mutate, problem):
    objects = copy.deepcopy(overlay("mega-euw4"))
    collector = next(o for o in objects if o["metadata"]["name"] == "otel-collector"
                     and o["kind"] == "Deployment")  # fmt: skip
    mutate(collector["spec"]["template"]["spec"])
    assert any(problem in p for p in validate.check_objects(objects, "1.32"))


def test_binding_to_a_missing_role_is_reported(overlay):
    objects = copy.deepcopy(overlay("mega-euw4"))
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    binding["roleRef"]["name"] = "no-such-role"
    assert any("no-such-role not found" in p for p in validate.check_objects(objects, "1.32"))


def unpinned_tree(tmp_path):
    """A copy of the sources with an unpinned image, chart and Grafana plugin."""
    for folder in ("kustomize", "clusters"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    edits = [
        ("kustomize/bases/observability/grafana/grafana.yaml", "grafana/grafana:11.4.0",
         "grafana/grafana:latest"),
        ("kustomize/bases/observability/grafana/grafana.yaml",
         "grafana-clickhouse-datasource 4.5.1", "grafana-clickhouse-datasource"),
        ("kustomize/argocd/base/kueue.yaml", "targetRevision: 0.19.2", "targetRevision: 0.19.*"),
    ]  # fmt: skip
    for rel, old, new in edits:
        path = tmp_path / rel
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    return tmp_path


def test_the_script_fails_on_unpinned_versions(tmp_path):
    """scripts/validate itself, on a tree with unpinned versions: exit 1, each one named."""
    env = {**os.environ, "PLATFORM_ROOT": str(unpinned_tree(tmp_path))}
    script = ROOT / "scripts" / "validate"
    out = subprocess.run([str(script), "--only", "ultra-usc1"], capture_output=True, text=True,
                         env=env)  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "image 'grafana/grafana:latest' tag 'latest' is not a release version" in out.stdout
    assert "Grafana plugin 'grafana-clickhouse-datasource' has no pinned version" in out.stdout
    assert "targetRevision '0.19.*' is not an exact version" in out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("FAILED:")


def test_an_unpinned_image_in_the_list_is_bad_input(tmp_path, monkeypatch, capsys):
    """kustomize/images.yaml is input: one line naming the file and field, exit 2."""
    tree = unpinned_tree(tmp_path)
    images = tree / "kustomize/images.yaml"
    images.write_text(images.read_text().replace("2.60.0-py311-gpu", "latest"))
    monkeypatch.setenv("PLATFORM_ROOT", str(tree))
    assert validate.main([]) == 2
    err = capsys.readouterr().err
    assert err == "error: kustomize/images.yaml: images[1].image: 'rayproject/ray:latest' " \
                  "tag 'latest' is not a release version\n"  # fmt: skip
