"""Security rules of the built overlays, each with a case that breaks it.

- runs' Argo CD project: exactly the kinds runner renders, only into team namespaces;
- a `team-isolation` NetworkPolicy in every team namespace;
- host paths read-only and no privileged container unless listed with a reason;
- Secrets by reference only, each one made by the secret-maker; Grafana, ClickHouse and
  Temporal locked down.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from catalog import load_cluster
from kustomize.tooling import checks, objects, security, security_objects, validate
from tests.kustomize.conftest import ROOT, by_kind

CLUSTERS = ["mega-euw4", "ultra-usc1"]
OVERLAYS = [*CLUSTERS, *(f"{c}-fair-sharing" for c in CLUSTERS)]


def named(objs: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    return next(
        o for o in by_kind(objs, kind)
        if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    )  # fmt: skip


def template_kinds() -> set[tuple[str, str]]:
    """(group, kind) of every object runner/templates/*.j2 writes."""
    found = set()
    for path in (ROOT / "runner" / "templates").glob("*.j2"):
        text = path.read_text()
        for api, kind in re.findall(r"^apiVersion: (\S+)\nkind: (\w+)", text, re.M):
            found.add((api.rpartition("/")[0], kind))
    return found


# --- GitOps gate: the runs' project ------------------------------------------------------


def test_run_kinds_are_what_the_templates_write():
    assert set(security_objects.RUN_KINDS) == template_kinds()


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_runs_project_admits_only_run_kinds_in_team_namespaces(built, cluster):
    objs = built[f"kustomize/argocd/{cluster}"]
    assert named(objs, "Application", "runs", "argocd")["spec"]["project"] == "runs"
    project = named(objs, "AppProject", "runs", "argocd")
    spec = load_cluster(cluster)
    team = spec.teams[0]
    admitted = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": team}}
    assert security_objects.project_admits(project, admitted)
    refused = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "pwn"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": "kube-system"}},
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": "warden"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": team}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"namespace": team}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": team}},
    ]  # fmt: skip
    for obj in refused:
        assert not security_objects.project_admits(project, obj), obj
    assert security.runs_gate_problems(objs) == []


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_rendered_run_passes_the_gate(built, cluster):
    """What runner wrote under apps/<cluster>/ is admitted by the project as it stands."""
    project = named(built[f"kustomize/argocd/{cluster}"], "AppProject", "runs", "argocd")
    for path, objs in validate.app_objects(ROOT, cluster).items():
        for obj in objs:
            assert security_objects.project_admits(project, obj), f"{path}: {checks.ident(obj)}"


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spec"].update(clusterResourceWhitelist=[{"group": "*", "kind": "*"}]),
        lambda p: p["spec"]["namespaceResourceWhitelist"].append({"group": "", "kind": "Secret"}),
        lambda p: p["spec"]["destinations"].append({"server": "x", "namespace": "*"}),
        lambda p: p["spec"]["destinations"].append({"server": "x", "namespace": "kube-*"}),
        lambda p: p["spec"].update(namespaceResourceWhitelist=[]),
    ],
    ids=["cluster-scoped", "extra-kind", "any-namespace", "glob-namespace", "no-kind-list"],
)
def test_gate_check_fails_when_the_project_is_widened(built, change):
    objs = copy.deepcopy(built["kustomize/argocd/ultra-usc1"])
    project = named(objs, "AppProject", "runs", "argocd")
    change(project)
    assert security.runs_gate_problems(objs)
    # and the widened project really admits something the real one refuses
    probes = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "x"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "media"}},
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": "kube-system"}},
    ]  # fmt: skip
    real = named(built["kustomize/argocd/ultra-usc1"], "AppProject", "runs", "argocd")
    assert not any(security_objects.project_admits(real, o) for o in probes)
    assert any(security_objects.project_admits(project, o) for o in probes)


def test_gate_check_fails_when_runs_use_the_platform_project(built):
    objs = copy.deepcopy(built["kustomize/argocd/ultra-usc1"])
    named(objs, "Application", "runs", "argocd")["spec"]["project"] = "platform"
    assert security.runs_gate_problems(objs)


# --- NetworkPolicy per team namespace ----------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_team_namespace_has_its_network_policy(overlay, name):
    objs = overlay(name)
    spec = load_cluster(name.removesuffix("-fair-sharing"))
    for team in spec.teams:
        policy = named(objs, "NetworkPolicy", objects.TEAM_POLICY, team)
        assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Ingress"]
        peers = [p for rule in policy["spec"]["ingress"] for p in rule["from"]]
        for peer in peers:
            if "namespaceSelector" in peer:
                ns = peer["namespaceSelector"]["matchLabels"][objects.NAMESPACE_NAME]
                assert ns in objects.RUN_POD_CLIENTS
            else:
                assert peer == {"podSelector": {}}  # the team's own namespace only
    assert security.team_policy_problems(objs) == []


def test_validate_fails_without_the_team_policy(overlay):
    def media_policy(o: dict) -> bool:
        return o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "media"

    objs = [o for o in overlay("ultra-usc1") if not media_policy(o)]
    problems = validate.check_objects(objs, "1.33")
    assert "Namespace media: no NetworkPolicy team-isolation" in problems


def test_validate_fails_when_the_team_policy_admits_every_namespace(overlay):
    objs = copy.deepcopy(overlay("ultra-usc1"))
    policy = named(objs, "NetworkPolicy", objects.TEAM_POLICY, "media")
    policy["spec"]["ingress"].append({"from": [{"namespaceSelector": {}}]})
    assert any("media/team-isolation" in p for p in security.team_policy_problems(objs))


def test_validate_checks_the_cross_region_policy_of_an_opted_in_team(overlay):
    objs = copy.deepcopy(overlay("ultra-usc1"))
    assert security.team_policy_problems(objs) == []
    policy = named(objs, "NetworkPolicy", objects.SYNC_POLICY, "research")
    policy["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})
    assert any("research/cross-region-synchronizer: spec differs" in p
               for p in security.team_policy_problems(objs))  # fmt: skip
    objs.remove(policy)
    assert "Namespace research: no NetworkPolicy cross-region-synchronizer" in (
        security.team_policy_problems(objs)
    )


def test_validate_refuses_a_policy_a_team_was_not_opted_in_to(overlay):
    objs = copy.deepcopy(overlay("ultra-usc1"))
    extra = copy.deepcopy(named(objs, "NetworkPolicy", objects.SYNC_POLICY, "research"))
    extra["metadata"]["namespace"] = "media"
    objs.append(extra)
    assert "NetworkPolicy media/cross-region-synchronizer: not generated for a team namespace" in (
        security.team_policy_problems(objs)
    )


# --- host paths and privilege ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted({*OVERLAYS, *(f"{c}-node-addons" for c in CLUSTERS)}))
def test_host_paths_are_read_only_and_nothing_is_privileged_unlisted(overlay, name):
    for obj in overlay(name):
        assert security.host_path_problems(obj) == [], checks.ident(obj)


def test_every_listed_exception_has_a_reason():
    for key, reason in {**security.HOST_PATH_WRITERS, **security.PRIVILEGED}.items():
        assert len(reason) > 20, key


@pytest.mark.parametrize(
    ("workload", "namespace", "change", "expected"),
    [
        ("dcgm-exporter", "observability",
         lambda c: c["volumeMounts"][0].pop("readOnly"), "host path /home/kubernetes/bin/nvidia"),
        ("fluent-bit", "observability",
         lambda c: c["volumeMounts"][1].update(readOnly=False), "/var/lib/nccl-inspector"),
        ("fluent-bit", "observability",
         lambda c: c.update(securityContext={"privileged": True}), "privileged"),
    ],
    ids=["dcgm-libs-writable", "fluent-bit-nccl-writable", "fluent-bit-privileged"],
)  # fmt: skip
def test_validate_fails_on_a_writable_host_path_or_privilege(overlay, workload, namespace,
                                                             change, expected):  # fmt: skip
    objs = copy.deepcopy(overlay("ultra-usc1"))
    daemonset = named(objs, "DaemonSet", workload, namespace)
    change(daemonset["spec"]["template"]["spec"]["containers"][0])
    problems = validate.check_objects(objs, "1.33")
    assert any(expected in p and workload in p for p in problems), problems


# --- Secrets by reference, each one made by the secret-maker -----------------------------


def secret_refs(obj: dict) -> list[tuple[str, str]]:
    """(secret, key) of every secretKeyRef of a workload's containers."""
    out = []
    for c in checks.containers(obj):
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                out.append((ref["name"], ref["key"]))
    return out


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_secret_referenced_is_made_by_the_secret_maker(overlay, cluster):
    spec = load_cluster(cluster)
    made = set()
    for s in security_objects.secret_specs(spec):
        for ns in [s["namespace"], *s.get("copy_to", [])]:
            made |= {(ns, s["name"], key) for key in s["keys"]}
    referenced = 0
    for obj in overlay(cluster):
        namespace = obj["metadata"].get("namespace")
        for name, key in secret_refs(obj):
            referenced += 1
            assert (namespace, name, key) in made, f"{checks.ident(obj)}: {name}/{key}"
    assert referenced >= 6
    for team in spec.teams:
        assert {
            (team, *security_objects.CHECKPOINT_KEY),
            (team, *security_objects.RAY_TOKEN),
        } <= made


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_secret_maker_may_write_exactly_where_it_must(overlay, cluster):
    spec = load_cluster(cluster)
    bindings = [b for b in by_kind(overlay(cluster), "RoleBinding")
                if b["roleRef"]["name"] == "secret-maker"]  # fmt: skip
    assert {b["metadata"]["namespace"] for b in bindings} == set(
        security_objects.secret_namespaces(spec)
    )
    role = named(overlay(cluster), "ClusterRole", "secret-maker")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "verbs": ["get", "create"]}]  # fmt: skip
    assert not any(b["roleRef"]["name"] == "secret-maker"
                   for b in by_kind(overlay(cluster), "ClusterRoleBinding"))  # fmt: skip
    specs = named(overlay(cluster), "ConfigMap", "secret-maker-specs", "platform-secrets")
    import json

    assert json.loads(specs["data"]["secrets.json"]) == security_objects.secret_specs(spec)


def test_grafana_has_no_anonymous_access_and_a_secret_admin_password(overlay):
    grafana = named(overlay("ultra-usc1"), "Deployment", "grafana", "observability")
    env = {e["name"]: e for e in checks.containers(grafana)[0]["env"]}
    assert env["GF_AUTH_ANONYMOUS_ENABLED"]["value"] == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "grafana-admin"
    sources = yaml.safe_load((ROOT / "kustomize/bases/observability/grafana/datasources.yaml")
                             .read_text())["datasources"]  # fmt: skip
    clickhouse = next(s for s in sources if s["uid"] == "clickhouse")
    assert clickhouse["jsonData"]["username"] == "reader"
    assert clickhouse["secureJsonData"]["password"] == "$CLICKHOUSE_READER_PASSWORD"


def test_clickhouse_users_take_passwords_from_the_environment():
    tree = ET.parse(ROOT / "kustomize/bases/observability/clickhouse/users.xml")
    users = tree.getroot().find("users")
    default = users.find("default")
    assert [ip.text for ip in default.find("networks")] == ["::1", "127.0.0.1"]
    for user, env in (("writer", "CLICKHOUSE_WRITER_PASSWORD"),
                      ("reader", "CLICKHOUSE_READER_PASSWORD")):  # fmt: skip
        password = users.find(user).find("password")
        assert password.attrib == {"from_env": env} and not (password.text or "").strip()
    runs_grants = [q.text for q in users.find("runs").find("grants")]
    assert runs_grants == ["GRANT INSERT ON platform.run_metrics"]
    assert users.find("runs").find("password").attrib == {"from_env": "CLICKHOUSE_RUNS_PASSWORD"}
    reader_grants = [q.text for q in users.find("reader").find("grants")]
    assert all(q.startswith("GRANT SELECT ON ") for q in reader_grants)
    assert users.find("reader").find("profile").text == "read_only"


def test_collectors_sign_in_to_clickhouse_as_the_writer():
    base = ROOT / "kustomize/bases/observability"
    otel = yaml.safe_load((base / "otel-collector/config.yaml").read_text())
    assert otel["exporters"]["clickhouse"]["username"] == "writer"
    assert otel["exporters"]["clickhouse"]["password"] == "${env:CLICKHOUSE_PASSWORD}"
    conf = (base / "fluent-bit/fluent-bit.conf").read_text()
    assert re.search(r"^\s+HTTP_User\s+writer$", conf, re.M)
    assert re.search(r"^\s+HTTP_Passwd\s+\$\{CLICKHOUSE_PASSWORD\}$", conf, re.M)


def test_temporal_admits_only_warden_and_its_own_pods(overlay):
    policy = named(overlay("ultra-usc1"), "NetworkPolicy", "temporal", "warden")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "temporal"}}
    peers = {(p["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
              tuple(x["port"] for x in rule.get("ports", [])))
             for rule in policy["spec"]["ingress"] for p in rule["from"]}  # fmt: skip
    assert peers == {("temporal", ()), ("warden", (7233,))}
    for rule in policy["spec"]["ingress"]:
        assert all(set(p) == {"podSelector"} for p in rule["from"])  # no namespace peers


@pytest.mark.parametrize(
    ("workload", "kind"),
    [("fluent-bit", "DaemonSet"), ("otel-collector", "Deployment"), ("grafana", "Deployment")],
)
def test_platform_containers_drop_capabilities(overlay, workload, kind):
    obj = named(overlay("ultra-usc1"), kind, workload, "observability")
    for c in checks.containers(obj):
        context = c["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["allowPrivilegeEscalation"] is False


# --- rendered runs (apps/): the rule runner's pods must keep -----------------------------


def rayjob(mount: dict, context: dict, container: str = "ray-worker") -> dict:
    pod = {"containers": [{"name": container, "volumeMounts": [mount], "securityContext": context}],
           "volumes": [{"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}},
                       {"name": "sys", "hostPath": {"path": "/sys"}}]}  # fmt: skip
    cluster = {"workerGroupSpecs": [{"template": {"spec": pod}}]}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"namespace": "media"},
            "spec": {"rayClusterSpec": cluster}}  # fmt: skip


SAFE = {"allowPrivilegeEscalation": False}


@pytest.mark.parametrize(
    ("run", "problem"),
    [
        (rayjob({"name": "gib", "mountPath": "/g", "readOnly": True}, SAFE), None),
        (rayjob({"name": "gib", "mountPath": "/g"}, SAFE), "host path /home/kubernetes/bin/gib"),
        (rayjob({"name": "gib", "mountPath": "/g", "readOnly": True}, {}), "allowPrivilege"),
        (rayjob({"name": "gib", "mountPath": "/g", "readOnly": True}, {**SAFE, "privileged": True}),
         "privileged"),
        (rayjob({"name": "sys", "mountPath": "/hostsysfs"}, SAFE, "tcpxo-daemon"), None),
        (rayjob({"name": "sys", "mountPath": "/hostsysfs"}, SAFE), "host path /sys"),
    ],
    ids=["read-only", "writable", "escalation", "privileged", "tcpxo-sysfs", "sysfs"],
)  # fmt: skip
def test_run_pod_rule(run, problem):
    found = security.run_pod_problems(run)
    assert (found == []) if problem is None else any(problem in p for p in found), found


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_platform_containers_never_escalate(overlay, cluster):
    """Every container of the platform overlay forbids privilege escalation, except the ones
    PRIVILEGED lists (a privileged container has every privilege anyway)."""
    for obj in overlay(cluster):
        namespace, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        for c in checks.containers(obj):
            if (namespace, name, c["name"]) in security.PRIVILEGED:
                continue
            context = c.get("securityContext") or {}
            assert context.get("allowPrivilegeEscalation") is False, (name, c["name"])
            assert not context.get("capabilities", {}).get("add"), (name, c["name"])


def test_researchers_read_only_their_ray_token(overlay):
    role = named(overlay("ultra-usc1"), "ClusterRole", "training-researcher")
    secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
    wanted = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
              "resourceNames": [security_objects.RAY_TOKEN[0]]}  # fmt: skip
    assert secret_rules == [wanted]
    bindings = [b for b in by_kind(overlay("ultra-usc1"), "ClusterRoleBinding")
                if b["roleRef"]["name"] == "training-researcher"]  # fmt: skip
    assert bindings == []  # bound per team namespace only (RoleBinding `researchers`)
