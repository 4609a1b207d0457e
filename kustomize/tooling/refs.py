"""References between the objects of one overlay: what a pod names must exist beside it.

ConfigMaps (volumes, env, envFrom, with the key when one is named), service accounts,
priority classes and RBAC roles. Secrets are made outside git, so they are not checked.
"""

from __future__ import annotations

from kustomize.tooling.checks import ident, pod_specs

BUILTIN_PRIORITY = {"system-node-critical", "system-cluster-critical"}


def _index(objects: list[dict]) -> dict[tuple[str, str | None, str], dict]:
    return {
        (o.get("kind"), o.get("metadata", {}).get("namespace"), o["metadata"]["name"]): o
        for o in objects
    }


def _configmap_refs(spec: dict) -> list[tuple[str, str | None]]:
    """(ConfigMap name, key or None) a pod spec reads."""
    refs = [(v["configMap"]["name"], None) for v in spec.get("volumes") or [] if "configMap" in v]
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            for env in c.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and not ref.get("optional"):
                    refs.append((ref["name"], ref["key"]))
            for src in c.get("envFrom") or []:
                if "configMapRef" in src and not src["configMapRef"].get("optional"):
                    refs.append((src["configMapRef"]["name"], None))
    return refs


def pod_problems(obj: dict, index: dict) -> list[str]:
    namespace = obj.get("metadata", {}).get("namespace")
    found = []
    for spec in pod_specs(obj):
        for name, key in _configmap_refs(spec):
            cm = index.get(("ConfigMap", namespace, name))
            if cm is None:
                found.append(f"ConfigMap {name} not found in {namespace}")
            elif key is not None and key not in (cm.get("data") or {}):
                found.append(f"ConfigMap {name} has no key {key}")
        account = spec.get("serviceAccountName")
        if account and account != "default" and ("ServiceAccount", namespace, account) not in index:
            found.append(f"ServiceAccount {account} not found in {namespace}")
        priority = spec.get("priorityClassName")
        if (
            priority
            and priority not in BUILTIN_PRIORITY
            and (("PriorityClass", None, priority) not in index)
        ):
            found.append(f"PriorityClass {priority} not found")
    return found


def binding_problems(obj: dict, index: dict) -> list[str]:
    if obj.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
        return []
    ref = obj["roleRef"]
    namespace = obj["metadata"].get("namespace") if ref["kind"] == "Role" else None
    if (ref["kind"], namespace, ref["name"]) not in index:
        return [f"{ref['kind']} {ref['name']} not found"]
    return []


def problems(objects: list[dict]) -> list[str]:
    """Dangling references in a set of objects applied together."""
    index = _index(objects)
    found = []
    for obj in objects:
        items = pod_problems(obj, index) + binding_problems(obj, index)
        found += [f"{ident(obj)}: {item}" for item in items]
    return found
