"""NCCL Inspector lines (a recorded sample in the plugin's own format) become
platform.nccl_collectives rows, the same through the ClickHouse materialized view (the
cluster path: Fluent Bit -> nccl_inspector_raw) as through observability.inspector (the
local path), and the straggler analysis finds the late rank in them."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from observability import inspector, stragglers

from .conftest import TEAM

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-inspector"
FILES = sorted(SAMPLE.glob("*.log"))
SLOW_RANK, SLOW_NODE = 5, "gke-ultra-usc1-a3u-8g-q2mz"  # how the sample was recorded


def lines_now(path: Path, offset_us: int) -> list[str]:
    """The file's lines moved to the present (the tables keep 90 days)."""
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record["metadata"]["dump_timestamp_us"] += offset_us
        out.append(json.dumps(record, separators=(",", ":")))
    return out


def test_sample_parses():
    rows = list(inspector.rows(FILES, {"run": "sample", "team": TEAM}))
    assert len(FILES) == 8 and len(rows) == 416  # 420 lines, 4 of them p2p sends
    world = [r for r in rows if r["comm_name"] == "world"]
    assert {r["n_ranks"] for r in world} == {8} and {r["n_nodes"] for r in world} == {2}
    assert {(r["node"], r["pid"]) for r in world if r["rank"] == SLOW_RANK} == {(SLOW_NODE, 41205)}
    assert {r["collective"] for r in rows} == {"AllGather", "ReduceScatter", "AllReduce"}
    first = rows[0]
    assert first["ts"] == "2026-12-01 13:00:00.086645" and first["timing_source"] == "kernel_gpu"
    assert isinstance(first["exec_time_us"], float) and first["run"] == "sample"


def test_view_and_python_map_lines_alike(chdb_session):
    run, offset = f"insp-{uuid.uuid4().hex[:8]}", int(time.time() * 1e6) - 1796130000000000
    labels = {"platform.reve.dev/run": run, "platform.reve.dev/team": TEAM,
              "platform.reve.dev/cluster": "ultra-usc1"}  # fmt: skip
    records, ours = [], []
    for path in FILES:
        lines = lines_now(path, offset)
        pod = f"{run}-worker-{path.stem.rsplit('-', 2)[-2]}"
        kube = {"namespace_name": TEAM, "pod_name": pod, "labels": labels}
        records += [{"date": time.time(), "node": "", "file": str(path), "log": line,
                     "kubernetes": kube} for line in lines]  # fmt: skip
        identity = {"cluster": "ultra-usc1", "team": TEAM, "run": run, "namespace": TEAM}
        ours += [{**row, **identity, "pod": pod} for row in inspector.parse_lines(lines)]
    chdb_session.query(
        "INSERT INTO platform.nccl_inspector_raw SETTINGS input_format_skip_unknown_fields=1 "
        "FORMAT JSONEachRow\n" + "\n".join(json.dumps(r) for r in records)
    )
    text = chdb_session.query(
        f"SELECT * FROM platform.nccl_collectives WHERE run = '{run}' "
        "ORDER BY node, pid, comm_id, collective, seq",
        "JSONEachRow",
    ).bytes()
    view = [json.loads(line) for line in text.decode().splitlines()]
    key = lambda r: (r["node"], r["pid"], r["comm_id"], r["collective"], r["seq"])  # noqa: E731
    assert len(view) == len(ours) == 416
    for got, want in zip(view, sorted(ours, key=key), strict=True):
        for column, value in want.items():
            if isinstance(value, float):
                assert got[column] == pytest.approx(value), column
            else:
                assert got[column] == value, column
    ranks = stragglers.run_chdb(chdb_session, "straggler_ranks", TEAM, run, 0, 4e9)
    named = {(r["rank"], r["node"]) for r in ranks if r["straggler"]}
    assert named == {(SLOW_RANK, SLOW_NODE)}
    chdb_session.query(f"DELETE FROM platform.nccl_collectives WHERE run = '{run}'")


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"header": {}}', "neither coll_perf nor p2p_perf"),
        ('{"metadata": {"inspector_output_format_version": "v3.0"}, "coll_perf": {}}',
         "output format 'v3.0'"),
        ('{"metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1,'
         ' "hostname": "h", "pid": 2}, "header": {"id": "0x1", "rank": "two"}, "coll_perf": {}}',
         "header.rank is missing or not int"),
    ],
)  # fmt: skip
def test_bad_lines_name_file_and_line(line, message):
    with pytest.raises(inspector.InspectorError, match=f"^x.log:2: {message}"):
        list(inspector.parse_lines(["", line], "x.log"))


def test_nan_bandwidth_and_missing_comm_name():
    """Older plugins write no comm_name; the plugin prints NaN as the string "nan"."""
    record = json.loads(FILES[0].read_text().splitlines()[1])
    del record["header"]["comm_name"]
    record["coll_perf"]["coll_busbw_gbs"] = "nan"
    (row,) = inspector.parse_lines([json.dumps(record)])
    assert row["comm_name"] == "" and row["busbw_gbs"] != row["busbw_gbs"]


def test_cli_prints_rows_and_fails_in_one_line(tmp_path, capsys):
    assert inspector.main([str(FILES[0]), "--run", "r", "--pod", "p-0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 52 and json.loads(out[0])["pod"] == "p-0"
    bad = tmp_path / "bad.log"
    bad.write_text("{}\n")
    assert inspector.main([str(bad)]) == 2
    assert capsys.readouterr().err == f"error: {bad}:1: neither coll_perf nor p2p_perf\n"
