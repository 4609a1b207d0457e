"""The GPU pod settings (`runner.gpupod`): the whole-node NIC rule, and one set of settings
for every pod runner builds (RayJob, RayCluster, Job, node check, dev Job)."""

from __future__ import annotations

import json

import pytest

from catalog import accelerator, load_cluster, sidecar_host_writes
from runner.commands.shell import dev_context
from runner.gpupod import (
    GKE_DEVICES,
    GKE_INTERFACES,
    SOCKET_NCCL_ENV,
    WARDEN_TOKEN,
    gpu_settings,
    needs_nics,
    warden_access,
)
from runner.nodecheck import check_job
from runner.podcontext import NOBODY
from runner.render import TRAINING_ENV, render_run
from runner.spec import build_spec, load_run
from runner.templating import render_template
from tests.runner.conftest import IMAGE
from tests.runner.test_render import worker

CLUSTER = {"H100": ("mega-euw4", "research"), "H200": ("ultra-usc1", "research")}
NIC_MOUNTS = {"H100": {"aperture-devices"}, "H200": {"gib"}}


def gpu_view(template: dict) -> dict:
    """The GPU settings of a pod template, as the three builders must agree on them (the
    run's own values and a training pod's Warden access left out)."""
    warden = set(warden_access("worker")["env"]) | {"RAY_WORKER_GROUP"}
    spec = template["spec"]
    main = spec["containers"][0]
    annotations = template["metadata"].get("annotations", {})
    return {
        "nics": {k: v for k, v in annotations.items() if k.startswith(("networking.", "devices."))},
        "sidecars": spec.get("initContainers", []),
        "env": [  # the run's own values (not GPU settings) left out
            e
            for e in main["env"]
            if "value" in e
            and not e["name"].startswith("WANDB")
            and e["name"] not in {*TRAINING_ENV, *warden}
        ],
        "mounts": [
            m for m in main["volumeMounts"] if m["name"] not in ("dshm", WARDEN_TOKEN["volume"])
        ],
        "host_volumes": [v for v in spec["volumes"] if "hostPath" in v],
        "gpus": main["resources"]["limits"]["nvidia.com/gpu"],
    }


def run_pod(key: str, gpus: int, kind: str = "rayjob") -> dict:
    cluster, namespace = CLUSTER[key]
    data = {"name": "t", "type": kind, "cluster": cluster, "namespace": namespace}
    data |= {"accelerator": key, "gpus": gpus, "image": IMAGE, "cmd": "python train.py"}
    if kind == "raycluster":
        data.pop("cmd")
    return worker(render_run(build_spec(data)))


def dev_pod(key: str, gpus: int) -> dict:
    cluster, namespace = CLUSTER[key]
    ctx = dev_context("dev-t", namespace, cluster, IMAGE, key, gpus, 1)
    return render_template("dev-job.yaml.j2", dev=ctx)[0]["spec"]["template"]


def check_pod(key: str) -> dict:
    job = check_job(load_cluster(CLUSTER[key][0]), "gke-node-1", key, IMAGE)
    return job["spec"]["template"]


@pytest.mark.parametrize("key", ["H100", "H200"])
def test_every_builder_gives_a_whole_node_pod_the_same_gpu_settings(key):
    gpus = accelerator(key).gpus_per_node
    views = {
        "rayjob": gpu_view(run_pod(key, gpus)),
        "raycluster": gpu_view(run_pod(key, gpus, "raycluster")),
        "job": gpu_view(run_pod(key, gpus, "job")),
        "node check": gpu_view(check_pod(key)),
        "dev job": gpu_view(dev_pod(key, gpus)),
    }
    first = views["rayjob"]
    assert first["nics"] and first["env"] and first["gpus"] == str(gpus)
    for name, view in views.items():
        assert view == first, name


@pytest.mark.parametrize("key", ["H100", "H200"])
@pytest.mark.parametrize("gpus", [1, 4])
def test_every_builder_gives_a_partial_pod_the_same_gpu_settings(key, gpus):
    views = [gpu_view(run_pod(key, gpus, kind)) for kind in ("rayjob", "raycluster", "job")]
    views.append(gpu_view(dev_pod(key, gpus)))
    assert all(view == views[0] for view in views)


@pytest.mark.parametrize("key", ["H100", "H200"])
@pytest.mark.parametrize("gpus", [1, 4, 7])
@pytest.mark.parametrize("kind", ["rayjob", "raycluster", "job", "dev"])
def test_a_partial_node_pod_gets_no_gpudirect_nic(key, gpus, kind):
    pod = dev_pod(key, gpus) if kind == "dev" else run_pod(key, gpus, kind)
    assert_no_nics(pod, key)


def assert_no_nics(pod: dict, key: str) -> None:
    acc = accelerator(key)
    annotations = pod["metadata"].get("annotations", {})
    assert GKE_INTERFACES not in annotations
    assert not [k for k in annotations if k.startswith(GKE_DEVICES.split("{")[0])]
    assert "initContainers" not in pod["spec"]
    main = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in main["env"]}
    nccl = {
        k: v
        for k, v in env.items()
        if k.startswith("NCCL_") and not k.startswith(("NCCL_INSPECTOR_", "NCCL_PROFILER_"))
    }
    assert nccl == SOCKET_NCCL_ENV  # sockets on eth0, none of the catalog's GPUDirect values
    assert env["LD_LIBRARY_PATH"] == acc.library_path
    names = {v["name"] for v in pod["spec"]["volumes"]}
    assert not names & NIC_MOUNTS[key]
    assert not names & {"sys", "proc-sys"}  # the TCPXO daemon's mounts


def test_the_partial_node_examples_lose_their_nics():
    for run, key in (("eval-server", "H100"), ("dev-cluster", "H200")):
        assert_no_nics(worker(render_run(load_run(f"runs/examples/{run}.yaml"))), key)


