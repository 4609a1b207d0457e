"""The straggler sweep on the real Temporal dev server and chDB: synthetic NCCL records with
an injected persistent straggler start one ambiguous node workflow for its node (reason
naming run and rank); healthy records start nothing; a ClickHouse that does not answer is
counted and asked again next round, and the worker keeps serving."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from observability import synthetic
from observability.store import LocalStore, StoreError
from observability.stragglers import Thresholds
from tests.warden.conftest import Harness
from warden.activities import WardenActivities
from warden.model import NodeResult, StragglerInput, StragglerResult, node_workflow_id
from warden.stragglers import ACTIVE_RUNS, StragglerSweep, find, server_source
from warden.workflows import StragglerWorkflow

TEAM = "warden-test"
FAST = Thresholds(window_s=5, min_duration_s=20)
SLOW_RANK = 5  # on the scenario's node 0


@pytest.fixture(scope="module")
def store():
    """An in-memory chDB with the platform schema (chDB runs one server per process; the
    in-memory one is shared with other tests' sessions, so each test writes its own run)."""
    from chdb import session as chdb_session

    from observability import clickhouse

    session = chdb_session.Session()
    clickhouse.apply(session)
    yield LocalStore(session, Path(":memory:"))
    session.close()


def load(store: LocalStore, folder: Path, nodes: list[str], slow: bool) -> str:
    """A fresh run of 16 ranks on two nodes (named `nodes`) over the last 45 s, with rank 5
    slowed 1.3x in every step when `slow`; its name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = f"run-{uuid.uuid4().hex[:8]}"
    sc = synthetic.Scenario(ranks=16, seconds=40, slow=(synthetic.Slow((SLOW_RANK,)),) * slow)
    cols = synthetic.generate(sc, seed=3, start_us=(int(time.time()) - 45) * 1_000_000)
    table = synthetic.to_arrow(sc, cols)
    for column in ("node", "pod"):
        codes = table.column(column).combine_chunks().indices
        names = nodes if column == "node" else [f"{run}-w-{i}" for i in range(len(nodes))]
        index = table.schema.get_field_index(column)
        table = table.set_column(index, column, pa.DictionaryArray.from_arrays(codes, names))
    path = folder / f"{run}.parquet"
    pq.write_table(table, path)
    columns = ", ".join(table.column_names)
    store.execute(
        f"INSERT INTO platform.nccl_collectives (team, run, {columns}) "
        f"SELECT {{team:String}}, {{run:String}}, {columns} FROM file('{path}', Parquet)",
        {"team": TEAM, "run": run},
    )
    return run


def drop(store: LocalStore, run: str) -> None:
    store.execute("DELETE FROM platform.nccl_collectives WHERE run = {run:String}", {"run": run})


class SweepHarness(Harness):
    def __init__(self, address, fleet, sweep: StragglerSweep):
        super().__init__(address, fleet)
        self.sweep = sweep

    def activities(self) -> WardenActivities:
        acts = super().activities()
        acts.stragglers = self.sweep
        return acts


async def sweep_rounds(h, rounds: int = 1) -> StragglerResult:
    return await h.client.execute_workflow(
        StragglerWorkflow.run,
        StragglerInput(h.timings, h.queue, rounds),
        id=f"stragglers-{h.queue}-{uuid.uuid4().hex[:6]}",
        task_queue=h.queue,
        result_type=StragglerResult,
    )


def test_find_names_the_slow_rank_and_its_node(store, tmp_path):
    nodes = ["n-a", "n-b"]
    run = load(store, tmp_path, nodes, slow=True)
    try:
        found = [f for f in find(StragglerSweep(store, 600, FAST), datetime.now(UTC))
                 if f["run"] == run]  # fmt: skip
    finally:
        drop(store, run)
    assert [(f["rank"], f["node"], f["team"]) for f in found] == [(SLOW_RANK, "n-a", TEAM)]


def test_a_persistent_straggler_starts_its_nodes_check(temporal_address, fleet, store, tmp_path):
    nodes = [fleet.node_name(0), fleet.node_name(1)]
    fleet.set_outcome(nodes[0], "check", "succeeded")
    run = load(store, tmp_path, nodes, slow=True)
    h = SweepHarness(temporal_address, fleet, StragglerSweep(store, 600, FAST))

    async def body(h):
        first = await sweep_rounds(h)
        handle = h.client.get_workflow_handle(node_workflow_id(nodes[0]), result_type=NodeResult)
        node_result = await handle.result()
        again = await sweep_rounds(h)  # the check cleared the node: quiet for cleared_quiet_s
        return first, node_result, again

    try:
        first, node_result, again = h.run(body)
    finally:
        drop(store, run)
    assert (first.started, first.already_running, first.unreachable, first.failed) == (1, 0, 0, 0)
    assert node_result.outcome == "cleared" and node_result.actions[0] == "check succeeded"
    [decision] = [r for r in h.sink.records if r.action == "clear"]
    assert decision.node == nodes[0]
    assert f"NCCL straggler: rank {SLOW_RANK} ({run}-w-0) of run {TEAM}/{run} last in" in (
        decision.reason
    )
    assert again.started == 0 and again.skipped >= 1
    assert sum(fleet.counts("cordon").values()) == 0


def test_no_straggler_starts_nothing(temporal_address, fleet, store, tmp_path):
    nodes = [fleet.node_name(0), fleet.node_name(1)]
    run = load(store, tmp_path, nodes, slow=False)
    h = SweepHarness(temporal_address, fleet, StragglerSweep(store, 600, FAST))

    async def body(h):
        result = await sweep_rounds(h)
        described = []
        for node in nodes:
            try:
                await h.client.get_workflow_handle(node_workflow_id(node)).describe()
                described.append(node)
            except Exception:  # RPCError NOT_FOUND: no workflow for the node
                continue
        return result, described

    try:
        result, described = h.run(body)
    finally:
        drop(store, run)
    assert (result.started, result.unreachable, result.failed) == (0, 0, 0)
    assert described == []


def test_an_unreachable_clickhouse_is_counted_and_asked_again(
    temporal_address, fleet, caplog
):  # fmt: skip
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = server_source(f"http://127.0.0.1:{port}", "reader", "NO_SUCH_VARIABLE", 2.0)
    h = SweepHarness(temporal_address, fleet, StragglerSweep(source, 600, FAST))
    h.timings.straggler_period_s = 0.2

    async def body(h):
        return await sweep_rounds(h, rounds=2), await sweep_rounds(h, rounds=1)

    with caplog.at_level(logging.WARNING, logger="warden"):
        result, later = h.run(body)
    assert (result.rounds, result.unreachable, result.failed, result.started) == (2, 2, 0, 0)
    assert f"127.0.0.1:{port}" in result.error and later.unreachable == 1
    assert "ClickHouse did not answer" in caplog.text


class BrokenRun:
    """The store, plus one active run whose findings query fails."""

    def __init__(self, store: LocalStore):
        self.store = store

    def query(self, sql: str, params: dict | None = None) -> list[dict]:
        if sql == ACTIVE_RUNS:
            broken = {"team": TEAM, "run": "broken", "records": 10**9}
            return [broken, *self.store.query(sql, params)]
        if (params or {}).get("run") == "broken":
            raise StoreError("http://ch:8123: HTTP Error 500: query timed out")
        return self.store.query(sql, params)


def test_a_failing_run_leaves_the_others_analysed(temporal_address, fleet, store, tmp_path):
    nodes = [fleet.node_name(0), fleet.node_name(1)]
    run = load(store, tmp_path, nodes, slow=True)
    h = SweepHarness(temporal_address, fleet, StragglerSweep(BrokenRun(store), 600, FAST))
    try:
        result = h.run(sweep_rounds)
    finally:
        drop(store, run)
    assert (result.started, result.run_errors, result.unreachable) == (1, 1, 0)
    assert f"run {TEAM}/broken: http://ch:8123: HTTP Error 500" in result.error


def test_server_source_reads_the_password_by_reference(monkeypatch):
    monkeypatch.setenv("CLICKHOUSE_READER_PASSWORD", "hex")
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", "writer-secret")  # the writer's: never sent
    source = server_source("http://ch:8123", "reader", "CLICKHOUSE_READER_PASSWORD", 5.0)
    assert source.headers == {"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "hex"}


def test_the_worker_wires_the_configured_sweep(tmp_path, monkeypatch):
    from warden.config import load_config
    from warden.fakefleet import FakeCluster
    from warden.worker import activities_for

    monkeypatch.setenv("CLICKHOUSE_READER_PASSWORD", "hex")
    fleet_path = tmp_path / "fleet.json"
    FakeCluster.create(str(fleet_path), nodes=1)
    path = tmp_path / "warden.yaml"
    path.write_text("cluster: ultra-usc1\njobs: {check_image: img}\ntelemetry_path: null\n"
                    "timings: {activity_timeout_s: 30}\n")  # fmt: skip
    environ = {"WARDEN_STRAGGLERS_CLICKHOUSE_URL": "http://ch:8123",
               "WARDEN_STRAGGLER_PERIOD_S": "60"}  # fmt: skip
    config = load_config(str(path), environ=environ)
    assert config.timings.straggler_period_s == 60
    sweep = activities_for(config, str(fleet_path)).stragglers
    source = sweep.source
    assert (source.url, source.timeout_s, sweep.lookback_s) == ("http://ch:8123", 30, 900)
    assert source.headers == {"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "hex"}
    assert activities_for(load_config(str(path), environ={}), str(fleet_path)).stragglers is None


def test_start_stragglers_replaces_the_running_sweep(temporal_address):
    import asyncio

    from temporalio.client import Client

    from tests.warden.conftest import FAST
    from warden.worker import start_stragglers

    cluster = f"c-{uuid.uuid4().hex[:6]}"
    slow = FAST.__class__(**{**vars(FAST), "straggler_period_s": 3600})

    async def body():
        client = await Client.connect(temporal_address)
        first = await start_stragglers(client, cluster, "no-worker", slow)
        second = await start_stragglers(client, cluster, "no-worker", slow)
        described = await client.get_workflow_handle(
            first.id, run_id=first.result_run_id
        ).describe()
        await second.terminate()
        return first.id, described.status.name

    workflow_id, status = asyncio.run(body())
    assert workflow_id == f"warden-stragglers-{cluster}" and status == "TERMINATED"
