"""Rendered manifests: identity labels, placement, accelerator networking, env and types."""

from __future__ import annotations

import json

import pytest

from catalog import labels
from runner import keepnodes
from runner.gpupod import GKE_INTERFACES
from runner.render import exact_bytes, exact_cpu, render, render_run
from runner.spec import build_spec, load_run
from runner.templating import render_template


def pod_templates(manifests: list[dict]) -> list[dict]:
    found = []
    for obj in manifests:
        spec = obj.get("spec", {})
        cluster = (
            spec.get("rayClusterSpec", spec) if obj["kind"] in ("RayJob", "RayCluster") else {}
        )
        if "headGroupSpec" in cluster:
            found.append(cluster["headGroupSpec"]["template"])
            found += [g["template"] for g in cluster["workerGroupSpecs"]]
        if obj["kind"] in ("Job", "Deployment"):
            found.append(spec["template"])
    return found


def worker(manifests: list[dict]) -> dict:
    return pod_templates(manifests)[-1 if manifests[-1]["kind"] != "Deployment" else -2]


@pytest.mark.parametrize(
    "example",
    ["tiny-lm", "tiny-dit", "dev-cluster", "eval-server", "tiny-lm-spot", "tiny-lm-resume"],
)
def test_identity_labels_on_every_object_and_pod(example):
    spec = load_run(f"runs/examples/{example}.yaml")
    manifests = render_run(spec)
    identity = labels.run_labels(spec.name, spec.run_team, spec.cluster, spec.type)
    for obj in manifests:
        assert identity.items() <= obj["metadata"]["labels"].items()
    for template in pod_templates(manifests):
        assert identity.items() <= template["metadata"]["labels"].items()
        assert labels.ROLE in template["metadata"]["labels"]
        assert template["spec"]["priorityClassName"] in labels.PRIORITY_VALUES
    main = [o for o in manifests if o["kind"] in ("RayJob", "RayCluster", "Job")]
    assert main[0]["metadata"]["labels"][labels.KUEUE_QUEUE_LABEL] == labels.LOCAL_QUEUE


def test_rayjob_head_on_cpu_pool_workers_on_gpu_pool(base):
    manifests = render_run(build_spec({**base, "pods": 2, "rack_affinity": "subblock"}))
    job = manifests[-1]
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert job["spec"]["entrypoint"] == "python train.py"
    head, work = pod_templates(manifests)
    assert head["spec"]["nodeSelector"] == labels.cpu_node_labels()
    assert "tolerations" not in head["spec"]
    assert work["spec"]["nodeSelector"] == {
        labels.GKE_ACCELERATOR: "nvidia-h200-141gb",
        labels.POOL_ROLE: "gpu",
    }
    assert work["spec"]["tolerations"] == [
        {**labels.GPU_TAINT, "operator": "Equal"},
        {**keepnodes.toleration("research"), "operator": "Equal"},
    ]
    term = work["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term[0]["podAffinityTerm"]["topologyKey"] == labels.TOPOLOGY_SUBBLOCK
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2


def test_whole_node_pod_takes_the_node(base):
    rendered = render(build_spec(base))
    container = worker(rendered.manifests)["spec"]["containers"][0]
    assert container["resources"]["requests"] == {
        "cpu": "216",
        "memory": "2700Gi",
        "nvidia.com/gpu": "8",
    }
    assert container["resources"]["limits"] == container["resources"]["requests"]
    assert rendered.plan.whole_node
    assert rendered.plan.totals() == "1 pod × 8 H200 GPUs = 8 GPUs, 216 CPUs, 2.64 TiB"


def test_partial_node_scales_defaults(base):
    rendered = render(build_spec({**base, "gpus": 2}))
    resources = worker(rendered.manifests)["spec"]["containers"][0]["resources"]["requests"]
    assert resources == {"cpu": "54", "memory": "675Gi", "nvidia.com/gpu": "2"}
    shm = worker(rendered.manifests)["spec"]["volumes"][0]
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "62Gi"}}


def test_a3_ultra_pods_get_rdma_annotations_mounts_and_nccl(base):
    pod = worker(render_run(build_spec(base)))
    interfaces = json.loads(pod["metadata"]["annotations"][GKE_INTERFACES])
    assert [i["network"] for i in interfaces][:3] == ["default", "gvnic-1", "rdma-0"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_NET"] == "gIB" and env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    gib = {"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True}
    assert gib in container["volumeMounts"]
    assert "initContainers" not in pod["spec"]


def test_a3_mega_pods_get_tcpxo_sidecar():
    pod = worker(render_run(load_run("runs/examples/tiny-dit.yaml")))
    annotations = pod["metadata"]["annotations"]
    assert "/dev/nvidia7" in annotations["devices.gke.io/container.tcpxo-daemon"]
    assert json.loads(annotations[GKE_INTERFACES])[8] == {
        "interfaceName": "eth8",
        "network": "vpc8",
    }
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["name"] == "tcpxo-daemon" and sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_BIND_SERVICE"]
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {"dshm", "nvidia-libs", "aperture-devices", "sys", "proc-sys"} <= volumes


