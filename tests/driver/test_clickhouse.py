"""Metrics rows into ClickHouse: the long format, the HTTP insert (a local recording server),
a failing endpoint, the rows inserted into the committed schema in chDB, and the progress
thread's use of the writer."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from types import SimpleNamespace as NS

from driver.metrics.clickhouse import RunMetricsWriter, insert_url, metric_rows
from driver.output.progress import Progress
from tests.driver.conftest import Recorder

IDENTITY = {"cluster": "ultra-usc1", "team": "research", "run": "tiny-lm", "rank": "0",
            "pod": "tiny-lm-worker-0", "node": "gke-a3u-0007"}  # fmt: skip
ROW = {"step": 7, "loss": 2.5, "lr": 3e-4, "grad_norm": float("nan"), "step_time": 0.05,
       "tokens_per_s": 1000, "time": 1796050941.25, "ckpt_error": "disk full",
       "ckpt_failures": 0, "flag": True}  # fmt: skip


def test_metric_rows_are_one_per_finite_number():
    rows = metric_rows(ROW, IDENTITY)
    names = [r["name"] for r in rows]
    assert names == ["ckpt/failures", "train/loss", "train/lr", "train/step_time_s",
                     "train/tokens_per_s"]  # fmt: skip
    first = rows[1]
    assert first == {"ts": "2026-11-30 15:02:21.250", "cluster": "ultra-usc1", "team": "research",
                     "run": "tiny-lm", "rank": 0, "pod": "tiny-lm-worker-0",
                     "node": "gke-a3u-0007", "step": 7, "name": "train/loss",
                     "value": 2.5, "learner": "", "attempt": 0, "worker": "",
                     "service": ""}  # fmt: skip


def test_insert_url():
    url = insert_url("http://ch:8123/")
    assert url.startswith("http://ch:8123/?query=")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["query"][0]
    assert query == "INSERT INTO platform.run_metrics FORMAT JSONEachRow"


def test_writer_posts_json_each_row(server):
    writer = RunMetricsWriter(server, IDENTITY)
    writer.add([ROW, {**ROW, "step": 8}])
    assert writer.flush() and writer.sent == 10 and writer.pending == []
    path, body = Recorder.received[0]
    assert "INSERT" in urllib.parse.unquote_plus(path)
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert len(lines) == 10 and {line["step"] for line in lines} == {7, 8}


def test_a_failing_endpoint_drops_rows_and_never_raises(server):
    Recorder.status = 500
    writer = RunMetricsWriter(server, IDENTITY)
    writer.add([ROW])
    assert writer.flush() is False and writer.dropped == 5 and "500" in writer.last_error
    unreachable = RunMetricsWriter("http://127.0.0.1:9", IDENTITY, timeout_s=1)
    unreachable.add([ROW])
    unreachable.close()
    assert unreachable.dropped == 5


def test_rows_fit_the_committed_schema():
    from chdb import session as chdb_session

    from observability import clickhouse

    with chdb_session.Session() as session:
        clickhouse.apply(session)
        body = "".join(json.dumps(r) + "\n" for r in metric_rows(ROW, IDENTITY))
        session.query(f"INSERT INTO platform.run_metrics FORMAT JSONEachRow {body}")
        text = (
            session.query(
                "SELECT name, value, rank, pod, toString(ts) AS ts FROM platform.run_metrics "
                "WHERE run = 'tiny-lm' AND step = 7 ORDER BY name",
                "JSONEachRow",
            )
            .bytes()
            .decode()
        )
    got = [json.loads(line) for line in text.splitlines()]
    assert len(got) == 5
    assert got[1] == {"name": "train/loss", "value": 2.5, "rank": 0, "pod": "tiny-lm-worker-0",
                      "ts": "2026-11-30 15:02:21.250"}  # fmt: skip


def test_progress_inserts_what_it_drains(server, tmp_path: Path):
    cfg = NS(
        logging=NS(metrics_file="m.jsonl", tail_lines=10, clickhouse_url=server),
        run=NS(name="tiny-lm", team="research", cluster="local"),
        train=NS(steps=10),
    )
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt="json")
    progress.warehouse.identity.update(pod="p", node="n")  # as rank 0's hello would give
    progress.take([ROW])
    progress.file.close()
    lines = Recorder.received[0][1].decode().splitlines()
    assert len(lines) == 5 and json.loads(lines[0])["pod"] == "p"


def test_the_training_dashboard_finds_the_names_the_driver_writes():
    root = Path(__file__).resolve().parents[2]
    board = root / "kustomize/bases/observability/grafana/dashboards/training.json"
    wanted = set(re.findall(r"name = '(train/[a-z_/]+)'", board.read_text()))
    written = {r["name"] for r in metric_rows(ROW, IDENTITY)}
    assert wanted and wanted <= written, wanted - written
