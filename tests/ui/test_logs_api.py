"""`/api/logs` and `/api/verdict` of `runner ui`: a local failed run's lines opened at its
failure, filters, the analysis; the same SQL against ClickHouse (an HTTP stand-in answering
with chDB, parameters bound); every bad parameter a 400 naming it."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer

import pytest

from observability.store import ServerStore
from runner.ui.sources import ClusterSource, LocalSource
from tests.ui import postmortem
from tests.ui.conftest import ClickHouseStandIn
from tests.ui.test_api import get

RUN = f"team={postmortem.TEAM}&run={postmortem.FAILED}"


@pytest.fixture(scope="module")
def folders(tmp_path_factory, reader):
    root = tmp_path_factory.mktemp("postmortem-api")
    postmortem.fill(root, reader)
    return root


def test_a_failed_runs_lines_open_at_its_failure(folders, reader, serve):
    base = serve(LocalSource(folders, reader=reader))
    status, body = get(base, f"api/logs?{RUN}")
    assert status == 200 and body["window"]["at_failure"] and body["window"]["rank"] == 0
    assert (
        body["failure"]["bundle"].startswith("crash-") and "Timed out" in body["failure"]["error"]
    )
    assert {line["rank"] for line in body["lines"]} == {0}
    assert body["lines"][-1]["level"] == "ERROR" and body["facets"]["ranks"] == [0, 1]
    status, body = get(base, f"api/logs?{RUN}&rank=1&since=0&until=4000000000&text=step%204")
    assert [line["line"] for line in body["lines"]] == ["step 4 loss 3.7602"]
    status, verdict = get(base, f"api/verdict?{RUN}")
    assert (verdict["decision"], verdict["category"]) == ("restart", "hang")
    assert [c["rank"] for c in verdict["culprits"]] == [1]
    assert get(base, "api/logs?team=research&run=nope")[0] == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [("rank=x", "rank"), ("rank=-5", "rank"), ("pod=a%20b", "pod"), ("node=..%2F", "node"),
     ("since=1e99", "since"), ("level=LOUD", "level"), ("limit=0", "limit"),
     ("text=" + "x" * 201, "text")],
)  # fmt: skip
def test_bad_parameters_are_a_400_naming_them(folders, reader, serve, query, field):
    base = serve(LocalSource(folders, reader=reader))
    status, body = get(base, f"api/logs?{RUN}&{query}")
    assert status == 400 and body["error"].startswith(f"{field}:")


def test_the_cluster_mode_binds_the_same_sql(folders, reader, serve):
    folder = folders / postmortem.TEAM / postmortem.FAILED
    handler = type("H", (ClickHouseStandIn,), {"reader": reader, "seen": [], "folder": folder})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = ClusterSource(ServerStore(f"http://127.0.0.1:{server.server_address[1]}"))
        base = serve(source)
        status, body = get(base, f"api/logs?{RUN}&text=%27%3B%20DROP%20TABLE%20x%20--")
        assert status == 200 and body["lines"] == []
        status, body = get(base, f"api/logs?{RUN}")
        assert body["failure"]["rank"] == 0 and body["lines"][-1]["level"] == "ERROR"
        assert any(
            p.get("text") == "'; DROP TABLE x --" for p in (s["params"] for s in handler.seen)
        )
        status, runs = get(base, "api/runs")
        assert any(r["run"] == postmortem.FAILED and r["errors"] >= 1 for r in runs["runs"])
        assert get(base, f"api/verdict?{RUN}")[0] == 404  # a cluster run: runner diagnose
    finally:
        server.shutdown()
        server.server_close()
    assert json.dumps(handler.seen)  # every query went through the stand-in
