"""Warden's RBAC covers every Kubernetes API call its adapter makes.

The calls are read from `warden/kube_rest.py` itself (every `self._call(METHOD, PATH)`,
`self._create(PATH)` and `self._stream(PATH)` (a watch) of the real adapter), turned into
(API group, resource, verb) and checked against the ClusterRole and Role the overlay grants
the `warden` service account.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.kustomize.conftest import ROOT, by_kind

ADAPTER = ROOT / "warden" / "kube_rest.py"
VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def template(node: ast.AST, assigned: dict[str, list[ast.AST]]) -> list[str]:
    """The path strings an expression can take, placeholders as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
        return ["".join(parts)]
    if isinstance(node, ast.IfExp):
        return template(node.body, assigned) + template(node.orelse, assigned)
    if isinstance(node, ast.BinOp):
        return template(node.left, assigned)
    if isinstance(node, ast.Name):
        return [t for value in assigned.get(node.id, []) for t in template(value, assigned)]
    return []


def adapter_calls() -> list[tuple[str, str]]:
    """(HTTP method, path template) of every request the real adapter sends."""
    tree = ast.parse(ADAPTER.read_text())
    calls = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        assigned: dict[str, list[ast.AST]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                assigned.setdefault(node.targets[0].id, []).append(node.value)
        for node in ast.walk(func):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "_call" and isinstance(node.args[0], ast.Constant):
                method, path = node.args[0].value, node.args[1]
            elif node.func.attr == "_create" and func.name != "_create":
                method, path = "POST", node.args[0]
            elif node.func.attr == "_stream" and func.name != "_stream":
                method, path = "WATCH", node.args[0]
            else:
                continue
            calls += [(method, t) for t in template(path, assigned)]
    return calls


PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/\{\})?"
    r"/(?P<resource>[a-z]+)(?P<name>/\{\})?(?:/(?P<sub>[a-z]+))?(?:\?.*)?$"
)


def permission(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource[/subresource], RBAC verb) of one request."""
    match = PATH.match(path)
    assert match, f"unrecognised API path {path}"
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    if method == "GET":
        verb = "get" if match["name"] and not match["sub"] else "list"
    elif method == "WATCH":  # a GET with ?watch=1 (RealKube._stream)
        verb = "watch"
    else:
        verb = VERBS[method]
    return match["group"] or "", resource, verb


def allowed(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        for r in rules
    )  # fmt: skip


def test_adapter_calls_are_found():
    calls = adapter_calls()
    methods = {m for m, _ in calls}
    assert {"GET", "PATCH", "POST"} <= methods
    assert len(calls) >= 8


@pytest.mark.parametrize(
    "method, path, expected",
    [
        ("GET", "/api/v1/nodes", ("", "nodes", "list")),
        ("GET", "/api/v1/nodes/{}", ("", "nodes", "get")),
        ("PATCH", "/api/v1/nodes/{}", ("", "nodes", "patch")),
        ("POST", "/api/v1/namespaces/{}/pods/{}/eviction", ("", "pods/eviction", "create")),
        ("GET", "/apis/batch/v1/namespaces/{}/jobs/{}", ("batch", "jobs", "get")),
        (
            "PATCH",
            "/apis/ray.io/v1/namespaces/{}/rayclusters/{}",
            ("ray.io", "rayclusters", "patch"),
        ),
        ("GET", "/api/v1/pods?fieldSelector=x", ("", "pods", "list")),
        ("WATCH", "/api/v1/nodes?watch=1&{}", ("", "nodes", "watch")),
        ("WATCH", "/api/v1/events?{}&watch=1", ("", "events", "watch")),
    ],
)
def test_permission_of_a_request(method, path, expected):
    assert permission(method, path) == expected


@pytest.mark.parametrize("cluster", ["mega-euw4", "ultra-usc1"])
def test_warden_rbac_covers_every_adapter_call(overlay, cluster):
    objs = overlay(cluster)
    cluster_rules = next(
        o for o in by_kind(objs, "ClusterRole") if o["metadata"]["name"] == "warden"
    )
    role = next(o for o in by_kind(objs, "Role") if o["metadata"]["namespace"] == "warden")
    bindings = by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding")
    for kind, name in (("ClusterRole", "warden"), ("Role", role["metadata"]["name"])):
        assert any(
            b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
            and {"kind": "ServiceAccount", "name": "warden", "namespace": "warden"} in b["subjects"]
            for b in bindings
        ), f"{kind} {name} is not bound to warden/warden"
    for method, path in adapter_calls():
        group, resource, verb = permission(method, path)
        # Node-check Jobs live in Warden's namespace: its Role may grant them.
        rules = cluster_rules["rules"] + (role["rules"] if group == "batch" else [])
        assert allowed(rules, group, resource, verb), f"{method} {path} needs {verb} {resource}"


@pytest.mark.parametrize("cluster", ["mega-euw4", "ultra-usc1"])
def test_warden_rbac_grants_nothing_unused(overlay, cluster):
    """Least privilege: every (group, resource, verb) granted is one the adapter uses."""
    objs = overlay(cluster)
    used = {permission(method, path) for method, path in adapter_calls()}
    roles = [o for o in by_kind(objs, "ClusterRole") + by_kind(objs, "Role")
             if o["metadata"]["name"] in ("warden", "warden-checks")]  # fmt: skip
    assert len(roles) == 2
    for role in roles:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert (group, resource, verb) in used, (role["metadata"]["name"], rule)
