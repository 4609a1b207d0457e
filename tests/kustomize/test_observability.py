"""The committed ClickHouse schema runs in chDB, and the committed Grafana dashboards parse,
use only the shipped datasources, and their ClickHouse queries run against that schema."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path

import pytest
import yaml

from observability import clickhouse

GRAFANA = Path(__file__).resolve().parents[2] / "kustomize/bases/observability/grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))

INSPECTOR_LINE = {
    "header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 16, "nnodes": 2},
    "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1748030377748202,
                 "hostname": "gke-a3-node-7", "pid": 1639453},
    "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                  "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                  "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099},
}  # fmt: skip


@pytest.fixture(scope="module")
def session():
    from chdb import session as chdb_session

    with chdb_session.Session() as s:
        clickhouse.apply(s)
        yield s


def rows(session, sql: str) -> list[dict]:
    text = session.query(sql, "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line]


def test_schema_is_idempotent(session):
    assert clickhouse.apply(session) == len(clickhouse.statements(clickhouse.SCHEMA.read_text()))
    tables = {r["name"] for r in rows(session, "SHOW TABLES FROM platform")}
    assert {"run_metrics", "node_events", "nccl_inspector_raw", "nccl_collectives"} <= tables


@pytest.mark.parametrize(
    "sql, count",
    [
        ("SELECT 1;\nSELECT 2;", 2),
        ("SELECT 1; SELECT 2", 1),
        ("-- a; comment\nSELECT 1", 1),
        ("SELECT ';'\n;\n", 1),
        ("", 0),
    ],
)
def test_statements_split(sql, count):
    assert len(clickhouse.statements(sql)) == count


def test_fluent_bit_record_becomes_a_collective_row(session):
    """A record as Fluent Bit's http output sends it (JSON lines with the kubernetes filter's
    metadata) lands in nccl_collectives through the materialized view. The tables have TTLs,
    so the record carries the current time."""
    now_us = int(time.time() * 1e6)
    line = copy.deepcopy(INSPECTOR_LINE)
    line["metadata"]["dump_timestamp_us"] = now_us
    record = {
        "date": now_us / 1e6, "node": "gke-a3-node-7", "file": "/var/lib/nccl-inspector/x.log",
        "log": json.dumps(line), "extra_field": 1,
        "kubernetes": {"namespace_name": "research", "pod_name": "tiny-lm-worker-0",
                       "labels": {"platform.reve.dev/run": "tiny-lm",
                                  "platform.reve.dev/cluster": "ultra-usc1"}},
    }  # fmt: skip
    session.query(
        "INSERT INTO platform.nccl_inspector_raw SETTINGS input_format_skip_unknown_fields=1 "
        "FORMAT JSONEachRow " + json.dumps(record)
    )
    (row,) = rows(session, "SELECT * FROM platform.nccl_collectives WHERE run = 'tiny-lm'")
    assert row["team"] == "research"  # the namespace when the pod has no team label
    assert (row["cluster"], row["pod"], row["rank"], row["n_nodes"]) == (
        "ultra-usc1", "tiny-lm-worker-0", 2, 2)  # fmt: skip
    assert row["collective"] == "AllReduce" and row["seq"] == 1407
    assert row["busbw_gbs"] == pytest.approx(485.119099)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now_us // 10**6))
    assert row["ts"] == f"{stamp}.{now_us % 10**6:06d}"


def test_warden_actions_table_is_the_one_warden_creates(session):
    """schema.sql declares platform.warden_actions exactly as warden/telemetry.py does."""
    from warden.telemetry import TABLE_DDL

    session.query("CREATE DATABASE IF NOT EXISTS warden_ddl")
    session.query(TABLE_DDL.replace("warden_actions", "warden_ddl.warden_actions", 1))
    describe = "SELECT name, type FROM system.columns WHERE database = '{}' AND table = '{}'"
    engine = "SELECT engine_full FROM system.tables WHERE database = '{}' AND name = '{}'"
    for query in (describe, engine):
        ours = rows(session, query.format("platform", "warden_actions"))
        theirs = rows(session, query.format("warden_ddl", "warden_actions"))
        assert ours == theirs and ours


def test_warden_action_becomes_a_node_event(session):
    """A record as Warden's ClickHouseSink inserts it shows on the node-health dashboard."""
    from dataclasses import asdict

    from warden.telemetry import record

    rec = asdict(record("ultra-usc1", "gke-node-9", "cordon", "xid-79", "rem-1", "XID 79"))
    session.query("INSERT INTO platform.warden_actions FORMAT JSONEachRow " + json.dumps(rec))
    (row,) = rows(session, "SELECT * FROM platform.node_events WHERE node = 'gke-node-9'")
    assert (row["source"], row["kind"], row["severity"]) == ("warden", "cordon", "warning")
    assert (row["reason"], row["message"], row["workflow"]) == ("xid-79", "XID 79", "rem-1")
    assert row["ts"] == rec["time"]


def test_fluent_bit_config_targets_the_raw_table():
    conf = (GRAFANA.parent / "fluent-bit/fluent-bit.conf").read_text()
    assert "platform.nccl_inspector_raw" in conf.replace("%20", " ")
    assert "format            json_lines" in conf.lower()


def test_datasources_are_unique():
    sources = yaml.safe_load((GRAFANA / "datasources.yaml").read_text())["datasources"]
    uids = [s["uid"] for s in sources]
    assert len(uids) == len(set(uids)) == 2


def test_every_dashboard_is_shipped():
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text())
    gen = next(g for g in kustomization["configMapGenerator"] if g["name"] == "grafana-dashboards")
    assert sorted(gen["files"]) == sorted(f"dashboards/{p.name}" for p in DASHBOARDS)
    assert len(DASHBOARDS) == 4


def panels_and_targets(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("targets", [])
    yield from dashboard["templating"]["list"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_uses_shipped_datasources(path):
    dashboard = json.loads(path.read_text())
    sources = yaml.safe_load((GRAFANA / "datasources.yaml").read_text())["datasources"]
    known = {s["uid"]: s["type"] for s in sources}
    assert dashboard["uid"].startswith("platform-")
    for item in panels_and_targets(dashboard):
        ds = item["datasource"]
        assert known.get(ds["uid"]) == ds["type"], f"{path.name}: {ds}"


MACROS = [
    (r"\$__timeFilter\((\w+)\)", r"\1 > now() - INTERVAL 1 DAY"),
    (r"\$__timeInterval\((\w+)\)", r"toStartOfMinute(\1)"),
    (r"\$\{(\w+):singlequote\}", r"'x'"),
    (r"\$\{(\w+)\}", r"x"),
]


def expand(sql: str) -> str:
    """A Grafana ClickHouse query with its macros and variables replaced, runnable in chDB."""
    for pattern, repl in MACROS:
        sql = re.sub(pattern, repl, sql)
    return sql


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_clickhouse_queries_run_on_the_schema(session, path):
    dashboard = json.loads(path.read_text())
    queries = [t["rawSql"] for t in panels_and_targets(dashboard) if "rawSql" in t]
    queries += [v["query"] for v in dashboard["templating"]["list"]
                if v["datasource"]["uid"] == "clickhouse"]  # fmt: skip
    for sql in queries:
        session.query(expand(sql))  # raises on an unknown table, column or syntax error
