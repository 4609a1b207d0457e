"""NCCL Inspector on GPU run pods, from the catalog: the environment, the per-pod dump
folder (hostPath DirectoryOrCreate + subPathExpr), the one writable host mount the run-pod
check allows (and nothing wider), and Fluent Bit reading the same folder."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from catalog import accelerator, labels
from kustomize.tooling import security
from runner.gpupod import gpu_settings

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "apps/ultra-usc1/research/tiny-lm.yaml"


@pytest.mark.parametrize("gpus", [8, 1])
def test_gpu_containers_get_the_inspector_from_the_catalog(gpus):
    accel = accelerator("H200")
    spec = accel.nccl_inspector
    gpu = gpu_settings(accel, gpus, namespace="research")
    assert gpu.env["NCCL_PROFILER_PLUGIN"] == spec.plugin
    assert gpu.env["NCCL_INSPECTOR_ENABLE"] == "1"
    assert gpu.env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] == "1000000"
    assert gpu.env["NCCL_INSPECTOR_DUMP_DIR"] == spec.host_path == "/var/lib/nccl-inspector"
    assert gpu.field_env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    (mount,) = [m for m in gpu.mounts if m["name"] == labels.INSPECTOR_VOLUME]
    assert mount["sub_path_expr"] == "$(POD_NAMESPACE)/$(POD_NAME)"


def run_objects() -> list[dict]:
    return [o for o in yaml.safe_load_all(GOLDEN.read_text()) if o]


def inspector_mounts(obj: dict) -> list[tuple[dict, dict]]:
    out = []
    for spec in security.all_pod_specs(obj):
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for c in spec.get("containers") or []:
            for m in c.get("volumeMounts") or []:
                if m["name"] == labels.INSPECTOR_VOLUME:
                    out.append((volumes[m["name"]], m))
    return out


def test_the_rendered_run_mounts_the_folder_per_pod_and_passes_the_check():
    (run,) = [o for o in run_objects() if o["kind"] == "RayJob"]
    pairs = inspector_mounts(run)
    assert pairs, "the golden run has no NCCL Inspector mount: scripts/regen-goldens"
    for volume, mount in pairs:
        assert volume["hostPath"] == {"path": "/var/lib/nccl-inspector",
                                      "type": "DirectoryOrCreate"}  # fmt: skip
        assert mount["subPathExpr"] == "$(POD_NAMESPACE)/$(POD_NAME)"
        assert not mount.get("readOnly")
    assert security.run_pod_problems(run) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda v, m: m.pop("subPathExpr"),  # the whole node folder
        lambda v, m: m.update(subPathExpr="$(POD_NAME)"),  # not namespaced
        lambda v, m: v["hostPath"].update(type="Directory"),
        lambda v, m: v["hostPath"].update(path="/var/lib/other"),
    ],
)
def test_anything_wider_is_refused(change):
    (run,) = [o for o in run_objects() if o["kind"] == "RayJob"]
    run = copy.deepcopy(run)
    for volume, mount in inspector_mounts(run):
        change(volume, mount)
    problems = security.run_pod_problems(run)
    assert problems and all("mounted writable" in p for p in problems), problems


def test_fluent_bit_reads_the_inspector_folder():
    conf = (ROOT / "kustomize/bases/observability/fluent-bit/fluent-bit.conf").read_text()
    (path,) = re.findall(r"^\s*Path\s+(\S*nccl-inspector\S*)", conf, re.M)
    folder = accelerator("H200").nccl_inspector.host_path
    assert path == f"{folder}/*/*/*.log"  # <namespace>/<pod>/<file>: the subPathExpr's depth
