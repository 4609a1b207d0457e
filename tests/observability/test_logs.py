"""A run's log lines: each process's file (observability.logs.LogFile), their ingestion into
a store (whole lines only, never twice, bad lines skipped), reading them back with bound
filters (observability.log_search), the views that map the collector's and Fluent Bit's
records into platform.run_logs, the OTLP handler against a loopback receiver, and the
signed bundle manifest (observability.bundle)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from catalog.labels import TELEMETRY_LABELS
from catalog.runkey import run_key
from observability import bundle, log_search, logs

T0 = time.time() - 3600  # an hour ago: inside the table's TTL
LABELS = {"cluster": "local", "team": "obs-logs", "rank": 3, "attempt": 1, "pod": "w-0",
          "node": "node-1", "service": "train"}  # fmt: skip


class Store:
    """The part of a store Ingest and log_search use, over the module's chDB session."""

    def __init__(self, session):
        self.session = session

    def execute(self, sql, params=None):
        return self.session.query(sql, "JSONEachRow", params=params or {}).bytes().decode()

    def query(self, sql, params=None):
        return [json.loads(x) for x in self.execute(sql, params).splitlines() if x]


@pytest.fixture
def run(chdb_session):
    name = f"r-{uuid.uuid4().hex[:8]}"
    yield name, Store(chdb_session)
    chdb_session.query(f"DELETE FROM platform.run_logs WHERE run = '{name}'")


def logger_to(handler, name):
    log = logging.getLogger(f"test.logs.{name}")
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO)
    return log


def test_the_columns_are_the_tables_and_carry_the_label_set(chdb_session):
    rows = Store(chdb_session).query("SELECT name FROM system.columns WHERE database = 'platform' "
                                     "AND table = 'run_logs' ORDER BY position")  # fmt: skip
    assert [r["name"] for r in rows] == list(logs.LOG_COLUMNS)
    assert set(TELEMETRY_LABELS) <= set(logs.LOG_COLUMNS)


def test_files_are_ingested_whole_lines_once(tmp_path, run):
    name, store = run
    folder = tmp_path / "logs"
    handler = logs.LogFile(folder / logs.file_name("train", 3), {**LABELS, "run": name})
    log = logger_to(handler, name)
    log.info("step %d loss %.1f", 1, 2.5)
    try:
        raise ValueError("bad batch")
    except ValueError:
        log.exception("rank 3 failed")
    with (folder / "other.jsonl").open("w") as f:  # a bad line, then half a line
        half = json.dumps(
            {"ts": time.time() - 60, "team": "obs-logs", "run": name, "line": "half done"}
        )
        f.write("not json\n" + half[: half.index(" done")])
    ingest = logs.Ingest(folder, store)
    assert ingest.poll() == 3 and ingest.poll() == 0
    with (folder / "other.jsonl").open("a") as f:
        f.write(' done"}\n')  # the rest of the half line
    assert logs.Ingest(folder, store).poll() == 1  # a later process: from the saved offsets
    got = log_search.lines(store.query, "obs-logs", name)
    assert [r["line"].splitlines()[0] for r in got] == [
        "half done",
        "step 1 loss 2.5",
        "rank 3 failed",
    ]
    error = got[-1]
    assert (error["rank"], error["attempt"], error["pod"], error["node"], error["level"]) == (
        3, 1, "w-0", "node-1", "ERROR")  # fmt: skip
    assert "ValueError: bad batch" in error["line"] and error["service"] == "train"
    handler.close()


def test_filters_are_bound_and_the_view_opens_around_a_time(tmp_path, run):
    name, store = run
    folder = tmp_path / "logs"
    for rank in (0, 1):
        f = logs.LogFile(folder / logs.file_name("train", rank),
                         {**LABELS, "run": name, "rank": rank, "pod": f"w-{rank}"})  # fmt: skip
        for second in range(10):
            f.write(T0 + second, f"rank {rank} second {second} it's 'quoted'", "INFO", "x")
        f.write(T0 + 10, f"rank {rank} failed", "ERROR", "x")
        f.close()
    logs.Ingest(folder, store).poll()
    around = log_search.around(store.query, "obs-logs", name, 1, T0 + 10, before_s=3, after_s=0)
    assert [r["line"] for r in around][-1] == "rank 1 failed"
    assert {r["rank"] for r in around} == {1} and len(around) == 4
    hostile = log_search.lines(store.query, "obs-logs", name, text="' OR 1=1 --")
    assert hostile == []
    quoted = log_search.lines(store.query, "obs-logs", name, text="it's 'quoted'", pod="w-0")
    assert len(quoted) == 10 and {r["pod"] for r in quoted} == {"w-0"}
    errors = log_search.lines(store.query, "obs-logs", name, levels=("ERROR",))
    assert [r["rank"] for r in errors] == [0, 1]
    assert log_search.first_error(store.query, "obs-logs", name)["rank"] == 0
    facets = log_search.facets(store.query, "obs-logs", name)
    assert facets["ranks"] == [0, 1] and facets["pods"] == ["w-0", "w-1"] and facets["lines"] == 22


