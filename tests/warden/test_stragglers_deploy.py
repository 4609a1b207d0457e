"""The straggler sweep as each overlay deploys it: Warden's environment enables it against the
cluster's ClickHouse as the read-only `reader` (password from the Secret by reference, never
in the URL), and ClickHouse's NetworkPolicy admits Warden's worker pods, not the rest of the
warden namespace, on the HTTP port only."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from catalog.labels import CLICKHOUSE_URL
from tests.kustomize.conftest import built, by_kind, kubectl, overlay  # noqa: F401 (fixtures)
from tests.kustomize.test_warden import named, resolved_env, warden_container
from warden.config import load_config

CLUSTERS = ["mega-euw4", "ultra-usc1"]
WARDEN_PODS = {"matchLabels": {"app.kubernetes.io/name": "warden"}}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_warden_sweeps_stragglers_as_the_reader(overlay, cluster):  # noqa: F811
    objs = overlay(cluster)
    container = warden_container(objs)
    config = load_config(None, environ=resolved_env(objs, container))
    s = config.stragglers
    assert s is not None and s.clickhouse_url == CLICKHOUSE_URL
    assert urlparse(s.clickhouse_url).password is None and s.user == "reader"
    [password] = [e for e in container["env"] if e["name"] == s.password_env]
    assert password["valueFrom"]["secretKeyRef"] == {"name": "clickhouse-reader", "key": "password"}
    assert config.timings.straggler_period_s == 300  # the default: every five minutes


def http_port(objs: list[dict]) -> int:
    service = named(objs, "Service", "clickhouse", "observability")
    return next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_clickhouse_admits_wardens_worker_on_http_only(overlay, cluster):  # noqa: F811
    objs = overlay(cluster)
    policy = named(objs, "NetworkPolicy", "clickhouse", "observability")
    warden = {"kubernetes.io/metadata.name": "warden"}
    rules = [r for r in policy["spec"]["ingress"]
             if any(p.get("namespaceSelector", {}).get("matchLabels") == warden
                    for p in r["from"])]  # fmt: skip
    assert len(rules) == 1
    [rule] = rules
    peer = {"namespaceSelector": {"matchLabels": warden}, "podSelector": WARDEN_PODS}
    assert rule["from"] == [peer]
    assert rule["ports"] == [{"port": http_port(objs)}]
    deployment = named(objs, "Deployment", "warden", "warden")
    assert deployment["spec"]["template"]["metadata"]["labels"] == WARDEN_PODS["matchLabels"]
    for r in policy["spec"]["ingress"]:  # no rule names the warden namespace any other way
        for peer in r["from"]:
            expressions = peer.get("namespaceSelector", {}).get("matchExpressions", [])
            assert not any("warden" in e.get("values", []) for e in expressions)
