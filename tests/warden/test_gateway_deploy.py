"""The gateway as each overlay deploys it: the URL and token audience the runner renders into
training pods reach the gateway's Service, port and audience; only team namespaces may reach
that port, and Warden's RBAC gains the TokenReview alone."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from kustomize.tooling import kueue
from runner.gpupod import WARDEN_TOKEN, WARDEN_URL
from tests.kustomize.conftest import built, by_kind, kubectl, overlay  # noqa: F401 (fixtures)
from tests.kustomize.test_warden import named, resolved_env, warden_container
from warden.config import load_config

CLUSTERS = ["mega-euw4", "ultra-usc1"]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_rendered_url_and_audience_reach_the_gateway(overlay, cluster):  # noqa: F811
    objs = overlay(cluster)
    url = urlparse(WARDEN_URL)
    name, namespace, _ = url.hostname.split(".", 2)
    service = named(objs, "Service", name, namespace)
    port = next(p for p in service["spec"]["ports"] if p["port"] == url.port)
    container = warden_container(objs)
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "warden"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = load_config(None, environ=resolved_env(objs, container))
    assert config.gateway is not None
    assert int(config.gateway.address.rpartition(":")[2]) == ports[port["targetPort"]]
    assert config.gateway.audience == WARDEN_TOKEN["audience"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "gateway"}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_team_namespaces_reach_the_gateway_port_only(overlay, cluster):  # noqa: F811
    objs = overlay(cluster)
    policy = named(objs, "NetworkPolicy", "warden-gateway", "warden")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "warden"}}
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": kueue.team_selector()}]
    assert rule["ports"] == [{"port": urlparse(WARDEN_URL).port, "protocol": "TCP"}]
    warden_policies = [p for p in by_kind(objs, "NetworkPolicy")
                       if p["metadata"]["namespace"] == "warden"]  # fmt: skip
    for p in warden_policies:  # no other policy opens Warden or Temporal to team namespaces
        if p["metadata"]["name"] != "warden-gateway":
            peers = [peer for r in p["spec"]["ingress"] for peer in r["from"]]
            assert all(peer.get("namespaceSelector") != kueue.team_selector() for peer in peers)


def test_warden_gains_only_the_token_review(overlay):  # noqa: F811
    role = named(overlay("ultra-usc1"), "ClusterRole", "warden")
    rules = [r for r in role["rules"] if "authentication.k8s.io" in r["apiGroups"]]
    assert rules == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
