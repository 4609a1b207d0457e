"""Warden's configuration: one YAML file, unknown keys rejected, errors name file and field.

    from warden.config import load_config
    config = load_config("warden/local.yaml")

`warden/local.yaml` is the example for a laptop (fake cluster, short timers). In a cluster
the Deployment (kustomize/bases/warden) sets WARDEN_* environment variables instead
(`ENVIRONMENT` lists them); they override the file's settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from catalog import labels
from catalog.errors import InputError, from_validation
from catalog.loader import read_yaml
from observability.stragglers import DEFAULT as STRAGGLER_DEFAULT
from observability.stragglers import Thresholds
from warden.model import Timings
from warden.rules import RuleConfig


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TemporalConfig(Strict):
    address: str = Field(default="localhost:7233", description="Temporal frontend host:port")
    namespace: str = Field(default="default", description="Temporal namespace")
    task_queue: str = Field(default="warden", description="task queue of the worker")


class PrometheusConfig(Strict):
    url: str = Field(description="Prometheus HTTP API base URL, e.g. http://prometheus:9090")
    node_label: str = Field(default="Hostname", description="DCGM exporter label with the node")
    window: str = Field(default="10m", description="PromQL range of the fault queries")


class GatewayConfig(Strict):
    """Warden's gateway (warden.gateway): the HTTP endpoint run pods reach."""

    address: str = Field(default="0.0.0.0:8080", description="host:port the gateway serves")
    audience: str = Field(default="warden", description="audience of the callers' tokens")
    service_accounts: list[str] = Field(
        default=[labels.TRAINING_KSA], description="service accounts (any namespace) it serves"
    )
    wait_s: float = Field(default=20.0, gt=0, description="how long a shrink reply waits")


class StragglerConfig(Strict):
    """The straggler sweep (warden.stragglers): persistent NCCL stragglers in ClickHouse start
    their node's check. The period is `timings.straggler_period_s`."""

    clickhouse_url: str = Field(
        description="ClickHouse HTTP URL without credentials, e.g. http://clickhouse:8123"
    )
    user: str = Field(default="reader", description="ClickHouse user (read-only)")
    password_env: str = Field(
        default="CLICKHOUSE_READER_PASSWORD",
        description="environment variable holding the user's password (a Secret by reference)",
    )
    lookback_s: float = Field(default=900.0, gt=0, description="window each round analyses")
    max_runs: int = Field(default=200, gt=0, description="busiest runs analysed per round")
    timeout_s: float = Field(default=60.0, gt=0, description="timeout of one query")
    thresholds: Thresholds = Field(
        default=STRAGGLER_DEFAULT, description="straggler_findings.sql thresholds"
    )


class JobsConfig(Strict):
    namespace: str = Field(default="warden", description="namespace of check and diag Jobs")
    check_image: str = Field(description="image of the preflight node check (this repository's)")
    diag_image: str = Field(
        default="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        description="image with dcgmi for the DCGM diag stress test",
    )


class WardenConfig(Strict):
    """Everything `warden worker` needs."""

    cluster: str = Field(description="cluster catalog name (clusters/<name>/cluster.yaml)")
    project: str | None = Field(default=None, description="GCP project; default: the catalog's")
    location: str | None = Field(
        default=None, description="GKE cluster location (region); default: the catalog's"
    )
    temporal: TemporalConfig = Field(default_factory=TemporalConfig)
    prometheus: PrometheusConfig | None = Field(
        default=None, description="DCGM metrics source; none: conditions and readiness only"
    )
    jobs: JobsConfig = Field(description="the node check and DCGM diag Jobs")
    repair: Literal["report-faulty-host", "recreate-instance"] = Field(
        default="report-faulty-host", description="escalation: GCP repair after repeated cordons"
    )
    telemetry_path: str | None = Field(
        default="warden-actions.jsonl", description="JSON-lines file of action records"
    )
    clickhouse_url: str | None = Field(
        default=None, description="also insert action records into ClickHouse at this URL"
    )
    metrics_address: str | None = Field(
        default=None, description="host:port serving the worker's Prometheus metrics"
    )
    gateway: GatewayConfig | None = Field(
        default=None, description="serve the gateway for run pods; none: no gateway"
    )
    stragglers: StragglerConfig | None = Field(
        default=None, description="the straggler sweep over ClickHouse; none: no sweep"
    )
    watch: bool = Field(
        default=True,
        description="follow node conditions and node Events as they change (warden.watch); "
        "the periodic sweep stays as the safety net",
    )
    timings: Timings = Field(default_factory=Timings, description="periods and timeouts")
    rules: RuleConfig = Field(default_factory=RuleConfig, description="detection thresholds")


# Environment variables (the cluster Deployment sets them) and the settings they override.
ENVIRONMENT = {
    "WARDEN_CLUSTER": ("cluster",),
    "WARDEN_PROJECT": ("project",),
    "WARDEN_LOCATION": ("location",),
    "WARDEN_TEMPORAL_ADDRESS": ("temporal", "address"),
    "WARDEN_TEMPORAL_NAMESPACE": ("temporal", "namespace"),
    "WARDEN_TASK_QUEUE": ("temporal", "task_queue"),
    "WARDEN_PROMETHEUS_URL": ("prometheus", "url"),
    "WARDEN_PROMETHEUS_NODE_LABEL": ("prometheus", "node_label"),
    "WARDEN_CHECK_NAMESPACE": ("jobs", "namespace"),
    "WARDEN_CHECK_IMAGE": ("jobs", "check_image"),
    "WARDEN_DIAG_IMAGE": ("jobs", "diag_image"),
    "WARDEN_REPAIR": ("repair",),
    "WARDEN_TELEMETRY_PATH": ("telemetry_path",),
    "WARDEN_CLICKHOUSE_URL": ("clickhouse_url",),
    "WARDEN_METRICS_ADDRESS": ("metrics_address",),
    "WARDEN_GATEWAY_ADDRESS": ("gateway", "address"),
    "WARDEN_GATEWAY_AUDIENCE": ("gateway", "audience"),
    "WARDEN_STRAGGLERS_CLICKHOUSE_URL": ("stragglers", "clickhouse_url"),
    "WARDEN_STRAGGLERS_USER": ("stragglers", "user"),
    "WARDEN_STRAGGLER_PERIOD_S": ("timings", "straggler_period_s"),
    "WARDEN_WATCH": ("watch",),
}


def apply_environment(data: dict, environ: Mapping[str, str]) -> dict:
    """The settings with every WARDEN_* variable of `ENVIRONMENT` that is set laid over them."""
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for variable, keys in ENVIRONMENT.items():
        if environ.get(variable):
            target = merged
            for key in keys[:-1]:
                target = target.setdefault(key, {})
            target[keys[-1]] = environ[variable]
    return merged


def load_config(path: str | Path | None, environ: Mapping[str, str] | None = None) -> WardenConfig:
    """Read and validate a config file (or none: the environment alone), with WARDEN_*
    environment variables overriding it; mistakes are one-line InputErrors."""
    source = str(path) if path else "environment"
    data = read_yaml(Path(path), source) if path else {}
    if not isinstance(data, dict):
        raise InputError(source, None, "expected a mapping of settings")
    data = apply_environment(data, os.environ if environ is None else environ)
    try:
        return WardenConfig.model_validate(data)
    except ValidationError as err:
        error = from_validation(source, err)
        if error.message.startswith("Unexpected keyword argument"):  # a dataclass's unknown key
            error = InputError(error.source, error.field, "unknown key")
        raise error from None