def test_env_file_values_become_a_configmap_and_secrets_stay_references():
    manifests = render_run(load_run("runs/examples/tiny-lm.yaml"))
    configmap = manifests[0]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["data"]["WANDB_PROJECT"] == "tiny-lm"
    assert "WANDB_API_KEY" not in configmap["data"]
    pod = worker(manifests)
    container = pod["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": "tiny-lm-env"}}]
    secret = next(e for e in container["env"] if e["name"] == "WANDB_API_KEY")
    assert secret == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    }
    nccl = next(e for e in container["env"] if e["name"] == "NCCL_DEBUG")
    assert nccl["value"] == "INFO"  # the env file overrides the catalog's NCCL value


@pytest.mark.parametrize("name", ["TOKENIZER_PATH", "MAX_TOKENS", "SECRETARY", "KEYS"])
def test_names_that_only_contain_a_secret_word_are_plain_values(base, name):
    configmap = render_run(build_spec({**base, "env": {name: "x"}}))[0]
    assert configmap["data"] == {name: "x"}


def test_preemptible_run_gets_low_priority_and_spot_toleration():
    manifests = render_run(load_run("runs/examples/tiny-lm-spot.yaml"))
    pod = worker(manifests)
    assert pod["spec"]["priorityClassName"] == labels.PRIORITY_PREEMPTIBLE
    assert {**labels.SPOT_TAINT, "operator": "Equal"} in pod["spec"]["tolerations"]
    assert pod["spec"]["nodeSelector"][labels.RESOURCE_GROUP] == "scratch"


def test_resume_reaches_the_entrypoint():
    (job,) = render_run(load_run("runs/examples/tiny-lm-resume.yaml"))
    assert (
        "checkpoint.resume=gs://reve-ultra-usc1-checkpoints/research/tiny-lm/step-2000"
        in (job["spec"]["entrypoint"])
    )
    assert worker([job])["spec"]["priorityClassName"] == labels.PRIORITY_HIGH


def test_raycluster_has_a_sentinel_with_the_same_run_labels():
    cluster, sentinel = render_run(load_run("runs/examples/dev-cluster.yaml"))
    assert cluster["kind"] == "RayCluster" and sentinel["kind"] == "Deployment"
    assert "shutdownAfterJobFinishes" not in cluster["spec"]
    run = labels.RUN
    assert sentinel["metadata"]["labels"][run] == cluster["metadata"]["labels"][run]
    pod = sentinel["spec"]["template"]
    assert pod["metadata"]["labels"][labels.ROLE] == "sentinel"
    assert pod["spec"]["nodeSelector"] == labels.cpu_node_labels()
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"] == "http://dev-cluster-head-svc:8265"
    assert pod["spec"]["containers"][0]["workingDir"] == "/workspace"


def test_job_is_indexed_without_ray(base):
    (job,) = render_run(build_spec({**base, "type": "job", "pods": 3, "accelerator": None}))
    assert job["apiVersion"] == "batch/v1"
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 3
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["command"] == ["python", "train.py"]
    assert pod["nodeSelector"] == labels.cpu_node_labels()


def test_uri_working_dir_goes_to_the_runtime_env(base):
    (job,) = render_run(build_spec({**base, "working_dir": "gs://b/code.zip"}))
    assert job["spec"]["runtimeEnvYAML"] == 'working_dir: "gs://b/code.zip"\n'


def test_render_is_deterministic(base):
    spec = build_spec({**base, "env": {"B": "2", "A": "1"}})
    assert render_run(spec) == render_run(spec)


def test_values_cannot_break_the_yaml(base):
    tricky = {"A": "yes", "B": "0123", "C": "a: b # c", "D": "line1\nline2", "E": "{x: 1}"}
    cmd = "echo \"a: b\" '# not a comment' --x={y}"
    manifests = render_run(build_spec({**base, "type": "job", "env": tricky, "cmd": cmd}))
    assert manifests[0]["data"] == tricky
    command = manifests[1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command == ["echo", "a: b", "# not a comment", "--x={y}"]


def test_render_template_contract():
    import jinja2

    from runner.render import context
    from runner.resolve import resolve
    from runner.validation.inputs import load_env

    spec = load_run("runs/examples/eval-server.yaml")
    run = context(resolve(spec), load_env(spec))
    assert render_template("job.yaml.j2", run=run) == render_template("job", run=run)
    assert [d["kind"] for d in render_template("job", run=run)] == ["ConfigMap", "Job"]
    with pytest.raises(jinja2.UndefinedError):
        render_template("job", run={})


@pytest.mark.parametrize(
    ("value", "text"),
    [(2**40, "1Ti"), (1700 * 2**30, "1700Gi"), (1536 * 2**20, "1536Mi"), (1000, "1000")],
)
def test_exact_bytes(value, text):
    assert exact_bytes(value) == text


@pytest.mark.parametrize(("value", "text"), [(8.0, "8"), (7.5, "7500m"), (0.25, "250m")])
def test_exact_cpu(value, text):
    assert exact_cpu(value) == text


def _containers(node):
    """Every `containers` list in a manifest (pod templates of RayJob, RayCluster, Job)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers":
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


@pytest.mark.parametrize("run", ["tiny-lm", "dev-cluster"])
def test_every_run_container_knows_its_node(run):
    """NODE_NAME labels the driver's metric rows (driver/metrics/clickhouse.py)."""
    found = list(_containers(render_run(load_run(f"runs/examples/{run}.yaml"))))
    assert found
    for container in found:
        env = {e["name"]: e for e in container["env"]}
        assert env[labels.NODE_NAME_ENV]["valueFrom"] == {
            "fieldRef": {"fieldPath": "spec.nodeName"}
        }
