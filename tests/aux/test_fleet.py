"""FleetMonitor aggregation (pure): worker windows from cumulative stats (restarts, silent
workers), per-service metrics under `aux/<service>/...`, the proxy table, and that the
names are the ones the aux-services dashboard queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.aux import fleet
from driver.aux.fleet import proxy_nodes, proxy_table, service_metrics, worker_window

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "kustomize/bases/observability/grafana/dashboards/aux-services.json"


def stats(pid=1, served=0, errors=0, pending=0, wait=0.0, busy=0.0):
    return {"pid": pid, "served": served, "errors": errors, "pending": pending,
            "wait_s_sum": wait, "process_s_sum": busy}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "prev", "cur", "expected"),
    [
        ("deltas over the window", stats(served=10, wait=1.0, busy=2.0),
         stats(served=30, errors=1, pending=4, wait=2.0, busy=6.0),
         {"served": 20, "errors": 1, "pending": 4, "wait_s": 1.0, "process_s": 4.0, "rate": 10.0,
          "healthy": True}),
        ("first poll counts from zero", None, stats(served=6, busy=0.6),
         {"served": 6, "rate": 3.0, "process_s": 0.6}),
        ("a restarted worker (new pid) counts from zero", stats(pid=1, served=100),
         stats(pid=2, served=4), {"served": 4, "rate": 2.0}),
        ("a silent worker is unhealthy and counts nothing", stats(served=5), None,
         {"healthy": False, "served": 0, "rate": 0.0}),
    ],
)  # fmt: skip
def test_worker_window(case, prev, cur, expected):
    window = worker_window(prev, cur, 2.0)
    assert {k: window[k] for k in expected} == pytest.approx(expected), case


def test_service_metrics_sum_and_average_per_request():
    windows = [
        worker_window(None, stats(served=10, pending=2, wait=1.0, busy=1.0), 1.0),
        worker_window(None, stats(served=30, pending=1, errors=2, wait=1.0, busy=5.0), 1.0),
        worker_window(stats(), None, 1.0),
    ]
    proxies = [{"address": "tcp://a:1", "live": 2}, None]
    got = service_metrics("encoder", windows, proxies)
    assert got == pytest.approx({
        "aux/encoder/queue_depth": 3,
        "aux/encoder/latency_s": 8.0 / 40,
        "aux/encoder/queue_wait_s": 2.0 / 40,
        "aux/encoder/process_s": 6.0 / 40,
        "aux/encoder/requests_per_s": 40.0,
        "aux/encoder/errors": 2,
        "aux/encoder/workers": 3,
        "aux/encoder/healthy_workers": 2,
        "aux/encoder/live_proxies": 1,
    })  # fmt: skip


def test_idle_service_has_zero_latency_not_nan():
    got = service_metrics("eval", [worker_window(None, stats(), 1.0)], [])
    assert got["aux/eval/latency_s"] == 0.0 and got["aux/eval/requests_per_s"] == 0.0


def test_totals_per_service_and_per_worker():
    last = {"enc/0": stats(served=5, errors=1), "enc/1": stats(served=7),
            "eval/0": stats(served=2)}  # fmt: skip
    got = fleet.totals("enc", last, {"enc/1": 2})
    assert got == {"served": 12, "errors": 1, "restarts": 2, "per_worker": {
        "0": {"served": 5, "errors": 1, "restarts": 0},
        "1": {"served": 7, "errors": 0, "restarts": 2},
    }}  # fmt: skip


def test_proxy_table_drops_silent_proxies():
    proxies = [{"address": "tcp://a:1", "live": 2}, None, {"address": "tcp://b:2", "live": 0}]
    assert proxy_table(proxies) == {"tcp://a:1": 2, "tcp://b:2": 0}


def test_proxy_nodes_tell_ranks_which_proxy_is_their_own_nodes():
    proxies = [
        {"address": "tcp://a:1", "live": 2, "node": "n0"},
        None,
        {"address": "tcp://b:2", "live": 1, "node": "n1"},
        {"address": "tcp://c:3"},
    ]
    assert proxy_nodes(proxies) == {"tcp://a:1": "n0", "tcp://b:2": "n1"}


def test_dashboard_queries_names_the_monitor_writes():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queried = set()
    for panel in panels:
        for target in panel.get("targets", []):
            sql = target.get("rawSql", "")
            if "LIKE 'aux/%/" in sql:
                queried.add(sql.split("LIKE 'aux/%/")[1].split("'")[0])
    assert queried and queried <= set(fleet.METRICS)


def test_dashboard_panels_find_the_rows_the_driver_writes():
    """A metrics row carrying the monitor's figures, through driver.metrics.clickhouse into the
    committed schema (chDB): every aux panel's query returns the service."""
    from chdb import session as chdb_session

    from driver.metrics.clickhouse import metric_rows
    from observability import clickhouse

    window = worker_window(None, stats(served=8, pending=1, wait=0.2, busy=0.6), 1.0)
    row = {"step": 3, "time": 1796000000.0, "loss": 1.0,
           **service_metrics("encoder", [window], [{"address": "tcp://a:1", "live": 1}]),
           fleet.metric("encoder", fleet.EVAL_LOSS): 0.5}  # fmt: skip
    identity = {"cluster": "local", "team": "research", "run": "dit", "rank": "0"}
    with chdb_session.Session() as session:
        clickhouse.apply(session)
        body = "".join(json.dumps(r) + "\n" for r in metric_rows(row, identity))
        session.query(f"INSERT INTO platform.run_metrics FORMAT JSONEachRow {body}")
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            sql = panel["targets"][0]["rawSql"]
            sql = (sql.replace("$__timeInterval(ts)", "toStartOfMinute(ts)")
                   .replace("${team}", "research").replace("${run:singlequote}", "'dit'")
                   .replace("$__timeFilter(ts)", "1"))  # fmt: skip
            text = session.query(sql, "JSONEachRow").bytes().decode()
            got = [json.loads(line) for line in text.splitlines()]
            assert [r["service"] for r in got] == ["encoder"], panel["title"]
