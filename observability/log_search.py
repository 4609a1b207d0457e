"""Reading a run's log lines back (`platform.run_logs`): the same SQL on a run's chDB store
and on the cluster's ClickHouse. Every filter is a bound parameter; nothing is pasted.

    from observability import log_search
    rows = log_search.lines(store.query, "research", "tiny-lm", rank=3,
                            since=t - 30, until=t + 5, limit=500)
    rows = log_search.around(store.query, "research", "tiny-lm", rank=3, ts=t)
    first = log_search.first_error(store.query, "research", "tiny-lm")   # {ts, rank, ...}
    facets = log_search.facets(store.query, "research", "tiny-lm")   # ranks, pods, nodes

`query(sql, params) -> rows` is observability.store.LocalStore.query, ServerStore.query or
runner.ui.reader's. Times are epoch seconds in and out (`ts` as a float).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Query = Callable[[str, dict], list[dict]]
ANY_RANK = -2  # the `rank` parameter that matches every rank (-1 is "no rank": the driver)
MAX_LIMIT = 5000
ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")

FILTER = """team = {team:String} AND run = {run:String}
  AND ({rank:Int32} = -2 OR rank = {rank:Int32})
  AND ({pod:String} = '' OR pod = {pod:String})
  AND ({node:String} = '' OR node = {node:String})
  AND ({learner:String} = '' OR learner = {learner:String})
  AND ts >= {since:DateTime64(6)} AND ts <= {until:DateTime64(6)}
  AND ({text:String} = '' OR positionCaseInsensitive(line, {text:String}) > 0)
  AND (length({levels:Array(String)}) = 0 OR level IN {levels:Array(String)})"""

LINES = """
SELECT toUnixTimestamp64Micro(ts) / 1e6 AS ts, rank, pod, node, learner, attempt, worker,
       service, source, logger, level, line
FROM platform.run_logs WHERE {filter}
ORDER BY ts {order}, rank {order} LIMIT {{limit:UInt32}}"""

FIRST_ERROR = """
SELECT toUnixTimestamp64Micro(ts) / 1e6 AS ts, rank, pod, node, level, line
FROM platform.run_logs
WHERE team = {team:String} AND run = {run:String} AND level IN {levels:Array(String)}
ORDER BY ts LIMIT 1"""

FACETS = """
SELECT groupUniqArray(rank) AS ranks, groupUniqArray(pod) AS pods,
       groupUniqArray(node) AS nodes, groupUniqArray(learner) AS learners, count() AS lines,
       toUnixTimestamp64Micro(min(ts)) / 1e6 AS first, toUnixTimestamp64Micro(max(ts)) / 1e6 AS last
FROM platform.run_logs WHERE team = {team:String} AND run = {run:String}"""


def ts_param(ts: float | None, default: float) -> str:
    """A DateTime64(6) parameter (UTC text) from epoch seconds."""
    value = default if ts is None else min(max(float(ts), 0.0), 4.0e9)
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def array_param(values) -> str:
    """An Array(String) parameter's text: `['a','b']`, quotes and backslashes escaped."""
    quoted = ("'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values)
    return "[" + ",".join(quoted) + "]"


def params(
    team: str,
    run: str,
    rank: int | None = None,
    pod: str = "",
    node: str = "",
    learner: str = "",
    since: float | None = None,
    until: float | None = None,
    text: str = "",
    levels: tuple[str, ...] = (),
) -> dict:
    """The bound parameters of FILTER (None and "" match everything)."""
    return {
        "team": team,
        "run": run,
        "rank": ANY_RANK if rank is None else int(rank),
        "pod": pod or "",
        "node": node or "",
        "learner": learner or "",
        "since": ts_param(since, 0.0),
        "until": ts_param(until, 4.0e9),
        "text": text or "",
        "levels": array_param(levels),
    }


def lines(
    query: Query, team: str, run: str, limit: int = 500, newest: bool = False, **filters
) -> list[dict]:
    """The run's lines matching `filters` (see `params`), oldest first; with `newest`, the
    newest `limit` of them (still returned oldest first)."""
    bound = {**params(team, run, **filters), "limit": max(1, min(int(limit), MAX_LIMIT))}
    rows = query(LINES.format(filter=FILTER, order="DESC" if newest else "ASC"), bound)
    return list(reversed(rows)) if newest else rows


def around(
    query: Query,
    team: str,
    run: str,
    rank: int | None,
    ts: float,
    before_s: float = 60.0,
    after_s: float = 10.0,
    limit: int = 500,
) -> list[dict]:
    """One rank's lines (every rank's with `rank` None) from `before_s` before `ts` to
    `after_s` after it: the newest `limit` of them."""
    return lines(
        query,
        team,
        run,
        limit=limit,
        newest=True,
        rank=rank,
        since=ts - before_s,
        until=ts + after_s,
    )


def first_error(query: Query, team: str, run: str) -> dict | None:
    """The run's first ERROR (or worse) line, or None."""
    rows = query(FIRST_ERROR, {"team": team, "run": run, "levels": array_param(ERROR_LEVELS)})
    return rows[0] if rows else None


def facets(query: Query, team: str, run: str) -> dict:
    """The run's ranks, pods, nodes and learners with lines, the count and time span."""
    rows = query(FACETS, {"team": team, "run": run})
    row = rows[0] if rows else {}
    return {
        "ranks": sorted(r for r in row.get("ranks", []) if r >= 0),
        "pods": sorted(p for p in row.get("pods", []) if p),
        "nodes": sorted(n for n in row.get("nodes", []) if n),
        "learners": sorted(x for x in row.get("learners", []) if x),
        "lines": int(row.get("lines") or 0),
        "first": row.get("first") if row.get("lines") else None,
        "last": row.get("last") if row.get("lines") else None,
    }
