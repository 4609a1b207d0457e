"""driver.metrics without Ray: the label set, the one list of metric names (and the
dashboards' SQL against it), the per-rank rows, and the writers: metrics.jsonl appended per
attempt, the chDB store, ClickHouse sign-in and OpenTelemetry export to a local receiver."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from pathlib import Path

import pytest

from catalog import labels
from driver.metrics import flight, names, rank
from driver.metrics.hub import RunMetrics
from driver.metrics.writers import next_attempt

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = {"cluster": "c1", "team": "research", "run": "tiny", "learner": ""}
HOSTS = {0: {"pod": "pod-0", "node": "node-a", "attempt": 0},
         1: {"pod": "pod-1", "node": "node-b", "attempt": 0}}  # fmt: skip


def step_row(step: int, who: int, attempt: int = 0) -> dict:
    row = {"step": step, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0, "step_time": 0.1,
           "data_wait_s": 0.01, "forward_backward_s": 0.07, "optimizer_s": 0.02,
           "tokens_per_s": 1000.0, "time": 1_796_050_000.0 + step}  # fmt: skip
    return {**rank.rank_row(row, who, attempt), "rss_bytes": 1 << 30}


def test_one_label_set_with_opentelemetry_names():
    assert labels.TELEMETRY_LABELS == ("cluster", "team", "run", "learner", "attempt", "node",
                                       "pod", "rank", "worker", "service")  # fmt: skip
    tags = labels.telemetry_labels(run="r", rank=3, pod="p", node="n", service="train")
    assert set(tags) == set(labels.TELEMETRY_LABELS) and tags["rank"] == "3"
    attrs = labels.otel_attributes(tags)
    assert attrs == {"reve.run": "r", "reve.rank": "3", "k8s.pod.name": "p",
                     "k8s.node.name": "n", "service.name": "train"}  # fmt: skip
    with pytest.raises(KeyError):
        labels.telemetry_labels(host="x")


def queried_names(text: str) -> set[str]:
    """Metric names (or `aux/%/field` patterns) a query text compares `name` with."""
    return set(re.findall(r"'((?:train|aux|ckpt)/[^'%]*(?:%[^']*)?)'", text))


def test_every_name_the_dashboards_and_sql_query_is_in_the_list():
    texts = [p.read_text() for p in (ROOT / "kustomize/bases/observability/grafana/dashboards")
             .glob("*.json")]  # fmt: skip
    texts += [p.read_text() for p in (ROOT / "observability/sql").glob("*.sql")]
    texts.append((ROOT / "runner/ui/queries.py").read_text())
    found = set().union(*(queried_names(t) for t in texts))
    assert {"train/loss", "train/step_time_s", "aux/%/latency_s"} <= found
    unknown = set()
    for name in found:
        if name in ("aux/", "train/%_per_s"):  # prefixes: any name of the family
            continue
        if not names.known(name.replace("%", "svc")):
            unknown.add(name)
    assert not unknown, f"queried but not in driver.metrics.names: {unknown}"


def test_every_field_a_step_reports_has_a_known_name():
    keys = set(step_row(1, 0)) | {"cuda_max_allocated_bytes", "samples_per_s",
                                  "ckpt_committed_step", "ckpt_failures", "ckpt_blocked_s",
                                  "aux/encoder/latency_s"}  # fmt: skip
    for key in keys - names.NOT_METRICS:
        assert names.known(names.metric_name(key)), key
    assert names.spec("train/step_time_s").unit == "s"
    assert names.spec("train/rss_bytes").unit == "By"


def test_other_ranks_send_only_their_own_figures():
    row = step_row(4, 1, attempt=2)
    assert row["rank"] == 1 and row["attempt"] == 2 and row["step"] == 4
    assert "loss" not in row and "lr" not in row and row["data_wait_s"] == 0.01
    assert "loss" in step_row(4, 0)


class FakeSink:
    """A driver.channel client's two calls the reporter makes, recorded."""

    def __init__(self):
        self.rows, self.synced = [], 0

    def send(self, method, rows):
        assert method == "push_many"
        self.rows.extend(rows)

    def call(self, method, timeout_s):
        assert method == "sync" and timeout_s > 0
        self.synced += 1


def test_reporter_batches_and_flush_sends_the_rest():
    sink = FakeSink()
    reporter = rank.RankReporter(sink, 1, 0, every_s=3600, idle_s=3600)
    for step in range(1, 4):
        reporter.add({"step": step, "step_time": 0.1, "time": 1.0, "loss": 2.0})
    assert sink.rows == []  # not due yet
    reporter.flush()
    assert [r["step"] for r in sink.rows] == [1, 2, 3] and sink.synced == 1
    assert all(r["rank"] == 1 and "rss_bytes" in r and "loss" not in r for r in sink.rows)


