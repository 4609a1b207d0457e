"""The real adapter's requests, checked against the official client's API without a cluster.

Every method of `CoreV1Api` and `CustomObjectsApi` is replaced by a recorder that binds the
call to the real method's signature (a wrong parameter name or a missing argument fails),
and `kubernetes.stream.stream` / `portforward` by recorders that do the same for the
websocket calls.
"""

from __future__ import annotations

import inspect

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runner.kube import KubeError, NotFound
from runner.kube.real import RealKube, plural, snake

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "research"}}
RAYJOB = {
    "apiVersion": "ray.io/v1",
    "kind": "RayJob",
    "metadata": {"name": "tiny-lm", "namespace": "research"},
}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "warden"}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gke-n1"}}


class Recorder:
    """Stands in for a client API class; checks each call against the real signature."""

    def __init__(self, cls: type, answers: dict):
        self.cls, self.answers, self.calls = cls, answers, []

    def __getattr__(self, name: str):
        original = getattr(self.cls, name)  # AttributeError: the client has no such method

        def call(*args, **kwargs):
            bound = inspect.signature(original).bind(self, *args, **kwargs)
            self.calls.append((name, dict(list(bound.arguments.items())[1:])))
            answer = self.answers.get(name, {"items": []})
            if isinstance(answer, Exception):
                raise answer
            return answer

        call.__self__ = self  # kubernetes.stream reads api_method.__self__
        call.__name__ = name
        return call


class FakeStream:
    """What the websocket client returns for exec: output, then closed with a status."""

    def __init__(self):
        self.open, self.written, self.closed_channels = True, [], []
        self.returncode = 0

    def is_open(self):
        return self.open

    def update(self, timeout=0):
        self.open = False

    def peek_stdout(self):
        return True

    def read_stdout(self, timeout=0):
        out, self._out = getattr(self, "_out", b"out"), b""
        return out

    def peek_stderr(self):
        return False

    def write_stdin(self, data):
        self.written.append(data)

    def close_channel(self, channel):
        self.closed_channels.append(channel)


@pytest.fixture
def real(monkeypatch):
    kube = RealKube(client.ApiClient(client.Configuration()))
    kube.core = Recorder(
        client.CoreV1Api,
        {
            "read_namespaced_pod": POD,
            "read_namespaced_pod_log": type(
                "R",
                (),
                {
                    "stream": lambda self, n: iter([b"a\nb", b"c\n"]),
                    "release_conn": lambda self: None,
                },
            )(),
        },
    )
    kube.custom = Recorder(client.CustomObjectsApi, {"get_namespaced_custom_object": RAYJOB})
    streams = []

    def fake_stream(api_method, *args, **kwargs):
        assert kwargs.pop("binary") is True  # a stream() option, not an API parameter
        original = getattr(client.CoreV1Api, api_method.__name__)
        inspect.signature(original).bind(None, *args, **kwargs)
        streams.append((api_method.__name__, args, kwargs))
        return FakeStream()

    monkeypatch.setattr("kubernetes.stream.stream", fake_stream)
    kube.streams = streams
    return kube


def names(recorder: Recorder) -> list[str]:
    return [c[0] for c in recorder.calls]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("RayJob", "rayjobs"),
        ("RayCluster", "rayclusters"),
        ("Job", "jobs"),
        ("Deployment", "deployments"),
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("PriorityClass", "priorityclasses"),
        ("Gateway", "gateways"),
    ],
)
def test_plural(kind, expected):
    assert plural(kind) == expected


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("Pod", "pod"),
        ("ConfigMap", "config_map"),
        ("PersistentVolumeClaim", "persistent_volume_claim"),
    ],
)
def test_snake_names_exist_on_the_client(kind, expected):
    assert snake(kind) == expected
    for verb in ("read", "list", "delete", "patch"):
        assert hasattr(client.CoreV1Api, f"{verb}_namespaced_{expected}")


def test_apply_is_server_side_apply(real):
    for obj in (POD, RAYJOB, JOB, NODE):
        real.apply(obj)
    assert names(real.core) == ["patch_namespaced_pod", "patch_node"]
    assert names(real.custom) == ["patch_namespaced_custom_object"] * 2
    for _, args in real.core.calls + real.custom.calls:
        assert args["field_manager"] == "runner" and args["force"] is True
        assert args["_content_type"] == "application/apply-patch+yaml"
    ray = real.custom.calls[0][1]
    assert (ray["group"], ray["version"], ray["plural"], ray["name"]) == (
        "ray.io",
        "v1",
        "rayjobs",
        "tiny-lm",
    )
    assert real.custom.calls[1][1]["group"] == "batch"


