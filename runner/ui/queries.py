"""The dashboard's SQL (the same text in chDB and ClickHouse) and how its rows become the
JSON API's sections. Every value from a request is a bound parameter (`{run:String}`);
nothing a user typed is pasted into SQL. `query(sql, params) -> rows` is the one call a
source needs (runner.ui.reader for a local store, observability.store.ServerStore).
"""

from __future__ import annotations

from collections.abc import Callable

Query = Callable[[str, dict], list[dict]]
RUN = "team = {team:String} AND run = {run:String}"
LOSS, STEP_TIME = "train/loss", "train/step_time_s"


def latest(where: str) -> str:
    """The run's metric rows matching `where`, each step's newest attempt only: a restart or
    a resume re-runs steps from its checkpoint under the next `attempt`, so a step can have a
    row per attempt, and an average over all of them would count the step twice. One row
    per (learner, service, worker, rank, step, name): the value of its highest attempt."""
    return f"""(
    SELECT learner, service, worker, rank, step, name, argMax(value, (attempt, ts)) AS value
    FROM platform.run_metrics WHERE {RUN} AND {where}
    GROUP BY learner, service, worker, rank, step, name)"""


# Runs with metrics or log lines in the last `days` (a run that failed before its first
# step has only log lines; finished and failed runs stay listed after their pods are gone).
RUNS = """
SELECT team, run, max(last_step) AS last_step, max(ranks) AS ranks, max(attempt) AS attempt,
       max(last_time) AS last_time, max(learner) AS learner, sum(errors) AS errors
FROM (
    SELECT team, run, max(step) AS last_step, uniqExact(rank) AS ranks, max(attempt) AS attempt,
           toUnixTimestamp64Milli(max(ts)) / 1000 AS last_time,
           anyIf(learner, learner != '') AS learner, toUInt64(0) AS errors
    FROM platform.run_metrics WHERE ts > now() - INTERVAL {days:UInt32} DAY GROUP BY team, run
    UNION ALL
    SELECT team, run, toUInt64(0), toUInt64(0), max(attempt),
           toUnixTimestamp64Milli(max(ts)) / 1000, anyIf(learner, learner != ''),
           countIf(level IN ('ERROR', 'CRITICAL'))
    FROM platform.run_logs WHERE ts > now() - INTERVAL {days:UInt32} DAY GROUP BY team, run)
GROUP BY team, run ORDER BY last_time DESC LIMIT 500"""

MEMBERS = f"""
SELECT rank, argMaxIf(pod, ts, pod != '') AS pod, argMaxIf(node, ts, node != '') AS node,
       max(step) AS last_step, max(attempt) AS attempt,
       toUnixTimestamp64Milli(max(ts)) / 1000 AS last_time
FROM platform.run_metrics WHERE {RUN}
GROUP BY rank ORDER BY rank LIMIT {{ranks:UInt32}}"""

# Loss and step time per step (mean over ranks, each step's newest attempt), steps bucketed
# to at most `points`.
SERIES = f"""
WITH (SELECT max(step) FROM platform.run_metrics WHERE {RUN}) AS top,
     greatest(1, intDiv(top, {{points:UInt32}}) + 1) AS bucket
SELECT intDiv(step, bucket) * bucket AS step,
       avgIf(value, name = '{LOSS}') AS loss, avgIf(value, name = '{STEP_TIME}') AS step_time,
       avgIf(value, name LIKE 'train/%_per_s') AS throughput
FROM {latest(f"name IN ('{LOSS}', '{STEP_TIME}', 'train/tokens_per_s', 'train/samples_per_s')")}
GROUP BY step ORDER BY step"""

# Step time per rank per bucket (each step's newest attempt), for the `ranks` ranks slowest
# on average.
RANK_STEP_TIME = f"""
WITH (SELECT max(step) FROM platform.run_metrics WHERE {RUN}) AS top,
     greatest(1, intDiv(top, {{points:UInt32}}) + 1) AS bucket,
     steps AS {latest(f"name = '{STEP_TIME}'")},
     slowest AS (SELECT rank FROM steps
                 GROUP BY rank ORDER BY avg(value) DESC, rank LIMIT {{ranks:UInt32}})
SELECT rank, intDiv(step, bucket) * bucket AS step, avg(value) AS step_time
FROM steps
WHERE rank IN (SELECT rank FROM slowest)
GROUP BY rank, step ORDER BY rank, step"""

# The newest value of every aux-service field (`aux/<service>/<field>`): the newest attempt's.
AUX = f"""
SELECT splitByChar('/', name)[2] AS service, splitByChar('/', name)[3] AS field,
       argMax(value, (attempt, step, ts)) AS latest, max(step) AS last_step
FROM platform.run_metrics WHERE {RUN} AND startsWith(name, 'aux/')
GROUP BY service, field ORDER BY service, field LIMIT 2000"""

# Each service's queue depth per step bucket (`aux/<service>/queue_depth`, each step's newest
# attempt).
AUX_QUEUES = f"""
WITH (SELECT max(step) FROM platform.run_metrics WHERE {RUN}) AS top,
     greatest(1, intDiv(top, {{points:UInt32}}) + 1) AS bucket
SELECT splitByChar('/', name)[2] AS service, intDiv(step, bucket) * bucket AS step,
       avg(value) AS depth
FROM {latest("startsWith(name, 'aux/') AND endsWith(name, '/queue_depth')")}
GROUP BY service, step ORDER BY service, step LIMIT 100000"""

