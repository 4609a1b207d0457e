"""Fixtures for runner tests: a valid run definition and a throw-away repository root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"us-docker.pkg.dev/reve-train-ultra/training/trainer@{DIGEST}"


@pytest.fixture
def base() -> dict:
    """A minimal valid rayjob on ultra-usc1 (whole H200 nodes)."""
    return {
        "name": "t-run",
        "type": "rayjob",
        "cluster": "ultra-usc1",
        "namespace": "research",
        "accelerator": "H200",
        "image": IMAGE,
        "cmd": "python train.py",
    }


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A repository root with the real catalogs, driver configs and env files; empty apps/."""
    shutil.copytree(ROOT / "clusters", tmp_path / "clusters")
    shutil.copytree(ROOT / "runs" / "train", tmp_path / "runs" / "train")
    shutil.copytree(ROOT / "runs" / "env", tmp_path / "runs" / "env")
    (tmp_path / "apps").mkdir()
    monkeypatch.setenv("PLATFORM_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_run(folder: Path, data: dict, name: str = "run.yaml") -> Path:
    import yaml

    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
