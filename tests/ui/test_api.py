"""The JSON API behind `runner ui`: local runs from a chDB store or metrics.jsonl, a cluster
from ClickHouse (an HTTP stand-in over chDB) and the fake Kubernetes API; bounded
parameters; the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runner.kube.fake import FakeKube
from runner.ui import jsonl, queries
from runner.ui.sources import ClusterSource, LocalSource, Options, merge_pods
from tests.ui import fill

ROOT = Path(__file__).resolve().parents[2]


def get(base: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def local(outputs, reader, serve):
    return serve(LocalSource(outputs, reader=reader))


def test_runs_list_names_the_local_run(local):
    status, body = get(local, "/api/runs")
    assert status == 200
    [run] = body["runs"]
    assert (run["team"], run["run"], run["state"], run["store"]) == (
        fill.TEAM, fill.RUN, "finished", True)  # fmt: skip


def test_run_from_the_store_has_every_section(local):
    status, body = get(local, f"/api/run?team={fill.TEAM}&run={fill.RUN}&window_s=30")
    assert status == 200 and body["source"] == "chdb"
    assert [m["rank"] for m in body["members"]] == list(range(fill.RANKS))
    assert {m["node"] for m in body["members"]} == {f"node-{n}" for n in range(4)}
    assert len(body["series"]["step"]) == fill.STEPS and None not in body["series"]["loss"]
    per_rank = body["rank_step_time"]["ranks"]
    assert len(per_rank) == fill.RANKS
    assert max(per_rank, key=lambda r: per_rank[r][0]) == str(fill.SLOW_RANK)
    [encoder] = body["aux"]
    assert encoder["service"] == "encoder" and encoder["fields"]["workers"] == 2
    depth = body["aux_queues"]["services"]["encoder"]
    assert len(depth) == fill.STEPS and depth[:4] == [1, 2, 3, 0]
    heat = body["stragglers"]
    assert len(heat["windows"]) >= 3 and len(heat["cells"]) == fill.RANKS
    assert all([n["rank"] for n in named] == [fill.SLOW_RANK] for named in heat["named"])
    assert heat["named"][0][0]["node"] == "node-1"


@pytest.mark.parametrize(
    "query, field",
    [("team=research&run=straggly&points=5", "points"),
     ("team=research&run=straggly&ranks=100000", "ranks"),
     ("team=research&run=straggly&window_s=abc", "window_s"),
     ("team=research&run=x'%20OR%201", "run"),
     ("team=&run=straggly", "team")],
)  # fmt: skip
def test_parameters_are_bounded(local, query, field):
    status, body = get(local, "/api/run?" + query)
    assert status == 400 and body["error"].startswith(field)


def test_unknown_things_are_404(local):
    assert get(local, "/api/run?team=research&run=nope")[0] == 404
    assert get(local, "/api/nothing")[0] == 404
    assert get(local, "/static/../server.py")[0] == 404
    assert get(local, "/static/%2e%2e/server.py")[0] == 404
    with urllib.request.urlopen(local + "static/vendor/uplot/uPlot.iife.min.js") as r:
        assert r.headers["Content-Type"].startswith("text/javascript")


def test_a_run_without_a_store_is_read_from_metrics_jsonl(tmp_path, serve):
    folder = tmp_path / "media" / "tiny-dit"
    folder.mkdir(parents=True)
    rows = [{"step": s, "loss": 1.0 / s, "step_time": 0.05, "samples_per_s": 100.0,
             "time": 1.7e9 + s, "aux/encoder/queue_depth": 2, "aux/encoder/errors": 0}
            for s in range(1, 11)]  # fmt: skip
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 11, "lo'  # a torn line
    (folder / "metrics.jsonl").write_text(text)
    base = serve(LocalSource(tmp_path))
    status, body = get(base, "/api/run?team=media&run=tiny-dit")
    assert status == 200 and body["source"] == "jsonl"
    assert body["series"]["step"] == list(range(1, 11)) and body["series"]["throughput"][0] == 100
    assert body["aux"] == [{"service": "encoder", "fields": {"queue_depth": 2, "errors": 0},
                            "step": 10}]  # fmt: skip
    assert body["aux_queues"] == {"steps": list(range(1, 11)), "services": {"encoder": [2] * 10}}


def test_jsonl_buckets_steps_like_the_sql():
    rows = [{"step": s, "loss": float(s)} for s in range(1, 101)]
    steps, values = jsonl.bucketed(rows, 10, "loss")
    assert len(steps) <= 10 and steps[:2] == [0, 11] and values[0] == 5.5  # 1..10 -> bucket 0


def test_heatmap_shows_stragglers_first_within_the_limit():
    rows = [{"window": w, "rank": r, "node": f"n{r}", "delay_us": 10.0 * r, "last_fraction": 0.1,
             "straggler": int(r == 7)} for w in ("a", "b") for r in range(10)]  # fmt: skip
    heat = queries.heatmap(rows, 3)
    assert heat["ranks"] == [7, 8, 9] and heat["named"][1][0]["rank"] == 7


def test_merge_pods_keeps_pods_without_ranks():
    ranks = [{"rank": 0, "pod": "w-0", "node": "", "last_step": 3, "last_time": 1.0}]
    pods = [{"pod": "w-0", "node": "n1", "phase": "Running", "role": "worker"},
            {"pod": "head", "node": "n0", "phase": "Running", "role": "head"}]  # fmt: skip
    merged = merge_pods(ranks, pods)
    assert merged[0]["node"] == "n1" and merged[0]["phase"] == "Running"
    assert merged[1]["rank"] is None and merged[1]["role"] == "head"


def test_cluster_mode_joins_clickhouse_ranks_with_pods(clickhouse, serve):
    from observability.store import ServerStore

    url, _ = clickhouse
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "w-1", "namespace": "research",
                        "labels": {"platform.reve.dev/run": fill.RUN,
                                   "app.kubernetes.io/managed-by": "runner",
                                   "platform.reve.dev/role": "worker"}},
           "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}  # fmt: skip
    source = ClusterSource(ServerStore(url), FakeKube([pod]), "research")
    body = source.run(fill.TEAM, fill.RUN, Options(points=50, ranks=8))
    by_rank = {m["rank"]: m for m in body["members"]}
    assert by_rank[fill.SLOW_RANK]["phase"] == "Running" and by_rank[0]["phase"] == ""
    assert body["stragglers"]["named"][0][0]["rank"] == fill.SLOW_RANK
    assert len(body["rank_step_time"]["ranks"]) == 8
    assert any(r["run"] == fill.RUN and r["state"] for r in source.runs())


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [(["--run", "nodash"], "--run: TEAM/NAME"),
     (["--outputs", "/nonexistent-folder"], "--outputs: /nonexistent-folder is not a folder"),
     (["--clickhouse", "http://u:pw@ch:8123"], "--clickhouse: credentials go in the environment")],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = run_cli("ui", *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_ui_help_imports_no_store_or_heavy_package():
    code = ("import sys\nfrom runner.cli import main\ntry:\n main(['ui', '--help'])\n"
            "except SystemExit:\n pass\nprint(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'chdb', 'torch', 'ray', 'pulumi', 'numpy', 'pandas'}))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip().endswith("[]"), done.stdout + done.stderr


def test_runner_ui_serves_on_loopback_and_prints_its_url(outputs):
    import re
    import signal

    args = ["ui", "--outputs", str(outputs), "--run", "research/straggly"]
    proc = subprocess.Popen([sys.executable, "-m", "runner", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)#research/straggly", line)
        assert found, line + proc.stderr.read() if proc.poll() is not None else line
        status, body = get(found.group(1), "api/runs")
        assert status == 200 and [r["run"] for r in body["runs"]] == ["straggly"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_the_heatmap_covers_the_last_windows_asked_for(local):
    everything = get(local, f"/api/run?team={fill.TEAM}&run={fill.RUN}")[1]["stragglers"]
    status, body = get(local, f"/api/run?team={fill.TEAM}&run={fill.RUN}&windows=2")
    assert status == 200 and body["stragglers"]["windows"] == everything["windows"][-2:]


def test_a_loopback_server_refuses_other_host_names(local):
    request = urllib.request.Request(local + "api/runs", headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403


def test_a_run_whose_store_is_still_empty_has_empty_sections(tmp_path, reader, serve):
    folder = tmp_path / "research" / "starting"
    reader.insert(folder, "platform.run_metrics", [])  # creates the store and its tables
    status, body = get(
        serve(LocalSource(tmp_path, reader=reader)), "/api/run?team=research&run=starting"
    )
    assert status == 200 and body["source"] == "chdb" and body["members"] == []
    assert body["series"]["step"] == [] and body["stragglers"]["windows"] == []


def test_cluster_mode_without_kubernetes_credentials_still_serves(clickhouse, monkeypatch, capsys):
    from runner import kube
    from runner.commands.ui import cluster_source

    def refuse(cluster=None):
        raise kube.KubeError("no Kubernetes credentials")

    monkeypatch.setattr(kube, "connect", refuse)
    source = cluster_source(clickhouse[0], None, None, "CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD")
    assert source.kube is None and "no pods shown" in capsys.readouterr().err
    assert [r["run"] for r in source.runs()] == [fill.RUN]
