"""The Warden Deployment of each overlay runs a command `warden/cli.py` has, and its
environment is a valid Warden configuration (`warden/config.py`) that points at the services
the overlays and the Temporal chart ship."""

from __future__ import annotations

import tomllib

import pytest

from catalog import load_cluster
from catalog.images import cluster_images, load_entries
from tests.kustomize.conftest import ROOT, by_kind

CLUSTERS = ["mega-euw4", "ultra-usc1"]


def named(objs: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    return next(
        o for o in by_kind(objs, kind)
        if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    )  # fmt: skip


def warden_container(objs: list[dict]) -> dict:
    deployment = named(objs, "Deployment", "warden", "warden")
    return deployment["spec"]["template"]["spec"]["containers"][0]


SECRET_PLACEHOLDER = "0123abcd"


def resolved_env(objs: list[dict], container: dict) -> dict[str, str]:
    """The container's WARDEN_* environment: ConfigMap references resolved from the overlay,
    Secret references (made outside git) replaced by a placeholder, and `$(VAR)` expanded as
    Kubernetes does."""
    import re

    env, helpers = {}, {}
    for item in container["env"]:
        if "value" in item:
            value = re.sub(r"\$\((\w+)\)", lambda m: helpers.get(m[1], m[0]), item["value"])
        elif "secretKeyRef" in item["valueFrom"]:
            helpers[item["name"]] = SECRET_PLACEHOLDER
            continue
        else:
            ref = item["valueFrom"]["configMapKeyRef"]
            value = named(objs, "ConfigMap", ref["name"], "warden")["data"][ref["key"]]
        env[item["name"]] = value
    return env


def test_the_command_is_the_warden_worker():
    """The Deployment runs `warden worker`: the console script and its sub-command exist."""
    from warden.cli import cli

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["warden"] == "warden.cli:main"
    assert "worker" in cli.commands


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_environment_is_a_valid_warden_config(overlay, cluster):
    from warden.config import ENVIRONMENT, load_config

    objs = overlay(cluster)
    container = warden_container(objs)
    assert container["command"] == ["warden"] and container["args"] == ["worker"]
    env = resolved_env(objs, container)
    assert set(env) <= set(ENVIRONMENT), set(env) - set(ENVIRONMENT)
    config = load_config(None, environ=env)
    spec = load_cluster(cluster)
    assert (config.cluster, config.project, config.location) == (
        spec.name, spec.project, spec.region)  # fmt: skip
    assert config.jobs.namespace == "warden"
    assert config.temporal.address == "temporal-frontend.warden.svc:7233"
    assert config.prometheus.url == "http://gmp-frontend.observability.svc:9090"
    password = SECRET_PLACEHOLDER
    assert config.clickhouse_url == (
        f"http://writer:{password}@clickhouse.observability.svc:8123/platform"
    )


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_services_warden_reaches_exist(overlay, cluster):
    objs = overlay(cluster)
    env = resolved_env(objs, warden_container(objs))
    for variable, port in (("WARDEN_PROMETHEUS_URL", 9090), ("WARDEN_CLICKHOUSE_URL", 8123)):
        host = env[variable].split("//")[1].split("/")[0].rsplit("@", 1)[-1]
        name, namespace = host.split(".")[:2]
        service = named(objs, "Service", name, namespace)
        assert port in [p["port"] for p in service["spec"]["ports"]], variable


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_job_images_are_the_cached_ones(overlay, cluster):
    objs = overlay(cluster)
    env = resolved_env(objs, warden_container(objs))
    cache = named(objs, "DaemonSet", "image-cache", "image-cache")
    cached = {c["image"] for c in cache["spec"]["template"]["spec"]["initContainers"]}
    entries = {i.name: i for i in cluster_images(load_cluster(cluster), load_entries(ROOT))}
    assert env["WARDEN_CHECK_IMAGE"] == entries["preflight"].image
    assert env["WARDEN_DIAG_IMAGE"] in cached
    # an image not built yet is not pre-pulled (catalog/images.py); once pinned, it is
    assert (env["WARDEN_CHECK_IMAGE"] in cached) != entries["preflight"].unbuilt


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_state_is_written_to_a_volume_and_metrics_are_scraped(overlay, cluster):
    """The root filesystem is read-only: the action log must sit on a mounted volume; the
    metrics address must be the port the ClusterPodMonitoring scrapes."""
    objs = overlay(cluster)
    container = warden_container(objs)
    env = resolved_env(objs, container)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert any(env["WARDEN_TELEMETRY_PATH"].startswith(m + "/") for m in mounts)
    port = next(p for p in container["ports"] if p["name"] == "metrics")["containerPort"]
    assert env["WARDEN_METRICS_ADDRESS"] == f"0.0.0.0:{port}"
    monitor = named(objs, "ClusterPodMonitoring", "warden")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    labels = named(objs, "Deployment", "warden", "warden")["spec"]["template"]["metadata"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels["labels"].items()