@pytest.mark.parametrize("key", ["H100", "H200"])
def test_a_whole_node_pod_gets_every_nic_and_the_catalog_nccl_env(key):
    acc = accelerator(key)
    gpu = gpu_settings(acc, acc.gpus_per_node)
    assert gpu.whole_node
    networks = [row["network"] for row in json.loads(gpu.annotations[GKE_INTERFACES])]
    assert networks == ["default", *acc.network.networks]
    assert {k: gpu.env[k] for k in acc.nccl_env} == acc.nccl_env
    assert {m["name"] for m in gpu.mounts} == {m.name for m in acc.mounts} | {"nccl-inspector"}
    assert [s["name"] for s in gpu.sidecars] == [s.name for s in acc.sidecars]


def test_the_driver_library_mount_is_the_one_a_partial_pod_keeps():
    for key, kept in (("H100", {"nvidia-libs"}), ("H200", {"nvidia-libs"})):
        acc = accelerator(key)
        assert {m.name for m in acc.mounts if not needs_nics(acc, m)} == kept


def test_pod_contexts_share_no_mutable_default():
    from runner.podcontext import pod_context

    required = {"labels": {}, "container": "c", "image": IMAGE, "resources": {}, "shm": "1Gi"}
    first, second = pod_context(**required), pod_context(**required)
    first["env"]["X"] = "1"
    first["tolerations"].append({"key": "k", "effect": "NoSchedule"})
    assert second["env"] == {} and second["tolerations"] == []


# --- the securityContext and read-only host paths of every pod runner builds ------------


def sentinel_pod() -> dict:
    data = {"name": "t", "type": "raycluster", "cluster": "ultra-usc1", "namespace": "research"}
    manifests = render_run(build_spec({**data, "accelerator": "H200", "image": IMAGE}))
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    return deployment["spec"]["template"]


def every_pod() -> dict[str, dict]:
    """Every kind of pod runner builds, whole-node H100 (the sidecar) and H200, and CPU,
    the RayJob's submitter (given, so KubeRay does not make an unconfined one) included."""
    pods = {}
    for key in ("H100", "H200"):
        for kind in ("rayjob", "raycluster", "job"):
            pods[f"{kind} {key}"] = run_pod(key, accelerator(key).gpus_per_node, kind)
        pods[f"rayjob {key} 1 GPU"] = run_pod(key, 1)
        pods[f"node check {key}"] = check_pod(key)
        pods[f"dev {key}"] = dev_pod(key, 8)
    rayjob = render_run(build_spec({**_cpu_run(), "type": "rayjob"}))[-1]["spec"]
    cpu = rayjob["rayClusterSpec"]
    pods["rayjob submitter"] = rayjob["submitterPodTemplate"]
    pods["rayjob head"] = cpu["headGroupSpec"]["template"]
    pods["rayjob CPU worker"] = cpu["workerGroupSpecs"][0]["template"]
    pods["sentinel"] = sentinel_pod()
    return pods


def _cpu_run() -> dict:
    return {"name": "t", "cluster": "ultra-usc1", "namespace": "research", "image": IMAGE,
            "cmd": "python x.py"}  # fmt: skip


@pytest.mark.parametrize(("name", "pod"), list(every_pod().items()), ids=list(every_pod()))
def test_every_container_is_confined(name, pod):
    """No privilege escalation, every capability dropped but the listed ones, host paths
    read-only but the TCPXO daemon's sysfs and sysctl writes."""
    spec = pod["spec"]
    from kustomize.tooling.security import inspector_write

    volumes = {v["name"]: v for v in spec["volumes"] if "hostPath" in v}
    host = {name: v["hostPath"]["path"] for name, v in volumes.items()}
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"]
        added = set(context["capabilities"].get("add", []))
        allowed = {"tcpxo-daemon": {"NET_ADMIN", "NET_BIND_SERVICE"}, "preflight": {"SYSLOG"}}
        assert added == allowed.get(container["name"], set()), container["name"]
        assert "privileged" not in context
        for mount in container["volumeMounts"]:
            path = host.get(mount["name"])
            if path is None:
                continue
            writable = (container["name"], path) in sidecar_host_writes() or inspector_write(
                volumes[mount["name"]], mount
            )  # NCCL Inspector's per-pod folder
            assert mount.get("readOnly", False) is not writable, (container["name"], path)


def test_the_sentinel_runs_as_nobody_and_run_containers_as_the_image_user():
    context = sentinel_pod()["spec"]["containers"][0]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == NOBODY
    worker_context = run_pod("H200", 8)["spec"]["containers"][0]["securityContext"]
    assert "runAsNonRoot" not in worker_context and "runAsUser" not in worker_context


def test_the_writable_sidecar_paths_are_the_catalog_sidecar_mounts():
    """Every allowance names a host path a catalog sidecar really mounts."""
    mounted = {(s.name, m.host_path) for a in ("H100", "H200") for s in accelerator(a).sidecars
               for m in s.mounts}  # fmt: skip
    assert set(sidecar_host_writes()) <= mounted and sidecar_host_writes()


def test_run_as_user_makes_the_run_containers_non_root():
    data = {**_cpu_run(), "type": "rayjob", "run_as_user": 1000}
    cluster = render_run(build_spec(data))[-1]["spec"]["rayClusterSpec"]
    for template in (
        cluster["headGroupSpec"]["template"],
        cluster["workerGroupSpecs"][0]["template"],
    ):
        context = template["spec"]["containers"][0]["securityContext"]
        assert (context["runAsNonRoot"], context["runAsUser"], context["runAsGroup"]) == (
            True,
            1000,
            1000,
        )
