"""Warden's gateway over HTTP with the fake Kubernetes adapter: who may ask what.

Refusals are answered before Temporal is touched (no client needed); the shrink and the
straggler findings that pass reach their workflows on the real Temporal dev server
(tests/warden/test_gateway_flow.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from warden import annotations as ann
from warden.client import GatewayError, post, report_stragglers_sync, start_shrink_sync
from warden.fakefleet import FakeCluster
from warden.gateway import MAX_BODY, MAX_IN_FLIGHT, Gateway

NS, CLUSTER, GROUP = "research", "lm-x7", "h200"


@pytest.fixture
def gate(tmp_path):
    """A gateway over a fake cluster with one RayCluster; no Temporal (refusals only)."""
    fleet = FakeCluster.create(nodes=2, prefix="gw")
    fleet.add_raycluster(NS, CLUSTER, {GROUP: 4, "aux": 1})
    gateway = Gateway(fleet.kube, None, "warden", None)
    server = gateway.serve("127.0.0.1:0")
    url = f"http://127.0.0.1:{server.server_port}"

    def token_file(namespace=NS, **kwargs) -> str:
        path = tmp_path / f"token-{len(list(tmp_path.iterdir()))}"
        path.write_text(fleet.issue_token(namespace, **kwargs))
        return str(path)

    yield fleet, gateway, url, token_file
    server.shutdown()
    server.server_close()


def shrink_status(url: str, token: str, **fields) -> tuple[int, str]:
    args = {"namespace": NS, "name": CLUSTER, "group": GROUP, "replicas_from": 4}
    args |= {"replicas_to": 3, **fields}
    try:
        start_shrink_sync(url, **args, token_file=token)
    except GatewayError as err:
        return err.status, err.reason
    raise AssertionError("not refused")


@pytest.mark.parametrize(
    ("token", "fields", "status", "reason"),
    [
        ({"namespace": "other"}, {}, 403, "namespace research is not the caller's (other)"),
        ({"namespace": "other"}, {"namespace": "other"}, 404, "RayCluster other/lm-x7 not found"),
        ({}, {"group": "a100"}, 404, "has no worker group a100"),
        ({}, {"name": "lm-y9"}, 404, "RayCluster research/lm-y9 not found"),
        ({}, {"replicas_to": 5}, 400, "replicas_to 5 is not below replicas_from 4"),
        ({}, {"replicas_to": 4}, 400, "the gateway only shrinks"),
        ({}, {"replicas_to": -1}, 400, "replicas_to: Input should be greater than or equal to 0"),
        ({}, {"group": "H200;rm"}, 400, "worker_group: String should match pattern"),
        ({"ttl_s": -1}, {}, 401, "token not accepted: invalid bearer token"),
        ({"audience": "kubernetes"}, {}, 401, "token not accepted"),
        ({"service_account": "default"}, {}, 403, "research/default may not use the gateway"),
    ],
)
def test_shrink_refusals(gate, token, fields, status, reason):
    fleet, gateway, url, token_file = gate
    got_status, got_reason = shrink_status(url, token_file(**token), **fields)
    assert got_status == status and reason in got_reason, got_reason
    assert gateway.counts[("/v1/shrink", status)] == 1
    assert fleet.counts("shrink") == {}


def raw(url: str, path: str, data: bytes, headers: dict, method: str = "POST") -> tuple[int, str]:
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()).get("error", "")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())["error"]


GOOD = {"raycluster": CLUSTER, "worker_group": GROUP, "replicas_from": 4, "replicas_to": 3}


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        (b"\x80garbage", {}, 400, "body is not JSON"),
        (b"[1, 2]", {}, 400, "body is not a JSON object"),
        (json.dumps({**GOOD, "extra": 1}).encode(), {}, 400, "extra: Extra inputs"),
        (json.dumps({**GOOD, "replicas_to": "3"}).encode(), {}, 400, "replicas_to: Input should"),
        (json.dumps({**GOOD, "replicas_to": True}).encode(), {}, 400, "replicas_to: Input should"),
        (json.dumps({"raycluster": CLUSTER}).encode(), {}, 400, "worker_group: Field required"),
        (b"x" * (MAX_BODY + 1), {}, 413, f"body of {MAX_BODY + 1} bytes is over {MAX_BODY}"),
        (json.dumps(GOOD).encode(), {"Content-Type": "text/plain"}, 415, "Content-Type must be"),
        (json.dumps(GOOD).encode(), {"Authorization": ""}, 401, "no bearer token"),
        (json.dumps(GOOD).encode(), {"Authorization": "Bearer nope"}, 401, "token not accepted"),
    ],
)
def test_bad_bodies_and_headers_refused(gate, body, headers, status, reason):
    fleet, gateway, url, token_file = gate
    with open(token_file()) as f:
        token = f.read()
    sent = {"Content-Type": "application/json", "Authorization": f"Bearer {token}", **headers}
    got_status, got_reason = raw(url, "/v1/shrink", body, sent)
    assert got_status == status and got_reason.startswith(reason), got_reason
    assert gateway.counts[("/v1/shrink", status)] == 1
    assert fleet.counts("shrink") == {}


def test_routes_and_health(gate):
    _, gateway, url, token_file = gate
    assert raw(url, "/healthz", None, {}, "GET") == (200, "")
    assert raw(url, "/v1/shrink", None, {}, "GET") == (405, "/v1/shrink takes POST")
    assert raw(url, "/v1/other", b"{}", {})[0] == 404
    assert gateway.counts == {("/healthz", 200): 1, ("/v1/shrink", 405): 1, ("other", 404): 1}


def test_straggler_on_a_node_without_the_teams_pod_is_refused(gate):
    fleet, gateway, url, token_file = gate
    ours, theirs = fleet.node_name(0), fleet.node_name(1)
    fleet.add_pod("lm-x7-worker-0", NS, ours)
    fleet.add_pod("other-worker-0", "other", theirs)
    finding = {"rank": 3, "node": theirs, "pod": "lm-x7-worker-1", "persistent": True,
               "straggler_windows": 9, "windows": 10, "delay_us": 2.0e4}  # fmt: skip
    with pytest.raises(GatewayError) as err:
        post("/v1/stragglers", {"findings": [finding]}, url, token_file())
    assert (err.value.status, err.value.reason) == (403, f"node {theirs} runs no pod of "
                                                         "namespace research")  # fmt: skip
    assert gateway.counts[("/v1/stragglers", 403)] == 1


def test_stragglers_on_recently_cleared_or_cordoned_nodes_are_skipped(gate):
    """The sweep's rule (warden.handover): no node check for a node a check cleared within
    `rules.cleared_quiet_s`, or a cordoned one; nothing reaches Temporal (no client here)."""
    fleet, gateway, url, token_file = gate
    cleared, cordoned = fleet.node_name(0), fleet.node_name(1)
    fleet.add_pod("lm-x7-worker-0", NS, cleared)
    fleet.add_pod("lm-x7-worker-1", NS, cordoned)
    minutes_ago = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    fleet.kube.patch_node(cleared, None, {ann.CLEARED: minutes_ago})
    fleet.kube.patch_node(cordoned, True, {})
    findings = [{"rank": r, "node": n, "pod": f"lm-x7-worker-{r}", "persistent": True,
                 "straggler_windows": 9, "windows": 10, "delay_us": 2.0e4}
                for r, n in enumerate([cleared, cordoned])]  # fmt: skip
    status, reply = post("/v1/stragglers", {"findings": findings}, url, token_file())
    assert status == 200
    assert reply == {"started": {}, "skipped": {cleared: "recently cleared",
                                                cordoned: "cordoned"}}  # fmt: skip
    assert report_stragglers_sync(url, findings, token_file()) == {}
    assert gateway.counts[("/v1/stragglers", 200)] == 2


def test_the_workers_gateway_applies_the_configured_quiet_period(tmp_path, monkeypatch):
    import asyncio

    from warden.config import load_config
    from warden.worker import start_gateway

    path = tmp_path / "warden.yaml"
    path.write_text("cluster: ultra-usc1\njobs: {check_image: img}\ngateway: {address: ':0'}\n"
                    "rules: {cleared_quiet_s: 60}\n")  # fmt: skip
    monkeypatch.setattr(Gateway, "serve", lambda self, address: self)  # the gateway, unserved
    acts = type("Acts", (), {"kube": FakeCluster().kube})()
    config = load_config(str(path), environ={})

    async def main():
        return start_gateway(config, None, acts, None)

    assert asyncio.run(main()).rules.cleared_quiet_s == 60
    assert Gateway(None, None, "warden", None).rules.cleared_quiet_s == 3600  # the default


def test_client_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("WARDEN_URL", raising=False)
    with pytest.raises(GatewayError, match="WARDEN_URL and WARDEN_TOKEN_FILE must be set"):
        start_shrink_sync(None, NS, CLUSTER, GROUP, 4, 3)
    with pytest.raises(GatewayError, match="token file /nonexistent/token: No such file"):
        start_shrink_sync("http://127.0.0.1:9", NS, CLUSTER, GROUP, 4, 3, "/nonexistent/token")
    token = tmp_path / "token"
    token.write_text("t")
    with pytest.raises(GatewayError, match="^warden gateway: unreachable: ") as err:
        start_shrink_sync("http://127.0.0.1:9", NS, CLUSTER, GROUP, 4, 3, str(token), 5)
    assert err.value.status == 0 and "\n" not in str(err.value)


def test_training_imports_no_worker_and_no_temporal():
    heavy = ("warden.worker", "warden.activities", "warden.kube", "warden.gcp",
             "warden.workflows", "warden.starters", "warden.gateway", "kubernetes",
             "temporalio", "pydantic", "torch")  # fmt: skip
    code = f"import sys, warden.client; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_worker_serves_the_gateway_when_configured():
    import asyncio

    from warden.config import load_config
    from warden.worker import start_gateway

    env = {"WARDEN_CLUSTER": "ultra-usc1", "WARDEN_CHECK_IMAGE": "img",
           "WARDEN_GATEWAY_ADDRESS": "127.0.0.1:0"}  # fmt: skip
    config = load_config(None, environ=env)
    acts = type("Acts", (), {"kube": FakeCluster().kube})()

    async def main():
        assert start_gateway(load_config(None, environ={**env, "WARDEN_GATEWAY_ADDRESS": ""}),
                             None, acts, None) is None  # fmt: skip
        server = start_gateway(config, None, acts, None)
        try:
            url = f"http://127.0.0.1:{server.server_port}"
            return await asyncio.to_thread(raw, url, "/healthz", None, {}, "GET")
        finally:
            server.shutdown()

    assert asyncio.run(main()) == (200, "")


def test_kubernetes_trouble_and_a_flood_are_refused_not_queued(gate):
    fleet, gateway, url, token_file = gate
    fleet.inject("kube", "review_token", 503)
    assert shrink_status(url, token_file())[0] == 503
    fleet.inject("kube", "get_raycluster", "timeout")  # no answer in time: 504
    status, reason = shrink_status(url, token_file())
    assert status == 504 and reason.startswith("kubernetes: "), reason
    for _ in range(MAX_IN_FLIGHT):
        gateway._slots.acquire()
    status, reason = shrink_status(url, token_file())
    assert status == 429 and reason.startswith(f"more than {MAX_IN_FLIGHT} requests in flight")
    assert gateway.counts[("/v1/shrink", 503)] == 1 and gateway.counts[("/v1/shrink", 504)] == 1
    assert gateway.counts[("/v1/shrink", 429)] == 1
    assert fleet.counts("shrink") == {}


def test_node_checks_need_the_teams_pod_or_a_node_kept_for_it(gate):
    """POST /v1/nodechecks (runner diagnose --approve): a node that runs a pod of the
    caller's namespace, or is kept for it after the run, is taken; another is refused;
    cordoned and recently cleared nodes are skipped as for stragglers."""
    from runner.keepnodes import KEPT_FOR
    from warden.client import request_node_checks_sync

    fleet, gateway, url, token_file = gate
    kept, theirs = fleet.node_name(0), fleet.node_name(1)
    fleet.add_pod("other-worker-0", "other", theirs)
    with pytest.raises(GatewayError) as err:
        request_node_checks_sync(url, [kept], "Xid 79", "lm-x7", token_file())
    assert err.value.status == 403 and "is not kept for it" in err.value.reason
    fleet.kube.set_node_keep(kept, {KEPT_FOR: NS}, {}, [])
    fleet.kube.patch_node(kept, True, {})  # cordoned: skipped, nothing reaches Temporal
    reply = request_node_checks_sync(url, [kept], "Xid 79", "lm-x7", token_file())
    assert reply == {"started": {}, "skipped": {kept: "cordoned"}}
    with pytest.raises(GatewayError) as err:
        post("/v1/nodechecks", {"nodes": ["Bad Node"], "reason": "x"}, url, token_file())
    assert err.value.status == 400
    with pytest.raises(GatewayError) as err:
        post("/v1/nodechecks", {"nodes": [kept], "reason": "a\nb"}, url, token_file())
    assert err.value.status == 400
    assert gateway.counts[("/v1/nodechecks", 200)] == 1
