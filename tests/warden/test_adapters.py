"""The real adapters' requests, checked against local HTTP servers and a recording session."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from warden.gcp import Instance, RealGcp, request_id
from warden.kube import event_manifest
from warden.kube_rest import RealKube
from warden.prom import HttpPrometheus, PromError, queries


class Recorder:
    """A local HTTP server: records every request, answers with `route(method, path, body)`."""

    def __init__(self, route):
        self.requests: list[tuple[str, str, dict, object]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                recorder.requests.append((self.command, self.path, dict(self.headers), body))
                status, reply = route(self.command, self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _serve

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def sample(node, value, **extra):
    return {"metric": {"Hostname": node, **extra}, "value": [1764500000, str(value)]}


def test_prometheus_client_queries_dcgm_metrics_and_merges_per_node():
    answers = {
        "DCGM_FI_DEV_XID_ERRORS": vector(sample("n1", 79, gpu="3"), sample("n1", 13, gpu="4")),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": vector(sample("n2", 2)),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": vector(),
        "NVLINK": vector(sample("n3", 250)),
        "DCGM_FI_DEV_THERMAL_VIOLATION": vector(sample("n3", 90.5)),
    }

    def route(method, path, body):
        query = urllib.parse.parse_qs(urllib.parse.urlparse(path).query)["query"][0]
        for key, reply in answers.items():
            if key in query:
                return 200, reply
        return 400, {"status": "error", "errorType": "bad_data", "error": "unknown"}

    server = Recorder(route)
    try:
        found = HttpPrometheus(server.url, window="5m").gpu_telemetry()
    finally:
        server.close()
    assert found["n1"].xids == [13, 79]
    assert found["n2"].ecc_dbe == 2
    assert (found["n3"].nvlink_errors, found["n3"].thermal_violation_s) == (250, 90.5)
    sent = [
        urllib.parse.parse_qs(urllib.parse.urlparse(p).query)["query"][0]
        for _, p, _, _ in server.requests
    ]
    assert sent == list(queries("Hostname", "5m").values())
    assert all("[5m]" in q for q in sent)


def test_prometheus_errors_are_prom_errors():
    server = Recorder(lambda *_: (400, {"status": "error", "errorType": "bad_data", "error": "x"}))
    try:
        with pytest.raises(PromError):
            HttpPrometheus(server.url).gpu_telemetry()
    finally:
        server.close()
    with pytest.raises(PromError):
        HttpPrometheus("http://127.0.0.1:9", timeout=1).query("up")


@pytest.fixture
def kube_server():
    def route(method, path, body):
        if path.startswith("/api/v1/namespaces/default/events"):
            return 409, {"kind": "Status", "code": 409}
        if path.endswith("/pods/guarded/eviction"):
            return 429, {"kind": "Status", "code": 429, "reason": "TooManyRequests"}
        if path.endswith("/eviction"):
            return 404, {"kind": "Status", "code": 404}
        if path.startswith("/apis/ray.io") and method == "GET":
            groups = [{"groupName": "w", "replicas": 8, "minReplicas": 8}]
            return 200, {"spec": {"workerGroupSpecs": groups}}
        return 200, {"items": [], "metadata": {"name": "x"}}

    server = Recorder(route)
    yield server
    server.close()


def real_kube(url: str) -> RealKube:
    from kubernetes import client

    config = client.Configuration()
    config.host = url
    return RealKube(client.ApiClient(config))


def test_real_kube_requests(kube_server):
    kube = real_kube(kube_server.url)
    kube.patch_node("n1", True, {"a": "1", "b": None}, "42")
    assert kube.list_pods(node="n1") == []
    assert kube.list_pods(namespace="research", labels={"platform.reve.dev/run": "r"}) == []
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert (
        kube.create_event(event_manifest("n1.warden-cordon-x", node, "WardenCordon", "m")) is False
    )
    assert kube.evict_pod("research", "gone") is False
    assert kube.evict_pod("research", "guarded") is False  # a PodDisruptionBudget says no
    kube.scale_worker_group("research", "lm", 0, {"replicas": 6}, {"a": "1"}, "9")
    assert kube.list_nodes() == []
    seen = [(m, p) for m, p, _, _ in kube_server.requests]
    assert seen[0] == ("PATCH", "/api/v1/nodes/n1")
    assert kube_server.requests[0][2]["Content-Type"] == "application/strategic-merge-patch+json"
    assert kube_server.requests[0][3] == {
        "metadata": {"annotations": {"a": "1", "b": None}, "resourceVersion": "42"},
        "spec": {"unschedulable": True},
    }
    assert seen[1] == ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
    assert seen[2] == (
        "GET",
        "/api/v1/namespaces/research/pods?labelSelector=platform.reve.dev/run%3Dr",
    )
    assert seen[3] == ("POST", "/api/v1/namespaces/default/events")
    assert seen[4] == ("POST", "/api/v1/namespaces/research/pods/gone/eviction")
    assert kube_server.requests[5][3]["kind"] == "Eviction"
    assert seen[-1] == ("GET", "/api/v1/nodes?resourceVersion=0")
    patch = kube_server.requests[-2]
    assert patch[0] == "PATCH" and patch[2]["Content-Type"] == "application/json-patch+json"
    assert patch[1] == "/apis/ray.io/v1/namespaces/research/rayclusters/lm"
    assert patch[3] == [  # the RayCluster as read (409 otherwise), its group, its annotations
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "9"},
        {"op": "add", "path": "/spec/workerGroupSpecs/0/replicas", "value": 6},
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}},
    ]


def test_real_kube_reviews_a_token():
    status = {"authenticated": True, "audiences": ["warden"],
              "user": {"username": "system:serviceaccount:research:training"}}  # fmt: skip
    server = Recorder(lambda method, path, body: (201, {**body, "status": status}))
    try:
        assert real_kube(server.url).review_token("tok", ["warden"]) == status
        method, path, headers, body = server.requests[0]
    finally:
        server.close()
    assert (method, path) == ("POST", "/apis/authentication.k8s.io/v1/tokenreviews")
    assert body == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": "tok", "audiences": ["warden"]}}  # fmt: skip


def test_real_kube_keeps_a_node_with_one_conditional_patch(kube_server):
    kube = real_kube(kube_server.url)
    taint = {"key": "platform.reve.dev/kept-for", "value": "research", "effect": "NoSchedule"}
    kube.set_node_keep("n1", {"platform.reve.dev/kept-for": "research"}, {"k": None}, [taint], "7")
    assert kube.list_pods(labels={"platform.reve.dev/keep-nodes": "true"}) == []
    (method, path, headers, body), listing = kube_server.requests
    assert (method, path) == ("PATCH", "/api/v1/nodes/n1")
    assert headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert body == {
        "metadata": {
            "labels": {"platform.reve.dev/kept-for": "research"},
            "annotations": {"k": None},
            "resourceVersion": "7",
        },
        "spec": {"taints": [taint]},  # no merge key: the whole list replaces the node's
    }
    assert listing[:2] == ("GET", "/api/v1/pods?labelSelector=platform.reve.dev/keep-nodes%3Dtrue")


class Session:
    """Records requests like google.auth's AuthorizedSession; answers from `replies`."""

    def __init__(self, replies=None):
        self.calls = []
        self.replies = replies or {}

    def request(self, method, url, json=None, timeout=None):
        self.calls.append((method, url, json))
        body = next(
            (r for key, r in self.replies.items() if key in url), {"kind": "compute#operation"}
        )

        class Response:
            status_code = 200
            content = b"{}"
            text = ""

            def json(self):
                return body

        return Response()


