"""A run that restarted re-runs steps under its next attempt: the dashboard's queries take
each step's newest attempt, so no step counts twice (runner.ui.queries.latest)."""

from __future__ import annotations

import time

from observability import store
from runner.ui import queries

TEAM, RUN = "research", "restarted"


def rows(attempt: int, steps: range, step_time: float, t0: float) -> list[dict]:
    out = []
    for step in steps:
        for rank in (0, 1):
            tags = {
                "cluster": "local",
                "team": TEAM,
                "run": RUN,
                "attempt": attempt,
                "pod": f"w-{rank}-{attempt}",
                "node": f"n-{rank}",
                "service": "train",
            }
            values = {"train/step_time_s": step_time + rank, "train/loss": 10.0 - step}
            values["aux/encoder/queue_depth"] = float(attempt)
            out += store.metric_rows(tags, rank, step, t0 + attempt * 100 + step, values)
    return out


def test_each_step_counts_once_the_newest_attempt(tmp_path, reader):
    t0 = time.time() - 600
    # attempt 0 ran steps 1-6 and failed; attempt 1 resumed from step 3's checkpoint
    reader.insert(tmp_path, store.RUN_METRICS, rows(0, range(1, 7), 1.0, t0))
    reader.insert(tmp_path, store.RUN_METRICS, rows(1, range(4, 9), 3.0, t0))

    def query(sql: str, params: dict) -> list[dict]:
        return reader.query(tmp_path, sql, params)

    series = queries.series(query, TEAM, RUN, points=100)
    assert series["step"] == list(range(1, 9))
    # the mean over ranks 0 and 1 (+1 s): attempt 0's for steps 1-3, attempt 1's after
    assert series["step_time"] == [1.5] * 3 + [3.5] * 5
    per_rank = queries.rank_step_time(query, TEAM, RUN, points=100, ranks=2)
    assert per_rank["ranks"]["1"] == [2.0] * 3 + [4.0] * 5
    depth = queries.aux_queues(query, TEAM, RUN, points=100)
    assert depth["services"]["encoder"] == [0.0] * 3 + [1.0] * 5
    (aux,) = queries.aux(query, TEAM, RUN)
    assert aux["fields"]["queue_depth"] == 1.0 and aux["step"] == 8
    members = queries.members(query, TEAM, RUN, ranks=10)
    assert [(m["rank"], m["pod"], m["attempt"]) for m in members] == [
        (0, "w-0-1", 1), (1, "w-1-1", 1)]  # fmt: skip


def test_metrics_jsonl_counts_each_step_once_the_newest_attempt():
    from runner.ui import jsonl

    rows = [{"step": s, "attempt": 0, "step_time": 1.0, "time": s} for s in range(1, 7)]
    rows += [{"step": s, "attempt": 1, "step_time": 3.0, "time": 10 + s} for s in range(4, 9)]
    got = jsonl.sections(rows, {"world_size": 1}, points=100)["series"]
    assert got["step"] == list(range(1, 9))
    assert got["step_time"] == [1.0] * 3 + [3.0] * 5
