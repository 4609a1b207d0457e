"""observability.store: row shape, the chDB store through the reader child (also while
another process writes it), and the ClickHouse-server twin against an HTTP stand-in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from observability import store

ROOT = Path(__file__).resolve().parents[2]
COUNT = "SELECT count() AS n FROM platform.run_metrics WHERE run = {run:String}"


def test_metric_rows_are_run_metrics_rows():
    rows = store.metric_rows(
        {"team": "t", "run": "r", "node": "n1", "pod": "p1"},
        3,
        7,
        0.5,
        {"train/loss": 2.5, "bad": float("nan"), "flag": True, "x": 1},
    )
    assert [r["name"] for r in rows] == ["train/loss", "x"]
    assert set(rows[0]) == set(store.METRIC_COLUMNS)
    assert rows[0] | {} == {**rows[0], "ts": "1970-01-01 00:00:00.500", "rank": 3, "step": 7}


@pytest.mark.parametrize(
    "url, message",
    [("ftp://h:1", "not an http"), ("http://u:secret@h:8123", "credentials go in the"),
     ("nohost", "not an http")],
)  # fmt: skip
def test_server_store_refuses_bad_urls(url, message):
    with pytest.raises(store.StoreError, match=message):
        store.ServerStore(url)


def test_server_store_takes_credentials_from_env(monkeypatch):
    monkeypatch.setenv("CH_U", "reader")
    monkeypatch.setenv("CH_P", "s3cret")
    s = store.ServerStore("http://ch:8123/", user_env="CH_U", password_env="CH_P")
    assert s.headers == {"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "s3cret"}


def test_insert_and_query_round_trip(tmp_path, reader):
    rows = store.metric_rows({"team": "t", "run": "rt"}, 1, 2, time.time(), {"train/loss": 1.5})
    assert reader.insert(tmp_path, store.RUN_METRICS, rows) == 1
    assert (tmp_path / "chdb").is_dir()
    assert reader.query(tmp_path, COUNT, {"run": "rt"}) == [{"n": 1}]
    sql = "SELECT name, value FROM platform.run_metrics WHERE run = {run:String}"
    got = reader.query(tmp_path, sql, {"run": "rt"})
    assert got == [{"name": "train/loss", "value": 1.5}]


WRITER = textwrap.dedent("""
    import sys, time
    from observability import store
    s = store.LocalStore.open(sys.argv[1])
    for step in range(1, 4):
        s.insert_metrics(store.metric_rows({"team": "t", "run": "live"}, 0, step, time.time(),
                                           {"train/loss": 1.0}))
        print(step, flush=True)
        sys.stdin.readline()
    s.close()
""")


def test_a_store_held_by_a_writer_is_read_through_snapshots(tmp_path, reader):
    """A training process keeps its store open (chDB locks the folder); the reader still
    sees its rows, and new ones on the next read."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "1"
        assert reader.query(tmp_path, COUNT, {"run": "live"}) == [{"n": 1}]
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "2"
        assert reader.query(tmp_path, COUNT, {"run": "live"}) == [{"n": 2}]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_opening_a_second_store_in_one_process_is_one_line(tmp_path):
    code = textwrap.dedent("""
        import sys
        from observability import store
        a = store.LocalStore.open(sys.argv[1] + "/a", schema=False)
        try:
            store.LocalStore.open(sys.argv[1] + "/b", schema=False)
        except store.StoreError as err:
            print("ERR", err)
    """)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "already has the chDB store" in done.stdout, done.stdout + done.stderr


def test_the_embedded_server_takes_its_settings_and_keeps_its_folder(tmp_path):
    code = textwrap.dedent("""
        import sys
        from observability import store
        s = store.LocalStore.open(sys.argv[1])
        print(s.query("SELECT value FROM system.server_settings "
                      "WHERE name = 'memory_worker_period_ms'")[0]["value"])
    """)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.stdout.split() == ["1000"], done.stdout + done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["chdb"]
    assert (tmp_path / "chdb" / "metadata").is_dir()


def test_server_store_binds_parameters_over_http(clickhouse, monkeypatch):
    url, handler = clickhouse
    monkeypatch.setenv("CLICKHOUSE_USER", "dash")
    s = store.ServerStore(url)
    assert s.query(COUNT, {"run": "straggly"})[0]["n"] > 0
    assert handler.seen[-1] == {"user": "dash", "params": {"run": "straggly"}}
    assert s.query(COUNT, {"run": "x' OR '1'='1"}) == [{"n": 0}]  # a value, never SQL


def test_a_failing_query_names_the_run_store(outputs, reader):
    from runner.ui.reader import ReaderError

    folder = outputs / "research" / "straggly"
    with pytest.raises(ReaderError, match=rf"^{folder}/chdb: .*UNKNOWN_IDENTIFIER"):
        reader.query(folder, "SELECT nope FROM platform.run_metrics")


@pytest.mark.parametrize("table", ["run_metrics", "platform.x; DROP TABLE y", "a.b.c", ""])
def test_insert_names_only_tables(table):
    with pytest.raises(store.StoreError, match="not a table name"):
        store.ServerStore("http://ch:8123").insert(table, [{"a": 1}])
