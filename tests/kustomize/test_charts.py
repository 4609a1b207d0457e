"""Chart values are linted against the pinned chart's values shape; charts render with
the real helm when their sources are at hand."""

from __future__ import annotations

import json

import pytest

from kustomize.tooling import charts, validate
from tests.kustomize.conftest import ROOT, by_kind


@pytest.mark.parametrize(
    "values, expected, problems",
    [
        ({"a": 1}, {"a": "scalar"}, []),
        ({"b": 1}, {"a": "scalar"}, ["b: the chart has no such value"]),
        ({"a": {"x": 1}}, {"a": "scalar"}, ["a: expected a single value"]),
        ({"a": 1}, {"a": {"x": "scalar"}}, ["a: expected a map"]),
        ({"a": {"anything": {"deep": 1}}}, {"a": charts.FREE}, []),
        ({"a": [1]}, {"a": "list"}, []),
        ({"a": 1}, {"a": "list"}, ["a: expected a list"]),
        ({"resources": {"requests": {"cpu": 1}}}, {"resources": {"limits": "free"}}, []),
    ],
)
def test_lint(values, expected, problems):
    assert charts.lint(values, expected) == problems


def test_shape_of_defaults():
    defaults = {"a": {"b": 1, "c": []}, "d": {}, "e": None, "f": "x"}
    assert charts.shape(defaults) == {"a": {"b": "scalar", "c": "list"}, "d": "free",
                                      "e": "free", "f": "scalar"}  # fmt: skip


def chart_apps(built):
    apps = by_kind(built["kustomize/argocd/ultra-usc1"], "Application")
    return [a for a in apps if charts.chart_source(a)]


def test_every_chart_application_has_a_committed_values_shape(built):
    apps = chart_apps(built)
    assert {a["metadata"]["name"] for a in apps} == {"kueue", "kuberay-operator", "temporal"}
    for app in apps:
        src = charts.chart_source(app)
        assert charts.shape_file(src["chart"], src["targetRevision"]).is_file()
        assert charts.values_problems(app) == []


def test_a_misspelt_value_is_caught(built):
    app = next(a for a in chart_apps(built) if a["metadata"]["name"] == "temporal")
    app = json.loads(json.dumps(app))
    app["spec"]["source"]["helm"]["valuesObject"]["server"]["replicaCuont"] = 2
    assert any("replicaCuont" in p for p in charts.values_problems(app))


def test_a_bumped_chart_needs_its_shape(built):
    app = json.loads(json.dumps(chart_apps(built)[0]))
    app["spec"]["source"]["targetRevision"] = "99.0.0"
    assert any("no values shape" in p for p in charts.values_problems(app))


def test_kueue_configuration_inside_values_is_checked(built):
    app = json.loads(
        json.dumps(next(a for a in chart_apps(built) if a["metadata"]["name"] == "kueue"))
    )
    values = app["spec"]["source"]["helm"]["valuesObject"]
    values["managerConfig"]["controllerManagerConfigYaml"] = "kind: Other\n"
    assert any("not a Kueue Configuration" in p for p in charts.values_problems(app))


def write_chart(folder, image: str) -> None:
    """A small local chart: a Deployment whose image and replicas come from values."""
    (folder / "templates").mkdir(parents=True)
    (folder / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.2.3\n")
    (folder / "values.yaml").write_text(f"replicas: 1\nimage: {image}\n")
    (folder / "templates/deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
        "  namespace: {{ .Release.Namespace }}\nspec:\n  replicas: {{ .Values.replicas }}\n"
        "  selector: {matchLabels: {app: demo}}\n  template:\n    metadata:\n"
        "      labels: {app: demo}\n    spec:\n      containers:\n        - name: demo\n"
        "          image: {{ .Values.image }}\n"
    )


def demo_app(replicas) -> dict:
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "demo", "namespace": "argocd"},
        "spec": {"project": "platform", "destination": {"namespace": "demo"},
                 "source": {"repoURL": "https://charts.example.com", "chart": "demo",
                            "targetRevision": "1.2.3",
                            "helm": {"valuesObject": {"replicas": replicas}}}},
    }  # fmt: skip


def test_helm_renders_a_chart_application_and_its_objects_validate(tmp_path, helm):
    write_chart(tmp_path / "demo", "busybox:1.37.0")
    folder = charts.find_chart(tmp_path, "demo", "1.2.3")
    assert folder == tmp_path / "demo"
    objects = charts.render(demo_app(3), folder, helm, "1.33.0")
    (deployment,) = objects
    assert deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["namespace"] == "demo"
    assert validate.check_rendered_chart(objects, "1.33") == []


def test_rendered_chart_problems_are_reported(tmp_path, helm):
    write_chart(tmp_path / "demo", "busybox:latest")
    folder = charts.find_chart(tmp_path, "demo", "1.2.3")
    problems = validate.check_rendered_chart(
        charts.render(demo_app("x"), folder, helm, "1.33.0"), "1.33"
    )
    assert any("latest" in p for p in problems)
    assert any("replicas" in p for p in problems)


def test_shapes_are_json_maps():
    for path in (ROOT / "kustomize/charts").glob("*.json"):
        assert isinstance(json.loads(path.read_text()), dict), path


def test_crd_schemas_are_valid_and_scoped():
    import jsonschema

    readme = (ROOT / "kustomize/schemas/README.md").read_text()
    for path in sorted((ROOT / "kustomize/schemas").glob("*.json")):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["x-scope"] in ("Namespaced", "Cluster")
        group, version, _ = path.stem.split("_")
        assert f"`{group}_{version}_*.json`" in readme, path.name
