"""schema.sql migrates a ClickHouse created from the schema's first release: after applying
it (twice: idempotent) the tables and the view are those a fresh server gets, old rows take
the new columns' defaults, and the store writes the label set's columns. Runs in chDB under
databases of its own (the shared embedded server's `platform` is left alone)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from catalog.labels import TELEMETRY_LABELS
from observability import clickhouse, store

FIRST_RELEASE = Path(__file__).with_name("schema_first_release.sql")
TABLES = ("run_metrics", "nccl_collectives", "nccl_collectives_mv")
COLUMNS = ("SELECT name, type, default_kind, default_expression, position FROM system.columns "
           "WHERE database = '{}' AND table = '{}' ORDER BY position")  # fmt: skip


def rename(sql: str, database: str) -> str:
    """The schema's statements on `database` instead of `platform` (labels untouched)."""
    sql = re.sub(r"(CREATE DATABASE IF NOT EXISTS) platform;", rf"\1 {database};", sql)
    return re.sub(r"\bplatform\.(?!reve\.)", f"{database}.", sql)


def rows(session, sql: str) -> list[dict]:
    text = session.query(sql, "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line]


def view_query(session, database: str) -> str:
    (row,) = rows(session, f"SELECT as_select FROM system.tables WHERE database = '{database}' "
                           "AND name = 'nccl_collectives_mv'")  # fmt: skip
    return row["as_select"].replace(f"{database}.", "<db>.")


@pytest.fixture
def migrated(chdb_session):
    old, fresh = "schema_first_release", "schema_fresh"
    current = clickhouse.SCHEMA.read_text()
    clickhouse.apply(chdb_session, rename(FIRST_RELEASE.read_text(), old))
    chdb_session.query(f"INSERT INTO {old}.run_metrics (ts, cluster, team, run, rank, pod, node, "
                       "step, name, value) VALUES (now64(3), 'c', 't', 'old', 0, 'p', 'n', 1, "
                       "'train/loss', 2.5)")  # fmt: skip
    for _ in range(2):
        clickhouse.apply(chdb_session, rename(current, old))
    clickhouse.apply(chdb_session, rename(current, fresh))
    yield chdb_session, old, fresh
    for database in (old, fresh):
        chdb_session.query(f"DROP DATABASE IF EXISTS {database}")


def test_a_first_release_server_migrates_to_the_current_schema(migrated):
    session, old, fresh = migrated
    for table in TABLES:
        got = rows(session, COLUMNS.format(old, table))
        want = rows(session, COLUMNS.format(fresh, table))
        assert got == want and want, table
    assert view_query(session, old) == view_query(session, fresh)
    (row,) = rows(session, f"SELECT attempt, worker, service FROM {old}.run_metrics")
    assert row == {"attempt": 0, "worker": "", "service": ""}


def test_the_view_is_set_to_the_query_it_is_created_with():
    statements = clickhouse.statements(clickhouse.SCHEMA.read_text())
    view = "CREATE MATERIALIZED VIEW IF NOT EXISTS platform.nccl_collectives_mv"
    (create,) = [s for s in statements if s.startswith(view)]
    (alter,) = [s for s in statements if "nccl_collectives_mv MODIFY QUERY" in s]
    assert create[create.index("AS SELECT") + 3 :] == alter[alter.index("SELECT") :]


def test_metric_columns_are_the_tables_and_carry_the_label_set(chdb_session):
    columns = rows(chdb_session, COLUMNS.format("platform", "run_metrics"))
    assert [c["name"] for c in columns] == list(store.METRIC_COLUMNS)
    assert set(TELEMETRY_LABELS) <= set(store.METRIC_COLUMNS)
    tags = {"cluster": "c", "team": "t", "run": "r", "attempt": "2", "worker": "w-1",
            "service": "encoder"}  # fmt: skip
    (row,) = store.metric_rows(tags, rank=0, step=3, ts=0.0, values={"aux/encoder/errors": 1})
    assert set(row) == set(store.METRIC_COLUMNS)
    assert (row["attempt"], row["worker"], row["service"]) == (2, "w-1", "encoder")
