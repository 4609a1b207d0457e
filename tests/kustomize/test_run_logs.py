"""Run logs in a cluster: the collector sends records of a run's processes (resource
attribute reve.run) to the schema's table and every other log to `otel`; the exporter's
insert columns exist in that table; Fluent Bit ships run pods' container output to the
table its view reads, from a read-only /var/log; rendered runs export to the collector."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from catalog import labels
from observability import clickhouse
from tests.observability import conftest as observability

chdb_session = observability.chdb_session  # chDB with the platform schema

BASE = Path(__file__).resolve().parents[2] / "kustomize" / "bases" / "observability"
# The columns opentelemetry-collector-contrib's ClickHouse exporter inserts into its logs
# table (exporter_logs.go, insertLogsSQLTemplate, the image's release).
EXPORTER_COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "TraceFlags",
    "SeverityText",
    "SeverityNumber",
    "ServiceName",
    "Body",
    "ResourceSchemaUrl",
    "ResourceAttributes",
    "ScopeSchemaUrl",
    "ScopeName",
    "ScopeVersion",
    "ScopeAttributes",
    "LogAttributes",
)


def config() -> dict:
    return yaml.safe_load((BASE / "otel-collector" / "config.yaml").read_text())


def test_run_records_go_to_the_platform_table_and_no_others():
    c = config()
    runs, other = c["service"]["pipelines"]["logs/runs"], c["service"]["pipelines"]["logs"]
    assert runs["exporters"] == ["clickhouse/runs"] and "filter/runs" in runs["processors"]
    assert other["exporters"] == ["clickhouse"] and "filter/not-runs" in other["processors"]
    keep = c["processors"]["filter/runs"]["logs"]["log_record"]
    drop = c["processors"]["filter/not-runs"]["logs"]["log_record"]
    assert keep == ['resource.attributes["reve.run"] == nil']  # dropped: records of no run
    assert drop == ['resource.attributes["reve.run"] != nil']
    exporter = c["exporters"]["clickhouse/runs"]
    assert (exporter["database"], exporter["logs_table_name"], exporter["create_schema"]) == (
        "platform",
        "otel_run_logs",
        False,
    )
    assert exporter["username"] == "writer" and exporter["password"] == "${env:CLICKHOUSE_PASSWORD}"


def test_the_exporters_columns_are_the_tables(chdb_session):
    text = chdb_session.query(
        "SELECT name FROM system.columns WHERE database = 'platform' AND "
        "table = 'otel_run_logs' ORDER BY position",
        "JSONEachRow",
    )
    names = [json.loads(x)["name"] for x in text.bytes().decode().splitlines()]
    assert tuple(names) == EXPORTER_COLUMNS


def test_fluent_bit_ships_run_pods_container_output():
    conf = (BASE / "fluent-bit" / "fluent-bit.conf").read_text()
    assert "Path              /var/log/containers/*.log" in conf
    assert "multiline.parser  cri" in conf
    assert "Regex   $kubernetes['labels']['platform.reve.dev/run'] .+" in conf
    assert "INSERT%20INTO%20platform.container_logs_raw" in conf
    daemonset = [
        d
        for d in yaml.safe_load_all((BASE / "fluent-bit" / "fluent-bit.yaml").read_text())
        if d and d["kind"] == "DaemonSet"
    ][0]
    spec = daemonset["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["container-logs"] == {
        "name": "container-logs",
        "mountPath": "/var/log",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["container-logs"]["hostPath"]["path"] == "/var/log"


def test_the_schema_declares_the_views_once(chdb_session):
    statements = clickhouse.statements(clickhouse.SCHEMA.read_text())
    for view in ("run_logs_from_otel", "run_logs_from_containers"):
        assert len([s for s in statements if f"VIEW IF NOT EXISTS platform.{view}" in s]) == 1


def test_rendered_runs_export_to_the_collector_and_keep_bundles():
    from runner.spec import build_spec, entrypoint

    spec = build_spec(
        {
            "name": "r",
            "type": "rayjob",
            "cluster": "ultra-usc1",
            "namespace": "research",
            "accelerator": "H200",
            "image": "x@sha256:" + "a" * 64,
            "train_config": "runs/train/tiny-lm.yaml",
        },
        "runs/x.yaml",
    )
    words = entrypoint(spec)
    assert f"logging.otel_endpoint={labels.OTEL_COLLECTOR_URL}" in words
    assert "logging.bundle_root=gs://reve-ultra-usc1-bundles" in words
    assert labels.OTEL_COLLECTOR_URL.startswith("http://otel-collector.observability.svc:")