def test_the_collectors_records_reach_run_logs_with_their_labels(run):
    """The OpenTelemetry exporter's table (a Null table) and Fluent Bit's container lines both
    land in platform.run_logs through their views (schema.sql)."""
    name, store = run
    store.execute(
        "INSERT INTO platform.otel_run_logs (Timestamp, SeverityText, ServiceName, Body, "
        "ResourceAttributes, ScopeName) VALUES (now64(9), 'ERROR', 'encoder', 'worker died', "
        f"map('reve.run', '{name}', 'k8s.namespace.name', 'obs-logs', 'reve.rank', '', "
        "'k8s.pod.name', 'p-1', 'k8s.node.name', 'n-1', 'service.instance.id', 'encoder-0'), "
        "'driver.aux')"
    )
    line = {"date": T0, "node": "n-2", "stream": "stderr",
            "log": "2026-01-01 00:00:00,000 WARNING run=x rank=7 attempt=2 pod=p node=n NCCL WARN",
            "kubernetes": {"pod_name": "w-7", "namespace_name": "obs-logs",
                           "container_name": "ray-worker",
                           "labels": {"platform.reve.dev/run": name}}}  # fmt: skip
    store.execute("INSERT INTO platform.container_logs_raw FORMAT JSONEachRow\n" + json.dumps(line))
    rows = {r["source"]: r for r in log_search.lines(store.query, "obs-logs", name)}
    otel, container = rows["logging"], rows["stderr"]
    assert (otel["service"], otel["worker"], otel["rank"], otel["level"]) == (
        "encoder", "encoder-0", -1, "ERROR")  # fmt: skip
    assert (container["rank"], container["attempt"], container["pod"], container["node"],
            container["level"]) == (7, 2, "w-7", "n-2", "WARNING")  # fmt: skip


class Receiver(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):  # noqa: N802
        self.got.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_records_go_over_otlp_with_the_label_set_as_the_resource():
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        handler = logs.otel_handler(f"http://127.0.0.1:{server.server_address[1]}",
                                    {**LABELS, "run": "otlp-run"})  # fmt: skip
        logger_to(handler, "otlp").warning("NCCL WARN link down")
        handler.close()
    finally:
        server.shutdown()
        server.server_close()
    path, body = Receiver.got[0]
    assert path == "/v1/logs"
    request = ExportLogsServiceRequest.FromString(body)
    resource = {a.key: a.value.string_value for a in request.resource_logs[0].resource.attributes}
    assert resource["reve.run"] == "otlp-run" and resource["reve.rank"] == "3"
    assert resource["k8s.pod.name"] == "w-0" and resource["service.name"] == "train"
    record = request.resource_logs[0].scope_logs[0].log_records[0]
    assert record.body.string_value == "NCCL WARN link down" and record.severity_text == "WARN"


def test_a_bundle_manifest_is_signed_and_checked(tmp_path):
    folder = tmp_path / "crash-1"
    (folder / "logs").mkdir(parents=True)
    (folder / "error.txt").write_text("boom")
    (folder / "logs" / "driver.jsonl").write_text("{}\n")
    key = run_key(b"team-secret", "research", "tiny-lm")
    m = bundle.sign(bundle.manifest(folder, "research", "tiny-lm"), key)
    (folder / bundle.MANIFEST).write_text(bundle.dumps(m))
    assert bundle.check(folder, key, "research", "tiny-lm") == []
    other = run_key(b"other", "research", "tiny-lm")
    assert bundle.check(folder, other, "research", "tiny-lm") == [
        "its manifest is not signed with this run's key"
    ]
    assert "belongs to research/tiny-lm" in bundle.check(folder, key, "research", "other")[0]
    (folder / "error.txt").write_text("edited")
    (folder / "extra.txt").write_text("planted")
    assert bundle.check(folder, key, "research", "tiny-lm") == [
        "error.txt: changed since the bundle was signed",
        "extra.txt: not in the manifest",
    ]