def test_get_list_delete(real):
    assert real.get("v1", "Pod", "research", "p") == POD
    assert real.get("ray.io/v1", "RayJob", "research", "tiny-lm") == RAYJOB
    real.get("v1", "Node", None, "gke-n1")
    real.list("v1", "Pod", "research", {"b": "2", "a": "1"})
    real.list("v1", "Pod", None)
    real.list("v1", "Node", None)
    real.list("ray.io/v1", "RayCluster", "research", {"a": "1"})
    real.list("batch/v1", "Job", None)
    real.delete("v1", "Pod", "research", "p")
    real.delete("apps/v1", "Deployment", "research", "d")
    assert names(real.core) == [
        "read_namespaced_pod",
        "read_node",
        "list_namespaced_pod",
        "list_pod_for_all_namespaces",
        "list_node",
        "delete_namespaced_pod",
    ]
    assert names(real.custom) == [
        "get_namespaced_custom_object",
        "list_namespaced_custom_object",
        "list_cluster_custom_object",
        "delete_namespaced_custom_object",
    ]
    assert real.core.calls[2][1]["label_selector"] == "a=1,b=2"
    assert real.core.calls[5][1]["propagation_policy"] == "Background"
    assert real.custom.calls[3][1]["propagation_policy"] == "Background"


def test_list_items_get_kind_and_api_version(real):
    real.custom.answers["list_namespaced_custom_object"] = {"items": [{"metadata": {"name": "x"}}]}
    (item,) = real.list("ray.io/v1", "RayCluster", "research")
    assert (item["apiVersion"], item["kind"]) == ("ray.io/v1", "RayCluster")


def test_api_errors_become_one_line(real):
    real.custom.answers["get_namespaced_custom_object"] = ApiException(status=404, reason="NF")
    with pytest.raises(NotFound, match="RayJob research/x not found"):
        real.get("ray.io/v1", "RayJob", "research", "x")
    real.core.answers["list_namespaced_pod"] = ApiException(status=403, reason="Forbidden")
    with pytest.raises(KubeError, match="the API answered 403 Forbidden"):
        real.list("v1", "Pod", "research")


def test_run_ops_tolerate_missing_crds(real):
    real.custom.answers["list_namespaced_custom_object"] = ApiException(status=404)
    assert real.objects_of_run("research", "tiny-lm") == []


def test_logs_stream_lines(real):
    assert list(real.logs("research", "p", "main", follow=True, tail=10)) == ["a", "bc"]
    name, args = real.core.calls[-1]
    assert name == "read_namespaced_pod_log"
    assert (args["follow"], args["tail_lines"], args["container"]) == (True, 10, "main")
    assert args["_preload_content"] is False


def test_events(real):
    real.core.answers["list_namespaced_event"] = {
        "items": [
            {"reason": "B", "lastTimestamp": "2026-01-02"},
            {"reason": "A", "lastTimestamp": "2026-01-01"},
        ]
    }
    assert [e["reason"] for e in real.events("research", "p")] == ["A", "B"]
    assert real.core.calls[-1][1]["field_selector"] == "involvedObject.name=p"


def test_exec_over_websocket(real):
    result = real.exec("research", "p", ["tar", "cf", "-", "x"], "main", stdin=b"data")
    assert (result.returncode, result.stdout) == (0, b"out")
    name, args, kwargs = real.streams[-1]
    assert (name, args) == ("connect_get_namespaced_pod_exec", ("p", "research"))
    assert kwargs["command"] == ["tar", "cf", "-", "x"] and kwargs["stdin"] is True
    assert kwargs["tty"] is False and kwargs["container"] == "main"


def test_port_forward_call(real, monkeypatch):
    seen = {}

    def fake_portforward(api_method, *args, **kwargs):
        inspect.signature(client.CoreV1Api.connect_get_namespaced_pod_portforward).bind(
            None, *args, **kwargs
        )
        seen.update(args=args, kwargs=kwargs)
        return type("PF", (), {"socket": lambda self, port: ("socket", port)})()

    monkeypatch.setattr("kubernetes.stream.portforward", fake_portforward)
    assert real.open_port("research", "head", 8265) == ("socket", 8265)
    assert seen["args"] == ("head", "research") and seen["kwargs"]["ports"] == "8265"


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: gke_reve-train-ultra_us-central1_ultra-usc1
  cluster: {server: "https://10.0.0.2"}
- name: other
  cluster: {server: "https://10.9.9.9"}
users:
- name: me
  user: {token: not-a-real-token}
contexts:
- name: gke_reve-train-ultra_us-central1_ultra-usc1
  context: {cluster: gke_reve-train-ultra_us-central1_ultra-usc1, user: me}
- name: other
  context: {cluster: other, user: me}
current-context: other
"""


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def test_connect_picks_the_cluster_context(kubeconfig):
    from runner import kube

    assert kube.has_credentials()
    real = kube.connect("ultra-usc1")
    assert isinstance(real, RealKube)
    assert real.api_client.configuration.host == "https://10.0.0.2"
    assert kube.connect().api_client.configuration.host == "https://10.9.9.9"


def test_connect_to_a_cluster_missing_from_kubeconfig(kubeconfig):
    from runner import kube

    with pytest.raises(KubeError, match="^kubeconfig: .*gke_reve-train-mega_europe-west4"):
        kube.connect("mega-euw4")


def test_no_credentials(tmp_path):
    from runner import kube

    assert not kube.has_credentials({"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)})
