"""The real adapters under faults: every call gives up after its timeout, once (no hidden
retries), and every failed status raises the class `warden.errors.classify` names."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import requests

from tests.warden.test_adapters import VM, Recorder
from warden import errors
from warden.config import load_config
from warden.gcp import RealGcp, WardenGcp
from warden.kube import WardenKube, event_manifest
from warden.kube_rest import RealKube, api_client
from warden.prom import HttpPrometheus, PromError
from warden.worker import activities_for

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "warden"}}
KUBE_CALLS = {
    "list_nodes": lambda k: k.list_nodes(),
    "get_node": lambda k: k.get_node("n1"),
    "patch_node": lambda k: k.patch_node("n1", True, {"a": "1"}, "7"),
    "set_node_keep": lambda k: k.set_node_keep("n1", {}, {}, [], "7"),
    "list_pods": lambda k: k.list_pods(node="n1"),
    "evict_pod": lambda k: k.evict_pod("research", "p"),
    "create_event": lambda k: k.create_event(event_manifest("e", NODE, "WardenCordon", "m")),
    "create_job": lambda k: k.create_job(JOB),
    "get_job": lambda k: k.get_job("warden", "j"),
    "get_raycluster": lambda k: k.get_raycluster("research", "lm"),
    "list_rayclusters": lambda k: k.list_rayclusters(),
    "scale_worker_group": lambda k: k.scale_worker_group("research", "lm", 0, {"replicas": 6}),
    "review_token": lambda k: k.review_token("t", ["warden"]),
    # a watch's read timeout outlasts the request's own length (here 1 s) by timeout_s
    "watch_nodes": lambda k: list(k.watch_nodes("0", 1)),
    "watch_node_events": lambda k: list(k.watch_node_events("0", 1)),
}
GCP_CALLS = {
    "reset": lambda g: g.reset(VM, "rid"),
    "repair": lambda g: g.repair(VM, "XID 79", "rid"),
}


def methods(protocol) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


@pytest.fixture
def hanging():
    """A server that answers nothing until the test ends."""
    release = threading.Event()
    server = Recorder(lambda *_: (release.wait(), (200, {}))[1])
    yield server
    release.set()
    server.close()


def call_in_thread(fn) -> BaseException | None:
    """Run `fn` in a thread; what it raised. A call without a timeout would still hang."""
    raised: list[BaseException | None] = [None]

    def target():
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            raised[0] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the call did not time out"
    return raised[0]


def test_every_kubernetes_call_times_out_once_and_is_retryable(hanging):
    assert set(KUBE_CALLS) == methods(WardenKube)  # a new call must be listed here
    kube = RealKube(api_client(hanging.url), timeout_s=0.3)
    for name, call in KUBE_CALLS.items():
        before = len(hanging.requests)
        err = call_in_thread(lambda call=call: call(kube))
        assert isinstance(err, errors.Transient) and err.status is None, (name, err)
        assert "no answer" in str(err)
        assert len(hanging.requests) == before + 1, f"{name} was re-sent by the HTTP client"


@pytest.mark.parametrize("method", ["report-faulty-host", "recreate-instance"])
def test_every_gcp_call_times_out_and_is_retryable(hanging, method):
    assert set(GCP_CALLS) == methods(WardenGcp)
    base = hanging.url
    gcp = RealGcp("us-central1", "ultra-usc1", method, requests.Session(), 0.3, base, base)
    for name, call in GCP_CALLS.items():
        err = call_in_thread(lambda call=call: call(gcp))
        assert isinstance(err, errors.Transient) and err.status is None, (name, err)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (403, errors.Fatal),
        (400, errors.Fatal),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (500, errors.Transient),
        (503, errors.Transient),
    ],
)
def test_kubernetes_statuses_raise_their_class_with_the_servers_message(status, cls):
    message = f'nodes "n1" is forbidden or whatever: status {status}'
    server = Recorder(lambda *_: (status, {"kind": "Status", "code": status, "message": message}))
    try:
        with pytest.raises(cls) as caught:
            RealKube(api_client(server.url)).patch_node("n1", True, {}, "7")
    finally:
        server.close()
    assert caught.value.status == status
    assert str(caught.value).startswith(f"kube PATCH /api/v1/nodes/n1: HTTP {status}")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("status", "cls"), [(403, errors.Fatal), (400, errors.Fatal), (503, errors.Transient)]
)
def test_gcp_statuses_raise_their_class(status, cls):
    server = Recorder(lambda *_: (status, {"error": {"code": status, "message": "no"}}))
    gcp = RealGcp("us-central1", "ultra-usc1", "report-faulty-host", requests.Session(), 5)
    gcp.compute = server.url
    try:
        with pytest.raises(cls, match=f"HTTP {status}"):
            gcp.reset(VM, "rid")
    finally:
        server.close()


def test_a_refused_connection_is_no_answer():
    kube = RealKube(api_client("http://127.0.0.1:9"), timeout_s=2)
    with pytest.raises(errors.Transient, match="no answer"):
        kube.get_node("n1")
    gcp = RealGcp("r", "c", "report-faulty-host", requests.Session(), 2, "http://127.0.0.1:9")
    with pytest.raises(errors.Transient, match="no answer"):
        gcp.reset(VM, "rid")


def test_prometheus_queries_time_out(hanging):
    err = call_in_thread(HttpPrometheus(hanging.url, timeout=0.3).gpu_telemetry)
    assert isinstance(err, PromError)  # the sweep goes on without DCGM figures


@pytest.mark.parametrize(("request_s", "attempt_s", "expected"), [(7, 60, 7), (20, 5, 5)])
def test_the_worker_builds_every_adapter_with_the_request_timeout(
    tmp_path, monkeypatch, request_s, attempt_s, expected
):
    """`request_timeout_s` reaches Kubernetes, GCP and Prometheus, never above an attempt."""
    import google.auth

    monkeypatch.setattr(google.auth, "default", lambda scopes: (None, "p"))
    monkeypatch.setattr("google.auth.transport.requests.AuthorizedSession", lambda c: object())
    monkeypatch.setattr("warden.kube_rest.api_client", lambda: object())
    cluster = SimpleNamespace(name="ultra-usc1", project="p", region="us-central1")
    monkeypatch.setattr("catalog.load_cluster", lambda name: cluster)
    path = tmp_path / "warden.yaml"
    path.write_text(
        "cluster: ultra-usc1\njobs: {check_image: img}\nprometheus: {url: 'http://p:9090'}\n"
        f"telemetry_path: null\ntimings: {{request_timeout_s: {request_s}, "
        f"activity_timeout_s: {attempt_s}}}\n"
    )
    acts = activities_for(load_config(str(path), environ={}))
    assert (acts.kube.timeout_s, acts.gcp.timeout_s, acts.prom.timeout) == (expected,) * 3
