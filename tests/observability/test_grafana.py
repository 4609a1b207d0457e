"""The `NCCL stragglers` Grafana dashboard runs the analysis' own SQL: its panels hold the
query text of observability/sql/ verbatim, and that text, taken from the JSON with the
dashboard's variables and time range filled in, names the injected stragglers in chDB."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from observability import stragglers

from .cases import KINDS, case, judge
from .conftest import TEAM, loaded

DASHBOARD = (
    Path(__file__).resolve().parents[2]
    / "kustomize/bases/observability/grafana/dashboards/nccl-stragglers.json"
)


def panel_sql(title_start: str) -> str:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    (panel,) = [p for p in panels if p["title"].startswith(title_start)]
    return panel["targets"][0]["rawSql"]


def fill(sql: str, run: str, start: str = "1970-01-01 00:00:00", end="2100-01-01 00:00:00"):
    """What Grafana sends: variables replaced, `$__timeFilter(ts)` a time range."""
    sql = sql.replace("${team}", TEAM).replace("${run}", run)
    window = f"ts >= toDateTime('{start}') AND ts <= toDateTime('{end}')"
    sql = sql.replace("$__timeFilter(ts)", window)
    assert "$" not in sql and not re.search(r"\{\w+:", sql)
    return sql


def query(session, sql: str) -> list[dict]:
    text = session.query(sql, "JSONEachRow").bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line]


@pytest.mark.parametrize("title, name", [
    ("Straggler ranks per window", "straggler_ranks"),
    ("Arrival delay of straggler ranks", "straggler_ranks"),
    ("Straggler nodes per window", "straggler_nodes"),
    ("Persistent stragglers", "straggler_findings"),
])  # fmt: skip
def test_panels_hold_the_analysis_sql(title, name):
    assert stragglers.grafana_sql(name) in panel_sql(title)


def test_no_panel_ranks_ranks_by_bandwidth_or_duration():
    """Low bandwidth and long durations mark the ranks that waited, not the straggler."""
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        sql = panel["targets"][0]["rawSql"]
        assert "ORDER BY median_ratio" not in sql and "median_slowdown" not in sql


@pytest.mark.parametrize("kind", KINDS)
def test_dashboard_query_names_the_injected_straggler(chdb_session, tmp_path, kind):
    ranks_sql, nodes_sql = panel_sql("Straggler ranks per window"), panel_sql("Straggler nodes")
    for seed in range(3):
        c = case(kind, 100 + seed)
        with loaded(chdb_session, tmp_path, c.scenario, 100 + seed) as (run, cols):
            ranks = query(chdb_session, fill(ranks_sql, run))
            nodes = query(chdb_session, fill(nodes_sql, run))
        as_rows = [{**r, "straggler": 1, "delay_us": r["delay_ms"] * 1000} for r in ranks]
        assert judge(c, cols, as_rows, [{**n, "straggler": 1} for n in nodes]) == []


def test_dashboard_findings_panel(chdb_session, tmp_path):
    c = case("single", 42, seconds=150)
    with loaded(chdb_session, tmp_path, c.scenario, 42) as (run, _):
        found = query(chdb_session, fill(panel_sql("Persistent stragglers"), run))
    (rank,) = c.ranks
    assert found[0]["rank"] == rank and found[0]["persistent"] == 1
    assert found[0]["delay_ms"] == pytest.approx(30.0, rel=0.1)
    assert [f for f in found if f["persistent"]] == found[:1]
