"""DiLoCo experiments: one definition renders learner RayJobs per cluster plus the
synchronizer's Job and Service, validated like every run; bad input is one line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from catalog import labels, load_cluster, load_peer_pod_ranges
from catalog.errors import InputError
from runner import experiment as ex
from tests.runner.conftest import IMAGE, ROOT


@pytest.fixture
def data() -> dict:
    return {
        "name": "lm-diloco",
        "namespace": "research",
        "image": IMAGE,
        "train_config": "runs/train/tiny-lm.yaml",
        "train_overrides": ["optimizer.lr=3e-4"],
        "env": {"WANDB_PROJECT": "diloco"},
        "diloco": {"sync_every": 40, "mode": "decoupled", "compression": "int8"},
        "synchronizer": {"cluster": "ultra-usc1", "host": "sync.research.example"},
        "learners": [
            {"name": "us", "cluster": "ultra-usc1", "accelerator": "H200", "pods": 2,
             "resource_group": "pretrain", "train_overrides": ["train.seed=1"]},
            {"name": "eu", "cluster": "mega-euw4", "accelerator": "H100", "pods": 1},
        ],
    }  # fmt: skip


def render(data: dict) -> dict[str, list[dict]]:
    return ex.render_experiment(ex.build_experiment(data, "runs/x.yaml"))


def kinds(manifests: list[dict]) -> list[tuple[str, str]]:
    return [(m["kind"], m["metadata"]["name"]) for m in manifests]


def container(obj: dict) -> dict:
    if obj["kind"] == "Job":
        return obj["spec"]["template"]["spec"]["containers"][0]
    return obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def by_kind(manifests: list[dict], kind: str) -> dict:
    return next(m for m in manifests if m["kind"] == kind)


def test_learners_go_to_their_clusters_and_the_synchronizer_to_its_own(data):
    out = render(data)
    assert sorted(out) == ["mega-euw4", "ultra-usc1"]
    assert ("RayJob", "lm-diloco-us") in kinds(out["ultra-usc1"])
    assert ("RayJob", "lm-diloco-eu") in kinds(out["mega-euw4"])
    assert {("Job", "lm-diloco-sync"), ("Service", "lm-diloco-sync")} <= set(
        kinds(out["ultra-usc1"])
    )
    eu = by_kind(out["mega-euw4"], "RayJob")
    assert "run.name=lm-diloco-eu" in eu["spec"]["entrypoint"]
    assert " optimizer.lr=3e-4 diloco.address=" in eu["spec"]["entrypoint"]
    us = by_kind(out["ultra-usc1"], "RayJob")["spec"]["entrypoint"]
    assert " optimizer.lr=3e-4 train.seed=1 diloco.address=" in us


def test_every_object_and_pod_carries_the_experiment_and_learner_labels(data):
    out = render(data)
    for cluster, manifests in out.items():
        for m in manifests:
            assert m["metadata"]["labels"][ex.EXPERIMENT_LABEL] == "lm-diloco"
            learner = m["metadata"]["labels"][ex.LEARNER_LABEL]
            assert learner in ("us", "eu", ex.SYNC_ROLE)
            assert m["metadata"]["labels"][labels.CLUSTER] == cluster
    pod = by_kind(out["mega-euw4"], "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"][0][
        "template"
    ]
    assert pod["metadata"]["labels"][ex.LEARNER_LABEL] == "eu"


def settings(rayjob: dict) -> dict[str, str]:
    """The `diloco.*` overrides of a learner's driver command."""
    words = shlex.split(rayjob["spec"]["entrypoint"])
    return dict(w.removeprefix("diloco.").split("=", 1) for w in words if w.startswith("diloco."))


