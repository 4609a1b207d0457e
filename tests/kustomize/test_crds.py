"""Custom resources validate against their pinned CRDs: structure and CEL rules.

Covers the four upstreams the platform ships resources of (KubeRay, Kueue, Argo CD,
Managed Prometheus) and the runs rendered into apps/; each case breaks one rule and
expects the validator to name it.
"""

from __future__ import annotations

import copy

import pytest

from kustomize.tooling import cel, crds, validate
from tests.kustomize.conftest import ROOT, by_kind

SHIPPED = [
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayCluster"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("argoproj.io/v1alpha1", "Application"),
    ("argoproj.io/v1alpha1", "AppProject"),
    ("monitoring.googleapis.com/v1", "PodMonitoring"),
    ("monitoring.googleapis.com/v1", "ClusterPodMonitoring"),
]


@pytest.mark.parametrize(("api", "kind"), SHIPPED)
def test_every_shipped_kind_has_a_pinned_schema(api, kind):
    schema = crds.load(api, kind)
    assert schema is not None and schema["x-scope"] in ("Namespaced", "Cluster")


def test_cel_rules_are_kept_from_the_crds():
    flavor = crds.load("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
    assert "x-kubernetes-validations" in str(flavor)


def app(name: str) -> list[dict]:
    return validate.app_objects(ROOT, name.split("/")[0])[f"apps/{name}"]


def rayjob() -> dict:
    [job] = [o for o in app("ultra-usc1/research/tiny-lm.yaml") if o["kind"] == "RayJob"]
    return copy.deepcopy(job)


def test_rendered_runs_validate_against_the_kuberay_crds():
    for cluster in ("ultra-usc1", "mega-euw4"):
        for rel, objects in validate.app_objects(ROOT, cluster).items():
            assert validate.check_apps(objects, "1.32") == [], rel


def test_rayjob_with_an_unknown_field_fails_its_crd():
    job = rayjob()
    job["spec"]["entrypointNumGpu"] = 1
    assert any("entrypointNumGpu" in p for p in validate.check_apps([job], "1.33"))


def test_rayjob_breaking_a_cel_rule_fails():
    job = rayjob()
    job["spec"]["managedBy"] = "someone-else"
    problems = validate.check_apps([job], "1.33")
    assert any("spec.managedBy: the managedBy field value must be either" in p for p in problems)


def test_resource_flavor_breaking_a_cel_rule_fails(overlay):
    flavor = copy.deepcopy(by_kind(overlay("ultra-usc1"), "ResourceFlavor")[0])
    flavor["spec"]["tolerations"] = [{"operator": "Exists", "value": "x", "effect": "NoSchedule"}]
    problems = validate.check_objects([flavor], "1.33", scoped=False)
    assert any("a value must be empty when 'operator' is 'Exists'" in p for p in problems)


def test_cluster_queue_breaking_a_cel_rule_fails(overlay):
    queue = copy.deepcopy(by_kind(overlay("ultra-usc1"), "ClusterQueue")[0])
    group = queue["spec"]["resourceGroups"][0]
    group["flavors"][0]["resources"] = group["flavors"][0]["resources"][:1]
    problems = validate.check_objects([queue], "1.33", scoped=False)
    assert any("resourceGroups[0]" in p for p in problems), problems


@pytest.mark.parametrize(
    ("rule", "value", "result"),
    [
        ("self.all(x, x.effect in ['NoSchedule', 'NoExecute'])", [{"effect": "NoSchedule"}], True),
        ("self.all(x, x.effect in ['NoSchedule', 'NoExecute'])", [{"effect": "Bad"}], False),
        ("self.foo == 1", {}, False),  # a missing field fails, as on the API server
        ("self == oldSelf", 1, None),  # a transition rule needs the old object
        ("self.frobnicate(", 1, None),  # not parseable here: counted, not passed
    ],
)
def test_cel_evaluation_table(rule, value, result):
    assert cel.evaluate(rule, value) is result


def test_validate_reports_what_it_could_not_evaluate(capsys):
    assert validate.main(["--only", "ultra-usc1-node-addons"]) == 0
    out = capsys.readouterr().out
    assert "CEL rules: " in out and "transition rules" in out
