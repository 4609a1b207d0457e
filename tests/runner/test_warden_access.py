"""Training pods reach Warden's gateway: WARDEN_URL, the projected token, POD_NAMESPACE, and
on Ray pods RAY_CLUSTER (KubeRay's `ray.io/cluster` label) and RAY_WORKER_GROUP, equal to the
`groupName` the renderer writes, so the shrink target the driver reads from the pod's
environment (driver.ft.target) names the worker group Warden finds in the RayCluster."""

from __future__ import annotations

import pytest

from driver.ft.target import target_from_env
from runner.gpupod import WARDEN_TOKEN, WARDEN_URL
from runner.render import render_run
from runner.spec import build_spec
from tests.runner.conftest import IMAGE

FT_RUN = {"name": "lm-ft", "cluster": "ultra-usc1", "namespace": "research", "image": IMAGE,
          "train_config": "runs/train/tiny-lm-ft.yaml"}  # fmt: skip
GPU = {"accelerator": "H200", "gpus": 8, "pods": 2}


def spec(kind: str, **extra):
    """The ft run as `kind` (a RayCluster runs no entry point: jobs are submitted to it)."""
    data = {**FT_RUN, "type": kind, **extra}
    if kind == "raycluster":
        data.pop("train_config")
    return build_spec(data)


def pods(manifests: list[dict]) -> dict[str, dict]:
    """Pod templates by role label; the RayCluster spec beside them under "cluster"."""
    found: dict[str, dict] = {}
    for obj in manifests:
        spec = obj.get("spec", {})
        if obj["kind"] in ("RayJob", "RayCluster"):
            cluster = spec.get("rayClusterSpec", spec)
            found["cluster"] = cluster
            templates = [cluster["headGroupSpec"]["template"]]
            templates += [g["template"] for g in cluster["workerGroupSpecs"]]
            templates += [spec["submitterPodTemplate"]] if "submitterPodTemplate" in spec else []
        elif obj["kind"] in ("Job", "Deployment"):
            templates = [spec["template"]]
        else:
            continue
        for t in templates:
            found[t["metadata"]["labels"]["platform.reve.dev/role"]] = t
    return found


def env_of(template: dict, namespace: str, ray_cluster: str) -> dict[str, str]:
    """The main container's environment as the kubelet resolves it for a pod in
    `namespace` that KubeRay labelled with `ray_cluster` (Secret references left out)."""
    fields = {"metadata.namespace": namespace,
              "metadata.labels['ray.io/cluster']": ray_cluster}  # fmt: skip
    env = {}
    for item in template["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item["valueFrom"]:
            env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "?")
    return env


def token_volume(template: dict) -> tuple[dict, dict]:
    """(the projected token source, the main container's mount of it)."""
    spec = template["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == WARDEN_TOKEN["volume"])
    mounts = spec["containers"][0]["volumeMounts"]
    mount = next(m for m in mounts if m["name"] == WARDEN_TOKEN["volume"])
    return volume["projected"]["sources"][0]["serviceAccountToken"], mount


@pytest.mark.parametrize("kind", ["rayjob", "raycluster"])
@pytest.mark.parametrize("gpu", [{}, GPU], ids=["cpu", "h200"])
def test_ft_ray_pods_carry_the_gateway_access_and_their_worker_group(kind, gpu):
    rendered = pods(render_run(spec(kind, **gpu)))
    group = rendered["cluster"]["workerGroupSpecs"][0]["groupName"]
    assert group == ("h200" if gpu else "cpu")
    for role in ("head", "worker"):
        env = env_of(rendered[role], "research", "lm-ft-x7k2p")
        assert env["WARDEN_URL"] == WARDEN_URL and env["RAY_WORKER_GROUP"] == group
        assert (env["POD_NAMESPACE"], env["RAY_CLUSTER"]) == ("research", "lm-ft-x7k2p")
        source, mount = token_volume(rendered[role])
        assert source == {"audience": "warden", "expirationSeconds": 600, "path": "token"}
        assert mount["readOnly"] is True
        assert env["WARDEN_TOKEN_FILE"] == f"{mount['mountPath']}/{source['path']}"
        target = target_from_env(env, workers_per_pod=8)
        assert (target.namespace, target.name, target.group) == ("research", "lm-ft-x7k2p", group)


def test_a_job_pod_reaches_the_gateway_without_a_ray_cluster():
    rendered = pods(render_run(spec("job", **GPU)))
    env = env_of(rendered["job"], "research", "")
    assert env["WARDEN_URL"] == WARDEN_URL and env["POD_NAMESPACE"] == "research"
    assert "RAY_CLUSTER" not in env and "RAY_WORKER_GROUP" not in env
    token_volume(rendered["job"])


def test_pods_that_do_not_train_get_no_token():
    rayjob = pods(render_run(spec("rayjob")))
    raycluster = pods(render_run(spec("raycluster")))
    for template in (rayjob["submitter"], raycluster["sentinel"]):
        names = {e["name"] for e in template["spec"]["containers"][0].get("env", [])}
        assert not names & {"WARDEN_URL", "WARDEN_TOKEN_FILE", "RAY_WORKER_GROUP"}
        assert all("projected" not in v for v in template["spec"]["volumes"])
