"""What every committed RayJob trains is what its manifest asks for: each driver entry point
in apps/ (the committed examples and the DiLoCo learners), composed exactly as its pod
would (driver.config.compose with the entry point's words) and planned on its shape
(driver.config.check.layout_of), matches the manifest: workers one per GPU of the worker
group (minus the services' GPUs), FSDP within a node, replica groups of whole nodes,
devices GPU with nccl, and every service on GPUs of its own."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from catalog.loader import repo_root

ROOT = repo_root()


def driver_jobs() -> list[tuple[str, dict]]:
    """(apps file and job name, RayJob) for every RayJob whose entry point is the driver."""
    out = []
    for path in sorted((ROOT / "apps").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "RayJob" and "driver.train" in doc["spec"]["entrypoint"]:
                out.append((f"{path.relative_to(ROOT)}:{doc['metadata']['name']}", doc))
    return out


JOBS = driver_jobs()


def shape_of(job: dict) -> tuple[int, int]:
    """(worker pods, GPUs per pod) of the RayJob's worker group."""
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    return int(group["replicas"]), int(limits["nvidia.com/gpu"])


def test_every_example_that_trains_is_checked():
    names = {name.split(":")[1] for name, _ in JOBS}
    assert {"tiny-lm", "tiny-dit", "tiny-lm-spot", "tiny-lm-resume", "lm-diloco-us"} <= names


@pytest.mark.parametrize(("name", "job"), JOBS, ids=[name for name, _ in JOBS])
def test_the_composed_layout_matches_the_manifest(name, job, monkeypatch):
    from driver.config.check import layout_of
    from driver.config.compose import compose

    monkeypatch.chdir(ROOT)  # the pod's working directory holds the repository
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[:3] == ["python", "-m", "driver.train"]
    cfg, _ = compose(words[3], words[4:])
    pods, gpus = shape_of(job)
    assert (cfg.shape.nodes, cfg.shape.gpus_per_node) == (pods, gpus)  # what it rendered
    layout = layout_of(cfg)
    services = sum(s["gpus"] for s in layout["services"].values())
    assert layout["world_size"] + services + layout["idle_gpus"] == pods * gpus
    assert layout["world_size"] >= pods * gpus - services - gpus  # at most a node idle
    assert cfg.parallelism.fsdp_size == gpus and cfg.parallelism.replica_group_size == gpus
    assert layout["replica_groups"] == layout["world_size"] // gpus
    assert (cfg.parallelism.device, cfg.parallelism.backend) == ("gpu", "nccl")
    assert all(s.gpus_per_worker >= 1 for s in cfg.aux.services.values())  # on GPUs
    assert cfg.data.loader == "pipeline"
    assert Path(cfg.checkpoint.root).as_posix().startswith("gs:/")
