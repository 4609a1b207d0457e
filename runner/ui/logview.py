"""The dashboard's log view and post-mortem answers: `/api/logs` and `/api/verdict`.

    opts = log_options(query)                     # bounded, or BadRequest naming the field
    body = local_logs(reader, folder, team, run, opts)     # a local run (its store, a snapshot)
    body = cluster_logs(store, team, run, opts)            # the cluster's ClickHouse

A run's lines come from `platform.run_logs` (observability.log_search: the same SQL on a
run's store and on ClickHouse), filtered by rank, pod, node, learner, level, text and time.
Without a time window the view opens at the failure: the first failing rank's record in the
newest crash bundle (local), else the run's first ERROR line, with its rank selected and
the minute before it shown; a run that did not fail shows its newest lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from observability import log_search

POD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
BEFORE_S, AFTER_S = 60.0, 10.0


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class LogOptions:
    rank: int | None = None
    pod: str = ""
    node: str = ""
    learner: str = ""
    since: float | None = None
    until: float | None = None
    levels: tuple[str, ...] = ()
    text: str = ""
    limit: int = 500


def one(query: dict, key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def number(query: dict, key: str, low: float, high: float) -> float | None:
    text = one(query, key)
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{key}: a number, not {text[:20]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{key}: from {low:g} to {high:g}, not {text[:20]!r}")
    return value


def log_options(query: dict) -> LogOptions:
    """The log view's parameters, each bounded (BadRequest names the first bad one)."""
    rank = number(query, "rank", -1, 1_000_000)
    names = {}
    for key in ("pod", "node", "learner"):
        value = one(query, key) or ""
        if value and not POD.match(value):
            raise BadRequest(f"{key}: letters, digits, '.', '_', '-', not {value[:20]!r}")
        names[key] = value
    levels = tuple(x for x in (one(query, "level") or "").split(",") if x)
    if any(x not in LEVELS for x in levels):
        raise BadRequest(f"level: a comma-separated list of {', '.join(LEVELS)}")
    text = one(query, "text") or ""
    if len(text) > 200:
        raise BadRequest("text: at most 200 characters")
    limit = number(query, "limit", 1, log_search.MAX_LIMIT)
    return LogOptions(
        rank=None if rank is None else int(rank),
        **names,
        since=number(query, "since", 0, 4e9),
        until=number(query, "until", 0, 4e9),
        levels=levels,
        text=text,
        limit=int(limit or 500),
    )


def bundle_failure(folder: Path) -> dict | None:
    """The first failing rank of the newest crash bundle: {ts, rank, pod, node, error}."""
    bundles = sorted(p for p in folder.glob("crash-*") if p.is_dir())
    if not bundles:
        return None
    try:
        info = json.loads((bundles[-1] / "ranks.json").read_text())
    except (OSError, ValueError):
        return {"bundle": bundles[-1].name}
    failed = [(r, f) for r, f in (info.get("failed") or {}).items() if isinstance(f, dict)]
    timed = sorted((f["time"], int(r), f) for r, f in failed if isinstance(f.get("time"), float))
    if not timed:
        return {"bundle": bundles[-1].name}
    ts, rank, f = timed[0]
    return {
        "bundle": bundles[-1].name,
        "ts": ts,
        "rank": rank,
        "pod": f.get("pod", ""),
        "node": f.get("node", ""),
        "error": str(f.get("error", ""))[:300],
    }


def answer(query, team: str, run: str, opts: LogOptions, failure: dict | None) -> dict:
    """The lines, the facets and the failure the view opened at."""
    if failure is None or "ts" not in failure:
        first = log_search.first_error(query, team, run)
        if first is not None:
            failure = {
                **(failure or {}),
                **first,
                "rank": first["rank"] if first["rank"] >= 0 else None,
            }
    since, until, rank = opts.since, opts.until, opts.rank
    opened = since is None and until is None
    if opened and failure and failure.get("ts"):
        since, until = failure["ts"] - BEFORE_S, failure["ts"] + AFTER_S
        rank = failure.get("rank") if rank is None else rank
    filters = {
        "rank": rank,
        "pod": opts.pod,
        "node": opts.node,
        "learner": opts.learner,
        "since": since,
        "until": until,
        "text": opts.text,
        "levels": opts.levels,
    }
    lines = log_search.lines(query, team, run, limit=opts.limit, newest=True, **filters)
    return {
        "lines": lines,
        "facets": log_search.facets(query, team, run),
        "failure": failure,
        "window": {
            "since": since,
            "until": until,
            "rank": rank,
            "at_failure": bool(opened and failure and failure.get("ts")),
        },
    }


def local_logs(reader, folder: Path, team: str, run: str, opts: LogOptions) -> dict:
    failure = bundle_failure(folder)
    if not (folder / "chdb").is_dir():
        return {
            "lines": [],
            "facets": {},
            "failure": failure,
            "window": {},
            "note": "this run has no store (a run before log ingestion)",
        }
    query = lambda sql, params: reader.query(folder, sql, params)  # noqa: E731
    return answer(query, team, run, opts, failure)


def cluster_logs(store, team: str, run: str, opts: LogOptions) -> dict:
    return answer(store.query, team, run, opts, None)


def local_verdict(folder: Path) -> dict:
    """The failure analysis of a local run's folder (runner.diagnose, rules only)."""
    from runner.diagnose.analyze import analyze

    return analyze(folder).to_json()
