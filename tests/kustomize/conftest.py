"""Shared fixtures: the pinned kubectl, and each overlay built once per test session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from catalog import load_cluster
from kustomize.tooling import build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def kubectl() -> str:
    """kubectl with kustomize v5 from .tools/bin (installed by scripts/fetch-tools)."""
    if not (ROOT / build.TOOLS_DIR / "kubectl").is_file():
        subprocess.run([str(ROOT / "scripts" / "fetch-tools")], check=True)
    return build.kubectl(ROOT)


@pytest.fixture(scope="session")
def helm(kubectl) -> str:
    return build.find_tool("helm", ROOT)


@pytest.fixture(scope="session")
def built(kubectl) -> dict[str, list[dict]]:
    """Every overlay and app-of-apps, built once: {relative folder: objects}."""
    return {t.name(ROOT): build.build(ROOT, t.path, kubectl) for t in build.targets(ROOT)}


@pytest.fixture(scope="session")
def overlay(built):
    """The objects of one cluster's overlay: overlay("ultra-usc1")."""

    def get(name: str) -> list[dict]:
        return built[f"kustomize/overlays/{name}"]

    return get


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]


def cluster_version(name: str) -> str:
    return load_cluster(name).kubernetes_version
