"""Manifest validation: Kubernetes schemas per cluster version, pod templates, KubeRay fields."""

from __future__ import annotations

import copy

import pytest
import yaml

from catalog.errors import InputError
from runner.render import render_run
from runner.schemas.derive import derive
from runner.spec import load_run
from runner.validation import manifests as mv
from runner.validation import shapes


@pytest.fixture(scope="module")
def rayjob() -> list[dict]:
    return render_run(load_run("runs/examples/tiny-lm.yaml"))


@pytest.mark.parametrize(
    ("wanted", "used"), [("1.33", "1.33.0"), ("1.32", "1.32.0"), ("1.99", None)]
)
def test_schema_version_maps_to_the_newest_not_newer(wanted, used):
    found = mv.schema_version(wanted)
    if used:
        assert found == used
    else:
        assert found.startswith("1.") and int(found.split(".")[1]) >= 37


def test_schema_version_too_old():
    with pytest.raises(InputError, match="has no schemas"):
        mv.schema_version("1.10")


def _broken(manifests, path, value):
    objs = copy.deepcopy(manifests)
    node = objs
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return objs


WORKER = [1, "spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            WORKER + ["containers", 0, "imagePullPolicy2"],
            "x",
            "RayJob tiny-lm workers[0]: invalid at template.spec.containers.0: Additional",
        ),
        (
            WORKER + ["containers", 0, "resources"],
            "lots",
            "RayJob tiny-lm workers[0]: invalid at template.spec.containers.0.resources: 'lots'",
        ),
        (
            WORKER + ["volumes"],
            {"name": "x"},
            "RayJob tiny-lm workers[0]: invalid at template.spec.volumes",
        ),
        ([1, "spec", "suspendd"], True, "RayJob tiny-lm: RayJob.spec: unknown field(s) suspendd"),
        (
            [1, "spec", "rayClusterSpec", "headGroupSpec", "replicas"],
            1,
            "RayJob tiny-lm: headGroupSpec: unknown field(s) replicas",
        ),
        ([0, "data"], {"A": 1}, "ConfigMap tiny-lm-env: invalid at data.A: 1 is not of type"),
        ([0, "kind"], "Secret2", "Secret2 tiny-lm-env: no Kubernetes 1.33.0 schema for Secret2"),
    ],
)
def test_validation_catches_bad_objects(rayjob, path, value, message):
    with pytest.raises(InputError) as err:
        mv.validate_manifests(_broken(rayjob, path, value), "1.33", "runs/x.yaml")
    line = err.value.line()
    assert line.startswith("runs/x.yaml: ") and message in line
    assert "\n" not in line


def test_required_kuberay_fields(rayjob):
    objs = copy.deepcopy(rayjob)
    del objs[1]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"]
    with pytest.raises(InputError, match=r"workerGroupSpecs\[\]: missing field\(s\) groupName"):
        mv.validate_manifests(objs, "1.33", "x")


def test_shape_cache_never_hides_a_different_shape(rayjob):
    mv.validate_manifests(rayjob, "1.33", "x")  # cached as valid
    bad = _broken(rayjob, WORKER + ["hostNetwork"], "yes")  # a string where a bool belongs
    with pytest.raises(InputError, match="hostNetwork"):
        mv.validate_manifests(bad, "1.33", "x")


def test_shape_keeps_keys_and_types():
    assert shapes.shape({"a": ["x", 1, 1.5, True, None]}) == {
        "a": ["str", "int", "float", True, None]
    }
    assert shapes.constrains_values({"properties": {"a": {"type": "string", "pattern": "^x$"}}})
    assert not shapes.constrains_values({"properties": {"a": {"type": "string", "format": "x"}}})


def test_derive_reads_crd_field_lists(tmp_path):
    def crd(spec: dict) -> dict:
        schema = {"properties": {"apiVersion": {}, "kind": {}, "metadata": {}, "spec": spec}}
        return {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}

    group = {"properties": {"template": {}, "rayStartParams": {}}, "required": ["template"]}
    cluster_spec = {"properties": {"headGroupSpec": group, "workerGroupSpecs": {"items": group}}}
    job_spec = {"properties": {"entrypoint": {}, "rayClusterSpec": cluster_spec}}
    (tmp_path / "ray.io_rayjobs.yaml").write_text(yaml.safe_dump(crd(job_spec)))
    (tmp_path / "ray.io_rayclusters.yaml").write_text(yaml.safe_dump(crd(cluster_spec)))
    data = derive(tmp_path, "v0")
    assert data["paths"]["RayJob.spec"]["allowed"] == ["entrypoint", "rayClusterSpec"]
    assert data["paths"]["headGroupSpec"]["required"] == ["template"]


def test_committed_kuberay_fields_cover_what_we_render():
    fields = mv.kuberay_fields()
    assert {
        "shutdownAfterJobFinishes",
        "ttlSecondsAfterFinished",
        "entrypoint",
        "submissionMode",
        "runtimeEnvYAML",
    } <= set(fields["RayJob.spec"]["allowed"])
    assert fields["workerGroupSpecs[]"]["required"] == sorted(
        ["groupName", "maxReplicas", "minReplicas", "template"]
    )