def test_a_rank_that_stops_adding_rows_still_sends_them():
    sink = FakeSink()
    reporter = rank.RankReporter(sink, 1, 0, every_s=3600, idle_s=0.05)
    reporter.add({"step": 1, "step_time": 0.1, "time": 1.0})  # then blocked in a collective
    deadline = time.monotonic() + 30
    while not sink.rows and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [r["step"] for r in sink.rows] == [1]
    reporter.flush()


@pytest.mark.parametrize(
    "pending, pushed, added, expected",
    [
        (False, 0.0, 0.0, 0.2),  # nothing to send: look again after idle_s
        (True, 9.5, 9.9, 0.1),  # rows coming: the idle deadline is later than the push's
        (True, 9.95, 9.9, 0.1),  # pushed just now, the newest row went idle first
        (True, 9.0, 9.9, 0.0),  # due: a second since the last push
        (True, 8.0, 9.99, 0.0),  # overdue never waits a negative time
    ],
)
def test_the_sending_thread_sleeps_until_the_batch_is_due(pending, pushed, added, expected):
    now = 10.0
    wait = rank.next_wake(now, pending, pushed, added, every_s=1.0, idle_s=0.2)
    assert wait == pytest.approx(expected)


def test_due_comes_once_per_interval_while_the_thread_sends():
    """Rank 0 adds the aux figures when `due()`: true about once per batch interval, even
    though the sending thread pushes as soon as a batch is due."""
    sink = FakeSink()
    reporter = rank.RankReporter(sink, 0, 0, every_s=0.2, idle_s=0.1)
    assert reporter.due() and not reporter.due()  # the first step's row, then a wait
    seen, deadline = 1, time.monotonic() + 1.5
    while time.monotonic() < deadline:
        seen += reporter.due()
        reporter.add({"step": 1, "step_time": 0.1, "time": 1.0, "loss": 2.0})
        time.sleep(0.01)
    reporter.flush()
    assert 3 <= seen <= 9 and sink.rows


