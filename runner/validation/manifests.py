"""Validate rendered manifests: Kubernetes OpenAPI schemas and KubeRay CRD fields.

Core objects (ConfigMap, Job, Deployment) are checked against the strict JSON schemas that
`kubernetes-validate` ships, for the schema version nearest below the cluster's
`kubernetes_version`. Pod templates inside RayJob/RayCluster are checked as a v1
`PodTemplate` (with the custom object's metadata). RayJob/RayCluster keys are checked
against `runner/schemas/kuberay.json` (derived from KubeRay's CRDs by
`python -m runner.schemas.derive`). Compiled validators are cached per version and kind.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from catalog.errors import InputError
from runner.validation.shapes import constrains_values, references, shape

KUBERAY_API = "ray.io/v1"


@functools.cache
def schema_version(kubernetes_version: str) -> str:
    """The newest bundled schema version not newer than `kubernetes_version` (e.g. 1.33)."""
    from kubernetes_validate import utils
    from packaging.version import Version

    wanted = Version(kubernetes_version)
    usable = [v for v in utils.all_versions() if Version(utils.major_minor(v)) <= wanted]
    if not usable:
        raise InputError(None, "kubernetes_version", f"{kubernetes_version} has no schemas")
    return usable[-1]


def _schema_file(version: str, name: str) -> Any:
    folder = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    return json.loads(folder.joinpath(f"v{version}-local-strict", name).read_text())


@functools.cache
def _validator(version: str, kind: str, api_version: str):
    import jsonschema
    from referencing import Registry, Resource

    group = api_version.split("/")[0].split(".")[0] + "-" if "/" in api_version else ""
    base = api_version.split("/")[-1]
    try:
        schema = _schema_file(version, f"{kind.lower()}-{group}{base}.json")
    except FileNotFoundError:
        return None
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_definitions(version)) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def _definitions(version: str) -> Any:
    return _schema_file(version, "_definitions.json")


@functools.cache
def kuberay_fields() -> dict[str, dict[str, list[str]]]:
    text = resources.files("runner").joinpath("schemas", "kuberay.json").read_text()
    return json.loads(text)["paths"]


@functools.cache
def shape_cacheable(version: str, kind: str, api_version: str) -> bool:
    """True when only keys and leaf types matter below the top-level apiVersion/kind enums."""
    validator = _validator(version, kind, api_version)
    if validator is None:
        return False
    top = validator.schema
    defs = _definitions(version)["$defs"]
    fields = {k: v for k, v in top.get("properties", {}).items() if k not in ("apiVersion", "kind")}
    seen, stack = set(), list(references(fields))
    if constrains_values(fields):
        return False
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if constrains_values(defs[name]):
            return False
        stack.extend(references(defs[name]))
    return True


_valid_shapes: set[str] = set()


def _where(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def check_schema(obj: dict, kubernetes_version: str, source: str, label: str) -> None:
    """Validate one core object; an unknown kind or a schema violation is an InputError."""
    version = schema_version(kubernetes_version)
    validator = _validator(version, obj.get("kind", ""), obj.get("apiVersion", ""))
    if validator is None:
        raise InputError(source, label, f"no Kubernetes {version} schema for {obj.get('kind')}")
    key = None
    if shape_cacheable(version, obj["kind"], obj["apiVersion"]):
        key = json.dumps([version, obj["apiVersion"], obj["kind"], shape(obj)])
        if key in _valid_shapes:
            return
    error = next(iter(validator.iter_errors(obj)), None)
    if error is not None:
        message = error.message if len(error.message) < 160 else error.message[:157] + "..."
        raise InputError(source, label, f"invalid at {_where(error)}: {message}")
    if key is not None:
        _valid_shapes.add(key)


def check_fields(node: Any, path: str, source: str, label: str) -> None:
    """Keys of one KubeRay object node against the CRD's allowed and required keys."""
    fields = kuberay_fields()[path]
    if not isinstance(node, dict):
        raise InputError(source, label, f"{path} must be a mapping")
    unknown = sorted(set(node) - set(fields["allowed"]))
    if unknown:
        raise InputError(source, label, f"{path}: unknown field(s) {', '.join(unknown)}")
    missing = sorted(set(fields["required"]) - set(node))
    if missing:
        raise InputError(source, label, f"{path}: missing field(s) {', '.join(missing)}")


def _pod_template(obj: dict, template: Any, version: str, source: str, label: str) -> None:
    wrapper = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": obj.get("metadata", {}),
        "template": template,
    }
    check_schema(wrapper, version, source, label)


def check_ray_cluster_spec(obj: dict, spec: Any, version: str, source: str, label: str) -> None:
    check_fields(spec, "RayCluster.spec", source, label)
    head = spec["headGroupSpec"]
    check_fields(head, "headGroupSpec", source, label)
    _pod_template(obj, head["template"], version, source, f"{label} head")
    for i, group in enumerate(spec.get("workerGroupSpecs", [])):
        check_fields(group, "workerGroupSpecs[]", source, label)
        _pod_template(obj, group["template"], version, source, f"{label} workers[{i}]")


def check_kuberay(obj: dict, version: str, source: str, label: str) -> None:
    """A RayJob or RayCluster: CRD keys at every level, pod templates as PodTemplateSpec."""
    kind = obj["kind"]
    if obj.get("apiVersion") != KUBERAY_API:
        raise InputError(source, label, f"apiVersion must be {KUBERAY_API}")
    check_fields(obj, kind, source, label)
    if kind == "RayJob":
        check_fields(obj["spec"], "RayJob.spec", source, label)
        submitter = obj["spec"].get("submitterPodTemplate")
        if submitter is not None:
            _pod_template(obj, submitter, version, source, f"{label} submitter")
        cluster_spec = obj["spec"].get("rayClusterSpec")
        if cluster_spec is not None:
            check_ray_cluster_spec(obj, cluster_spec, version, source, label)
    else:
        check_ray_cluster_spec(obj, obj["spec"], version, source, label)


def validate_manifests(manifests: list[dict], kubernetes_version: str, source: str) -> None:
    """Validate every rendered object of a run; the first problem is an InputError."""
    for obj in manifests:
        label = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        if obj.get("kind") in ("RayJob", "RayCluster"):
            check_kuberay(obj, kubernetes_version, source, label)
        else:
            check_schema(obj, kubernetes_version, source, label)
