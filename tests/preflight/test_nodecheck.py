"""The node-check Job and `runner check NODE`."""

from __future__ import annotations

import pytest

from catalog import InputError, accelerator, labels, load_cluster
from runner import nodecheck
from runner.kube.fake import FakeKube
from tests.preflight.conftest import invoke

IMAGE = "us-docker.pkg.dev/reve-train-ultra/training/trainer@sha256:" + "ab" * 32
NODE = "gke-ultra-usc1-h200-main-5c1a9b2e-x7q2"


def container(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def test_gpu_node_job():
    job = nodecheck.check_job(load_cluster("ultra-usc1"), NODE, "H200", IMAGE)
    acc = accelerator("H200")
    pod = job["spec"]["template"]["spec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["metadata"]["namespace"] == "warden"
    assert job["spec"]["backoffLimit"] == 0
    assert pod["nodeName"] == NODE and pod["restartPolicy"] == "Never"
    keys = {t["key"] for t in pod["tolerations"]}
    assert {labels.GPU_TAINT["key"], labels.SPOT_TAINT["key"]} <= keys
    main = container(job)
    assert main["image"] == IMAGE
    assert main["command"][:3] == ["python", "-m", "runner.preflight"]
    assert main["command"][main["command"].index("--accelerator") + 1] == "H200"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == str(acc.gpus_per_node)
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert {k: env[k] for k in acc.nccl_env} == acc.nccl_env
    assert env["LD_LIBRARY_PATH"] == acc.library_path
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {m.host_path for m in acc.mounts} | {acc.nccl_inspector.host_path}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["sizeLimit"] == acc.default_shm
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert "rdma-7" in annotations["networking.gke.io/interfaces"]


def test_cpu_node_job():
    job = nodecheck.check_job(load_cluster("mega-euw4"), "gke-cpu-1", None, IMAGE, "ops")
    main = container(job)
    assert "nvidia.com/gpu" not in main["resources"]["limits"]
    assert "--accelerator" not in main["command"]
    assert job["metadata"]["namespace"] == "ops"


def test_job_passes_schema_validation():
    from runner.validation.manifests import validate_manifests

    cluster = load_cluster("ultra-usc1")
    for key in ("H200", None):
        job = nodecheck.check_job(cluster, NODE, key, IMAGE)
        validate_manifests([job], cluster.kubernetes_version, "check-job.yaml.j2")


@pytest.mark.parametrize("node", ["n", "x" * 53, "gke-" + "very-long-node-name-" * 4])
def test_job_name_fits(node):
    name = nodecheck.job_name(node)
    assert len(name) <= 63 and name.startswith("nodecheck-")
    assert nodecheck.job_name(node) == name


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        ({}, None),
        ({"active": 1}, None),
        ({"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}, "passed"),
        ({"conditions": [{"type": "Failed", "status": "True"}], "failed": 1}, "failed"),
        ({"conditions": [{"type": "Failed", "status": "False"}]}, None),
    ],
)
def test_verdict(status, verdict):
    assert nodecheck.verdict({"status": status}) == verdict


def node(name: str, gke_accelerator: str | None) -> dict:
    tags = {labels.GKE_ACCELERATOR: gke_accelerator} if gke_accelerator else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": tags}}


def finishing(outcome: str, lines: str):
    """A reactor playing the Job controller: a pod with logs, then the Job's condition."""

    def react(fake: FakeKube, verb: str, obj: dict) -> None:
        if verb != "apply" or obj["kind"] != "Job":
            return
        meta = obj["metadata"]
        pod_name = f"{meta['name']}-abcde"
        fake.objects[("v1", "Pod", meta["namespace"], pod_name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": {nodecheck.JOB_NAME_LABEL: meta["name"]},
            },
            "spec": {"containers": [{"name": "preflight"}]},
        }
        fake.pod_logs[(meta["namespace"], pod_name, "preflight")] = lines
        done = dict(obj, status={"conditions": [{"type": outcome, "status": "True"}]})
        fake.objects[("batch/v1", "Job", meta["namespace"], meta["name"])] = done

    return react


@pytest.fixture
def nodes(monkeypatch) -> FakeKube:
    fake = FakeKube([node(NODE, "nvidia-h200-141gb"), node("gke-cpu-1", None)])
    monkeypatch.setattr("runner.kube.connect", lambda cluster=None: fake)
    monkeypatch.setattr("runner.commands.check.POLL_SECONDS", 0.02)
    return fake


def test_check_passes(nodes):
    nodes.reactors.append(finishing("Complete", "POD NODE CHECK RESULT DETAIL\n... 20 PASS"))
    result = invoke(["check", NODE, "--cluster", "ultra-usc1", "--image", IMAGE])
    assert result.exit_code == 0, result.stderr
    assert "20 PASS" in result.stdout and f"node {NODE}: passed" in result.stdout
    job = nodes.objects[("batch/v1", "Job", "warden", nodecheck.job_name(NODE))]
    assert container(job)["command"][container(job)["command"].index("--accelerator") + 1] == "H200"


def test_check_fails_and_replaces_old_job(nodes):
    old = nodecheck.check_job(load_cluster("ultra-usc1"), NODE, "H200", IMAGE)
    nodes.apply(old)
    nodes.reactors.append(finishing("Failed", "xid  FAIL  Xid 79"))
    result = invoke(["check", NODE, "--cluster", "ultra-usc1", "--image", IMAGE])
    assert result.exit_code == 1
    assert "Xid 79" in result.stdout
    assert result.stderr.strip().endswith(f"error: node {NODE} check failed")
    assert ("delete", "batch/v1", "Job", "warden", nodecheck.job_name(NODE)) in nodes.calls


def test_check_defaults_to_the_preflight_image_of_the_image_list(nodes):
    nodes.reactors.append(finishing("Complete", "20 PASS"))
    result = invoke(["check", NODE, "--cluster", "ultra-usc1"])
    assert result.exit_code == 0, result.stderr
    job = nodes.objects[("batch/v1", "Job", "warden", nodecheck.job_name(NODE))]
    want = "us-docker.pkg.dev/reve-train-ultra/training/preflight:2026.11.0"
    assert container(job)["image"] == want
    assert f"image {want}" in result.stderr


@pytest.mark.parametrize(
    ("cluster", "image"),
    [
        ("ultra-usc1", "us-docker.pkg.dev/reve-train-ultra/training/preflight:2026.11.0"),
        ("mega-euw4", "europe-docker.pkg.dev/reve-train-mega/training/preflight:2026.11.0"),
    ],
)
def test_default_image(cluster, image):
    assert nodecheck.default_image(load_cluster(cluster)) == image


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "images:\n  - {name: trainer, image: '{registry}/trainer:1.0', unbuilt: true}\n",
            "kustomize/images.yaml: images: no 'preflight' entry for cluster ultra-usc1; "
            "pass --image",
        ),
        (
            "images:\n  - {name: preflight, image: 'x/preflight:1.0', clusters: [mega-euw4]}\n",
            "no 'preflight' entry for cluster ultra-usc1",
        ),
        ("images:\n  - {name: preflight}\n", "images.yaml: images[0].image: required string"),
        ("images: [\n", "kustomize/images.yaml: line 2: "),
    ],
)
def test_default_image_errors_name_file_and_field(tmp_path, text, message):
    (tmp_path / "kustomize").mkdir()
    (tmp_path / "kustomize" / "images.yaml").write_text(text)
    with pytest.raises(InputError) as err:
        nodecheck.default_image(load_cluster("ultra-usc1"), root=tmp_path)
    assert message in err.value.line()


