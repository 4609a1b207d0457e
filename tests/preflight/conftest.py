"""Fixtures for preflight tests: recorded outputs, a fake cluster with a run's pods, and a
CLI runner that goes through `runner.cli.main` (one-line errors, exit codes)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from catalog import labels
from runner.kube import ExecResult
from runner.kube.fake import FakeKube, local_exec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_text(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def invoke(args: list[str], input: str | None = None) -> Result:
    """Run `runner ARGS` through main(): what a user at a terminal sees."""
    from runner.cli import main

    runner = CliRunner()
    with runner.isolation(input=input) as (out, err, _):
        try:
            main(args)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    return Result(code, out.getvalue().decode(), err.getvalue().decode())


def pod(
    name: str,
    role: str,
    run: str = "tiny-lm",
    namespace: str = "research",
    node: str = "",
    ip: str = "127.0.0.1",
    gpus: int = 0,
    phase: str = "Running",
) -> dict:
    tags = {**labels.run_labels(run, namespace, "ultra-usc1", "rayjob"), labels.ROLE: role}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec = {
        "nodeName": node or f"node-{name}",
        "containers": [
            {
                "name": "ray-worker" if role != "head" else "ray-head",
                "resources": {"limits": limits},
            }
        ],
    }
    if gpus:
        spec["nodeSelector"] = {labels.GKE_ACCELERATOR: "nvidia-h200-141gb"}
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "250Gi"}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": tags},
        "spec": spec,
        "status": {"phase": phase, "podIP": ip},
    }


def rayjob(run: str = "tiny-lm", namespace: str = "research") -> dict:
    tags = labels.run_labels(run, namespace, "ultra-usc1", "rayjob")
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": run, "namespace": namespace, "labels": tags},
        "spec": {},
        "status": {"jobDeploymentStatus": "Running"},
    }


def python_here(namespace, pod_name, command, container, stdin) -> ExecResult:
    """Exec as a local process, with `python` meaning this interpreter."""
    if command and command[0] == "python":
        command = [sys.executable, *command[1:]]
    return local_exec(namespace, pod_name, command, container, stdin)


@pytest.fixture
def cluster(monkeypatch) -> FakeKube:
    """A RayJob `tiny-lm` with a head and two running CPU workers; `connect` returns it."""
    fake = FakeKube(
        [
            rayjob(),
            pod("tiny-lm-head", "head"),
            pod("tiny-lm-worker-0", "worker"),
            pod("tiny-lm-worker-1", "worker"),
        ],
        exec_handler=python_here,
    )
    monkeypatch.setattr("runner.kube.connect", lambda cluster=None: fake)
    return fake