COLLECTIVE_SPAN = f"""
SELECT count() AS records, toUnixTimestamp64Micro(min(ts)) AS first_us,
       toUnixTimestamp64Micro(max(ts)) AS last_us
FROM platform.nccl_collectives WHERE {RUN}"""


def runs(query: Query, days: int = 30) -> list[dict]:
    return query(RUNS, {"days": days})


def members(query: Query, team: str, run: str, ranks: int) -> list[dict]:
    return query(MEMBERS, {"team": team, "run": run, "ranks": ranks})


def series(query: Query, team: str, run: str, points: int) -> dict:
    rows = query(SERIES, {"team": team, "run": run, "points": points})
    return columns(rows, ("step", "loss", "step_time", "throughput"))


def rank_step_time(query: Query, team: str, run: str, points: int, ranks: int) -> dict:
    """{"steps": [...], "ranks": {rank: [step time per step or None]}}."""
    rows = query(RANK_STEP_TIME, {"team": team, "run": run, "points": points, "ranks": ranks})
    return by_step(rows, "rank", "step_time")


def aux(query: Query, team: str, run: str) -> list[dict]:
    return aux_services(query(AUX, {"team": team, "run": run}))


def aux_queues(query: Query, team: str, run: str, points: int) -> dict:
    """{"steps": [...], "services": {service: [queue depth per step or None]}}."""
    rows = query(AUX_QUEUES, {"team": team, "run": run, "points": points})
    return by_step(rows, "service", "depth")


def by_step(rows: list[dict], key: str, value: str) -> dict:
    """Long rows (key, step, value) as {"steps": [...], "<key>s": {key: [value per step]}}."""
    steps = sorted({r["step"] for r in rows})
    where = {s: i for i, s in enumerate(steps)}
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(str(r[key]), [None] * len(steps))[where[r["step"]]] = r[value]
    return {"steps": steps, f"{key}s": out}


def aux_services(rows: list[dict]) -> list[dict]:
    """[{service, fields: {field: value}, step}] from (service, field, latest, last_step)."""
    services: dict[str, dict] = {}
    for r in rows:
        s = services.setdefault(r["service"], {"service": r["service"], "fields": {}, "step": 0})
        s["fields"][r["field"]] = r["latest"]
        s["step"] = max(s["step"], r["last_step"])
    return list(services.values())


def columns(rows: list[dict], names: tuple[str, ...]) -> dict:
    """Rows as columns, NaN (a bucket without the metric) as None."""
    return {n: [none_if_nan(r.get(n)) for r in rows] for n in names}


def none_if_nan(value):
    return None if isinstance(value, float) and value != value else value


def stragglers(query: Query, team: str, run: str, window_s: int, ranks: int,
               windows: int) -> dict:  # fmt: skip
    """The heatmap: straggler_ranks (observability/sql) over the run's last `windows`
    windows of collective records (windows start on multiples of `window_s`, as the SQL's)."""
    from observability import stragglers as analysis

    span = query(COLLECTIVE_SPAN, {"team": team, "run": run})
    if not span or not span[0]["records"]:
        return {"windows": [], "ranks": [], "cells": [], "named": []}
    end_s = int(span[0]["last_us"]) / 1e6 + 1e-6
    last_window = end_s // window_s * window_s  # the newest window, perhaps not yet whole
    start_s = max(int(span[0]["first_us"]) / 1e6, last_window - (windows - 1) * window_s)
    values = analysis.params(team, run, start_s, end_s, analysis.Thresholds(window_s=window_s))
    rows = query(analysis.sql("straggler_ranks"), analysis.used("straggler_ranks", values))
    return heatmap(rows, ranks)


def heatmap(rows: list[dict], limit: int) -> dict:
    """Windows x ranks of arrival delay; ranks shown: every straggler, then the latest
    arriving, at most `limit`; per window the named stragglers (rank, node, delay)."""
    windows = sorted({r["window"] for r in rows})
    score: dict[int, tuple] = {}
    for r in rows:
        old = score.get(r["rank"], (0, 0.0))
        score[r["rank"]] = (old[0] + int(r["straggler"]), max(old[1], r["delay_us"]))
    shown = sorted(sorted(score, key=lambda k: (-score[k][0], -score[k][1], k))[:limit])
    where = {w: i for i, w in enumerate(windows)}
    row_of = {k: i for i, k in enumerate(shown)}
    cells = [[None] * len(windows) for _ in shown]
    named: list[list[dict]] = [[] for _ in windows]
    for r in rows:
        w = where[r["window"]]
        if r["rank"] in row_of:
            cells[row_of[r["rank"]]][w] = round(r["delay_us"], 1)
        if r["straggler"]:
            named[w].append({"rank": r["rank"], "node": r["node"],
                             "delay_us": round(r["delay_us"], 1),
                             "last_fraction": round(r["last_fraction"], 3)})  # fmt: skip
    return {"windows": windows, "ranks": shown, "cells": cells, "named": named}