def test_settings_are_driver_overrides_and_keys_secret_references(data):
    out = render(data)
    eu = out["mega-euw4"]
    env = {e["name"]: e for e in container(by_kind(eu, "RayJob"))["env"]}
    for key in ("PUBLIC_KEY", "SECRET_KEY", "SERVER_KEY"):
        ref = env[f"REVE_DILOCO_{key}"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "lm-diloco-eu-keys"
    assert not any("DILOCO" in k for k in by_kind(eu, "ConfigMap")["data"])  # settings: config
    values = settings(by_kind(eu, "RayJob"))
    assert values["address"] == "tcp://sync.research.example:5555"
    assert (values["learner"], values["sync_every"]) == ("eu", "40")
    assert (values["mode"], values["compression"]) == ("decoupled", "int8")
    assert (values["fragments"], values["index"], values["learners"]) == ("1", "1", "2")
    assert "keys" not in values and not any("KEY" in k for k in values)
    us = settings(by_kind(out["ultra-usc1"], "RayJob"))  # same cluster: the Service's name
    assert us["address"] == "tcp://lm-diloco-sync.research.svc.cluster.local:5555"
    assert us["index"] == "0"


def test_synchronizer_job_and_service(data):
    manifests = render(data)["ultra-usc1"]
    job, svc = by_kind(manifests, "Job"), by_kind(manifests, "Service")
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "OnFailure" and "nvidia.com/gpu" not in str(
        spec["containers"][0]["resources"]
    )
    cmd = spec["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "driver.diloco.synchronizer"]
    assert cmd[cmd.index("--expect") + 1] == "us,eu" and cmd[cmd.index("--keys") + 1] == "env"
    assert cmd[cmd.index("--state") + 1].startswith("gs://") and "--compression" in cmd
    env = {e["name"] for e in spec["containers"][0]["env"]}
    assert {"REVE_DILOCO_SECRET_KEY", "REVE_DILOCO_ALLOWED"} <= env
    assert svc["spec"]["type"] == "LoadBalancer"
    # the learners' pod addresses reach the pod, so the cross-region policy can match them
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    # the load balancer's firewall admits the same ranges as the cross-region policy
    peers = load_peer_pod_ranges(load_cluster("ultra-usc1"))
    assert svc["spec"]["loadBalancerSourceRanges"] == sorted(peers.values()) != []
    assert svc["metadata"]["annotations"] == ex.INTERNAL_LB
    assert svc["spec"]["selector"] == {labels.RUN: "lm-diloco-sync", labels.ROLE: "job"}
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in svc["spec"]["selector"].items())


def test_all_in_one_cluster_needs_no_host_and_gets_a_cluster_ip(data):
    data["learners"][1].update(cluster="ultra-usc1", accelerator="H200")
    del data["synchronizer"]["host"]
    svc = by_kind(render(data)["ultra-usc1"], "Service")
    assert svc["spec"]["type"] == "ClusterIP" and "annotations" not in svc["metadata"]
    assert "externalTrafficPolicy" not in svc["spec"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d["learners"][1].update(name="us"), "learners[1].name", "used twice"),
        (lambda d: d["synchronizer"].pop("host"), "synchronizer.host", "mega-euw4"),
        (lambda d: d["diloco"].update(mode="async"), "diloco.mode", ""),
        (lambda d: d["diloco"].update(speed=1), "diloco.speed", "unknown key"),
        (lambda d: d["diloco"].update(min_learners=3), "diloco.min_learners", "2 learners"),
        (lambda d: d["diloco"].update(fragments=41), "diloco.fragments", "sync_every"),
        (lambda d: d["learners"][0].update(name="US"), "learners[0].name", ""),
        (lambda d: d["learners"][1].update(pods=0), "learners[1].pods", ""),
        (lambda d: d["learners"][1].update(accelerator="TPU"), "learners[1].accelerator", ""),
        (lambda d: d["synchronizer"].update(cluster="x"), "synchronizer.cluster", "unknown"),
        (lambda d: d["synchronizer"].update(cpus="lots"), "synchronizer.cpus", ""),
        (lambda d: d.pop("learners"), "learners", "required"),
    ],
)  # fmt: skip
def test_bad_experiments_are_one_line_naming_the_field(data, change, field, message):
    change(data)
    with pytest.raises(InputError) as err:
        render(data)
    assert err.value.source == "runs/x.yaml" and err.value.field == field, err.value.line()
    assert message in err.value.message


def test_is_experiment():
    assert ex.is_experiment({"learners": []}) and not ex.is_experiment({"name": "x"})


def test_local_command(data):
    from runner.experiment_local import local_plan

    exp = ex.build_experiment(data, "x")
    plan_file = "outputs/research/lm-diloco/plan.json"
    assert ex.local_command(exp) == ["python", "-m", "driver.diloco.local", "--plan", plan_file]
    plan = local_plan(exp, steps=30)
    assert plan["out"] == "outputs/research/lm-diloco"
    us, eu = plan["learners"]
    assert us["command"][:4] == [sys.executable, "-m", "driver.train", "runs/train/tiny-lm.yaml"]
    assert us["command"][-2:] == ["parallelism.workers=1", "train.steps=30"]
    assert us["command"][us["command"].index("optimizer.lr=3e-4") + 1] == "train.seed=1"
    assert "diloco.mode=decoupled" in us["command"] and us["env"]["WANDB_PROJECT"] == "diloco"
    assert "diloco.learner=eu" in eu["command"] and not any("DILOCO" in k for k in eu["env"])
    assert not any(w.startswith("diloco.address=") for w in us["command"])  # the local one


def test_renders_without_importing_torch_ray_or_zmq(data):
    code = (
        "import json, sys; import runner.experiment as ex; "
        f"ex.render_experiment(ex.build_experiment(json.loads({json.dumps(data)!r}), 'x')); "
        "heavy = {'torch', 'ray', 'zmq', 'driver'} & {m.split('.')[0] for m in sys.modules}; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