def test_missing_image_list_is_one_line(nodes, tmp_path, monkeypatch):
    (tmp_path / "clusters").symlink_to(nodecheck.repo_root() / "clusters")
    monkeypatch.setenv("PLATFORM_ROOT", str(tmp_path))
    result = invoke(["check", NODE, "--cluster", "ultra-usc1"])
    assert result.exit_code == 2
    assert result.stderr == "error: kustomize/images.yaml: file not found\n"


def test_check_times_out(nodes):
    result = invoke(
        ["check", "gke-cpu-1", "--cluster", "ultra-usc1", "--image", IMAGE, "--timeout", "1"]
    )
    assert result.exit_code == 1 and "node gke-cpu-1: timeout" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["check", "missing-node", "--cluster", "ultra-usc1", "--image", IMAGE],
            4,
            "error: node missing-node not found in cluster ultra-usc1",
        ),
        (["check", NODE], 2, "error: command line: Missing option '--cluster'."),
        (["check", NODE, "--cluster", "ultra-usc1", "--timeout", "0"], 2, "'--timeout'"),
        (
            ["check", NODE, "--cluster", "nowhere", "--image", IMAGE],
            2,
            "error: command line: --cluster: unknown cluster 'nowhere'",
        ),
    ],
)
def test_check_bad_input(nodes, args, code, message):
    result = invoke(args)
    assert result.exit_code == code
    assert message in result.stderr
