"""Checks of rendered objects: schemas, scope, duplicates and pinned versions.

Built-in kinds are validated (strictly: unknown fields are errors) against the Kubernetes
JSON schemas of the cluster's version from `kubernetes-validate`; custom resources against
the derived CRD schemas in `kustomize/schemas/` (`kustomize.tooling.crds`). A kind known to
neither is an error, never a silent skip.
"""

from __future__ import annotations

import functools
import re

import jsonschema
import referencing
from kubernetes_validate import utils as kv

from kustomize.tooling import crds
from kustomize.tooling.images import image_problem

# Built-in kinds that are not namespaced (everything else built in is).
CLUSTER_SCOPED = {
    "Namespace", "Node", "PersistentVolume", "PriorityClass", "StorageClass", "ClusterRole",
    "ClusterRoleBinding", "CustomResourceDefinition", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "APIService", "IngressClass", "RuntimeClass",
    "CSIDriver", "VolumeAttachment", "PriorityLevelConfiguration", "FlowSchema",
}  # fmt: skip
SEMVER = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
OWN_REPO_REVISIONS = {"main"}


def schema_version(kubernetes_version: str) -> str:
    """`1.33` -> `1.33.0`, the form kubernetes-validate expects."""
    return kubernetes_version if kubernetes_version.count(".") == 2 else f"{kubernetes_version}.0"


@functools.cache
def _builtin_validator(version: str, api_version: str, kind: str):
    """A cached strict validator of one built-in kind; None when no schema exists."""
    desired = schema_version(version)
    schema_version_ = [v for v in kv.all_versions() if kv.major_minor(v) <= kv.major_minor(desired)]
    if not schema_version_:
        return None
    folder = f"v{schema_version_[-1]}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(
            f"kubernetes-json-schema/{folder}/{kind.lower()}-{group}.json", desired
        )
    except FileNotFoundError:
        return None
    defs = kv.schema_contents(f"kubernetes-json-schema/{folder}/_definitions.json", desired)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(defs) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def ident(obj: dict) -> str:
    meta = obj.get("metadata", {})
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {ns}{meta.get('name')}"


def schema_problems(obj: dict, kubernetes_version: str) -> list[str]:
    """Schema violations of one object (built-in or custom resource)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    validator = _builtin_validator(kubernetes_version, api_version, kind)
    if validator is not None:
        return [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in validator.iter_errors(obj)
        ]
    found = crds.problems(obj)
    if found is None:
        return [f"no schema for {api_version} {kind} (Kubernetes {kubernetes_version} or "
                "kustomize/schemas/)"]  # fmt: skip
    return found


def scope_problem(obj: dict) -> str | None:
    """A namespaced object without a namespace, or a cluster-scoped one with one."""
    kind = obj.get("kind", "")
    custom = crds.scope(obj.get("apiVersion", ""), kind)
    cluster_scoped = custom == "Cluster" if custom else kind in CLUSTER_SCOPED
    has_ns = bool(obj.get("metadata", {}).get("namespace"))
    if cluster_scoped and has_ns:
        return "cluster-scoped kind has a namespace"
    if not cluster_scoped and not has_ns:
        return "namespaced kind has no namespace"
    return None


def pod_specs(obj: dict) -> list[dict]:
    """The pod specs inside a workload object (Pod, Deployment, DaemonSet, Job, CronJob...)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return [spec]
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    return [template.get("spec", {})] if isinstance(template, dict) else []


def containers(obj: dict) -> list[dict]:
    """Every container of a workload, including those of KubeRay's head and worker groups."""
    specs = pod_specs(obj)
    spec = obj.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or (spec if obj.get("kind") == "RayCluster" else {})
    groups = [cluster.get("headGroupSpec") or {}, *(cluster.get("workerGroupSpecs") or [])]
    specs += [g.get("template", {}).get("spec", {}) for g in groups if g]
    return [c for s in specs for key in ("initContainers", "containers")
            for c in s.get(key) or []]  # fmt: skip


def image_problems(obj: dict) -> list[str]:
    """Every container image pinned; Grafana plugins installed at a version."""
    found = []
    for spec in pod_specs(obj):
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(group) or []:
                problem = image_problem(c.get("image", ""))
                if problem:
                    found.append(f"container {c.get('name')}: image {c.get('image')!r} {problem}")
                for env in c.get("env") or []:
                    if env.get("name") == "GF_INSTALL_PLUGINS":
                        found += _plugin_problems(env.get("value", ""))
    return found


def _plugin_problems(value: str) -> list[str]:
    """Grafana plugins as `id version[,id version]`; each must name its version."""
    return [
        f"Grafana plugin {item.strip()!r} has no pinned version"
        for item in value.split(",")
        if len(item.split()) != 2 or not SEMVER.match(item.split()[-1])
    ]


def application_problems(obj: dict, own_repo: str) -> list[str]:
    """Argo CD Applications: charts at an exact version, this repository at its branch."""
    if obj.get("kind") != "Application":
        return []
    spec = obj.get("spec", {})
    sources = spec.get("sources") or [spec.get("source") or {}]
    found = []
    for src in sources:
        rev = str(src.get("targetRevision", ""))
        if src.get("repoURL") == own_repo:
            if rev not in OWN_REPO_REVISIONS:
                found.append(f"this repository tracked at {rev!r}, expected main")
        elif not SEMVER.match(rev):
            found.append(f"{src.get('repoURL')}: targetRevision {rev!r} is not an exact version")
        values = (src.get("helm") or {}).get("valuesObject") or {}
        found += [f"values {p}" for p in values_image_problems(values)]
    return found


def values_image_problems(values: object, path: str = "") -> list[str]:
    """Helm values: every `image: {repository, tag}` must carry a release tag."""
    found = []
    if isinstance(values, dict):
        if "repository" in values and "tag" in values:
            ref = f"{values['repository']}:{values['tag']}"
            problem = image_problem(ref)
            if problem:
                found.append(f"{path or '(root)'}: image {ref!r} {problem}")
        for key, value in values.items():
            found += values_image_problems(value, f"{path}.{key}" if path else str(key))
    elif isinstance(values, list):
        for i, value in enumerate(values):
            found += values_image_problems(value, f"{path}[{i}]")
    return found


def duplicates(objects: list[dict]) -> list[str]:
    seen: set[str] = set()
    dups = []
    for obj in objects:
        key = f"{obj.get('apiVersion', '').split('/')[0]} {ident(obj)}"
        if key in seen:
            dups.append(f"{ident(obj)}: defined twice")
        seen.add(key)
    return dups