VM = Instance("reve-train-ultra", "us-central1-b", "gke-ultra-h200-main-1", "h200-main")
BASE = "https://compute.googleapis.com/compute/v1/projects/reve-train-ultra/zones/us-central1-b"


def test_gcp_reset_and_report_faulty_host_carry_request_ids():
    session = Session()
    gcp = RealGcp("us-central1", "ultra-usc1", "report-faulty-host", session)
    rid = request_id("run-1", "reset")
    assert rid == request_id("run-1", "reset") != request_id("run-1", "repair")
    gcp.reset(VM, rid)
    gcp.repair(VM, "XID 79 three times", request_id("run-1", "repair"))
    (m1, u1, b1), (m2, u2, b2) = session.calls
    assert (m1, u1, b1) == ("POST", f"{BASE}/instances/{VM.name}/reset?requestId={rid}", None)
    assert u2.startswith(f"{BASE}/instances/{VM.name}/reportHostAsFaulty?requestId=")
    assert b2["disruptionSchedule"] == "IMMEDIATE"
    assert b2["faultReasons"][0]["behavior"] == "UNRECOVERABLE_GPU_ERROR"


def test_gcp_recreate_instance_finds_the_node_pools_group_in_the_zone():
    groups = [
        "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroupManagers/gke-a",
        "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b/instanceGroupManagers/gke-b",
    ]
    session = Session({"nodePools/h200-main": {"instanceGroupUrls": groups}})
    gcp = RealGcp("us-central1", "ultra-usc1", "recreate-instance", session)
    detail = gcp.repair(VM, "diag failed", "rid")
    (m1, u1, _), (m2, u2, b2) = session.calls
    assert u1.endswith("/locations/us-central1/clusters/ultra-usc1/nodePools/h200-main")
    assert (m2, u2) == ("POST", f"{groups[1]}/recreateInstances?requestId=rid")
    assert b2 == {"instances": [f"zones/us-central1-b/instances/{VM.name}"]}
    assert "gke-b" in detail