def test_memory_is_sampled_at_most_once_per_interval(monkeypatch):
    reads = []
    monkeypatch.setattr(rank, "rss_bytes", lambda: reads.append(1) or 4096 * len(reads))
    sampler = rank.MemorySampler(None, every_s=3600)
    assert sampler() == {"rss_bytes": 4096} and sampler() == {"rss_bytes": 4096}
    assert len(reads) == 1
    sampler.every_s = 0
    assert sampler() == {"rss_bytes": 8192}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_file_appends_every_attempt_and_resume(tmp_path):
    first = RunMetrics(IDENTITY, tmp_path, "metrics.jsonl", store=False)
    assert first.first_attempt == 0
    first.write([step_row(s, r, 0) for s in (1, 2, 3) for r in (0, 1)], HOSTS)
    first.write([step_row(s, r, 1) for s in (3, 4) for r in (0, 1)], HOSTS)  # a restart
    first.close()
    resumed = RunMetrics(IDENTITY, tmp_path, "metrics.jsonl", store=False)  # a new driver
    assert resumed.first_attempt == 2 == next_attempt(tmp_path / "metrics.jsonl")
    resumed.write([step_row(5, 0, 2)], HOSTS)
    resumed.close()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    keys = [(r["attempt"], r["step"]) for r in rows]
    assert keys == [(0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (2, 5)]  # rank 0's, none twice
    for row in rows:
        assert set(labels.TELEMETRY_LABELS) <= set(row)
        assert (row["run"], row["pod"], row["node"], row["service"]) == (
            "tiny",
            "pod-0",
            "node-a",
            "train",
        )


def test_store_gets_every_rank_with_labels(tmp_path):
    metrics = RunMetrics(IDENTITY, tmp_path, "metrics.jsonl", store=True)
    metrics.write([], HOSTS)  # no rows: chDB does not start yet
    assert metrics.store.store is None
    metrics.write([step_row(s, r) for s in (1, 2) for r in (0, 1)], HOSTS)  # starts it
    store = metrics.store.store
    got = store.query("SELECT rank, pod, node, team, run, cluster, count() AS n, "
                      "countIf(name = 'train/loss') AS loss FROM platform.run_metrics "
                      "GROUP BY rank, pod, node, team, run, cluster ORDER BY rank")  # fmt: skip
    metrics.close()
    assert [(g["rank"], g["pod"], g["node"]) for g in got] == [
        (0, "pod-0", "node-a"),
        (1, "pod-1", "node-b"),
    ]
    assert all((g["team"], g["run"], g["cluster"]) == ("research", "tiny", "c1") for g in got)
    assert got[0]["loss"] == 2 and got[1]["loss"] == 0  # loss is rank 0's
    assert got[1]["n"] == 2 * len(rank.PER_RANK_KEYS & set(step_row(1, 1)))


class Receiver(http.server.BaseHTTPRequestHandler):
    """Records every POST: (path, headers, body)."""

    got: list[tuple[str, dict, bytes]] = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.got.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.got = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_clickhouse_signs_in_from_the_environment(receiver, tmp_path, monkeypatch):
    from driver.metrics import CLICKHOUSE_ENV

    monkeypatch.setenv(CLICKHOUSE_ENV[0], "runs")
    monkeypatch.setenv(CLICKHOUSE_ENV[1], "s3cret")
    metrics = RunMetrics(IDENTITY, tmp_path, "m.jsonl", clickhouse_url=receiver, store=False)
    metrics.write([step_row(1, 0), step_row(1, 1)], HOSTS)
    metrics.close()
    ((_, headers, body),) = Receiver.got
    headers = {k.lower(): v for k, v in headers.items()}
    assert headers["x-clickhouse-user"] == "runs" and headers["x-clickhouse-key"] == "s3cret"
    rows = [json.loads(line) for line in body.decode().splitlines()]
    assert {(r["rank"], r["pod"]) for r in rows} == {(0, "pod-0"), (1, "pod-1")}
    with pytest.raises(ValueError, match="environment"):
        RunMetrics(IDENTITY, tmp_path, "m.jsonl", clickhouse_url="http://u:p@ch:8123")


def test_opentelemetry_export_to_a_local_receiver(receiver, tmp_path):
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    metrics = RunMetrics({**IDENTITY, "learner": "a"}, tmp_path, "m.jsonl",
                         otel_endpoint=receiver, store=False)  # fmt: skip
    metrics.write([step_row(1, 0), step_row(1, 1)], HOSTS)
    metrics.close()  # exports what is left
    assert Receiver.got and Receiver.got[0][0] == "/v1/metrics"
    request = ExportMetricsServiceRequest.FromString(Receiver.got[0][2])
    (resource,) = request.resource_metrics
    attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert attrs["service.name"] == "train" and attrs["k8s.namespace.name"] == "research"
    assert attrs["reve.run"] == "tiny" and attrs["k8s.cluster.name"] == "c1"
    found = {m.name: m for scope in resource.scope_metrics for m in scope.metrics}
    step = found["train.step.duration"]
    assert step.unit == "s"
    ranks = {next(a.value.string_value for a in p.attributes if a.key == "reve.rank")
             for p in step.gauge.data_points}  # fmt: skip
    assert ranks == {"0", "1"}
    assert "train.loss" in found and found["process.memory.usage"].unit == "By"


def test_flight_recorder_env_reaches_workers_before_the_process_group(tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from ray.train.torch.config import _TorchBackend

    cfg = NS(run=NS(output_dir=str(tmp_path)), debug=NS(flight_recorder_entries=500))
    env = flight.worker_env(cfg)
    assert env["TORCH_FR_BUFFER_SIZE"] == "500" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert flight.worker_env(NS(run=cfg.run, debug=NS(flight_recorder_entries=0))) == {}
    order = []
    monkeypatch.setattr(_TorchBackend, "on_start", lambda *a: order.append("process group"))
    monkeypatch.setattr(flight, "set_env", lambda e: order.append(("env", e)))

    class Group:
        def execute(self, fn, *args):
            fn(*args)

    config = flight.torch_config("gloo", env)
    config.backend_cls().on_start(Group(), config)
    assert order == [("env", env), "process group"]


def test_torchft_config_gets_the_same_env():
    from ray.train.v2.torch.torchft_config import TorchftConfig

    config = flight.with_env(TorchftConfig(lighthouse_kwargs={"min_replicas": 1}), {"A": "1"})
    assert isinstance(config, TorchftConfig) and config.worker_env == {"A": "1"}
    assert config.lighthouse_kwargs == {"min_replicas": 1}
    assert issubclass(config.backend_cls, TorchftConfig(lighthouse_kwargs={}).backend_cls)
