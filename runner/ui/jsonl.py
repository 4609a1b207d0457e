"""The dashboard's sections from a run's metrics.jsonl (rank 0's rows), for a run without a
store. The same shapes as runner.ui.queries gives from SQL; pure functions but `read`.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_ROWS = 200_000  # the newest rows kept from a very long file


def read(path: Path) -> list[dict]:
    """The rows of a metrics file; a torn last line (a run writing) is skipped."""
    rows = []
    try:
        with path.open() as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int):
                    rows.append(row)
                    if len(rows) > 2 * MAX_ROWS:
                        rows = rows[-MAX_ROWS:]
    except OSError:
        return []
    return rows[-MAX_ROWS:]


def last_step(path: Path) -> int | None:
    """The step of the last whole row of a metrics file (reads only its end)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int):
            return step
    return None


def learner(path: Path) -> str:
    """The `learner` label of a metrics file's first row ("" for a run of no experiment)."""
    try:
        with path.open("rb") as f:
            head = f.read(8192).decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in head:
        try:
            value = json.loads(line).get("learner")
        except (ValueError, AttributeError):
            continue
        return value if isinstance(value, str) else ""
    return ""


def bucketed(rows: list[dict], points: int, key: str) -> tuple[list[int], list]:
    """Mean of `key` per bucket of steps, at most `points` buckets (as queries.SERIES)."""
    top = max((r["step"] for r in rows), default=0)
    bucket = max(1, top // points + 1)
    sums: dict[int, list[float]] = {}
    for r in rows:
        value = r.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            sums.setdefault(r["step"] // bucket * bucket, []).append(float(value))
    steps = sorted(sums)
    return steps, [sum(sums[s]) / len(sums[s]) for s in steps]


def throughput_key(rows: list[dict]) -> str:
    return "tokens_per_s" if any("tokens_per_s" in r for r in rows[:5]) else "samples_per_s"


def newest_attempt(rows: list[dict]) -> list[dict]:
    """One row per step, its newest attempt's (as queries.latest): a restart or a resume
    re-runs steps under the next `attempt`, appended after the older attempt's rows."""
    newest: dict[int, dict] = {}
    for r in rows:
        old = newest.get(r["step"])
        if old is None or int(r.get("attempt") or 0) >= int(old.get("attempt") or 0):
            newest[r["step"]] = r
    return [newest[s] for s in sorted(newest)]


def sections(rows: list[dict], summary: dict, points: int) -> dict:
    rows = newest_attempt(rows)
    steps = sorted({r["step"] for r in rows})
    series: dict[str, list] = {"step": [], "loss": [], "step_time": [], "throughput": []}
    parts = {k: dict(zip(*bucketed(rows, points, src), strict=True)) for k, src in
             (("loss", "loss"), ("step_time", "step_time"),
              ("throughput", throughput_key(rows)))}  # fmt: skip
    series["step"] = sorted(set().union(*[set(p) for p in parts.values()]))
    for k, p in parts.items():
        series[k] = [p.get(s) for s in series["step"]]
    last = rows[-1] if rows else {}
    members = [{"rank": 0, "pod": "", "node": "", "last_step": last.get("step"),
                "last_time": last.get("time")}]  # fmt: skip
    for rank in range(1, int(summary.get("world_size") or 1)):
        members.append({"rank": rank, "pod": "", "node": "", "last_step": None,
                        "last_time": None})  # fmt: skip
    return {
        "members": members,
        "series": series,
        "rank_step_time": {"steps": series["step"], "ranks": {"0": series["step_time"]}}
        if steps
        else {"steps": [], "ranks": {}},
        "aux": aux(rows),
        "aux_queues": aux_queues(rows, points),
        "stragglers": {"windows": [], "ranks": [], "cells": [], "named": []},
    }


def aux(rows: list[dict]) -> list[dict]:
    """The newest value of each `aux/<service>/<field>` key."""
    services: dict[str, dict] = {}
    for r in rows:
        for key, value in r.items():
            if key.startswith("aux/") and key.count("/") == 2:
                _, service, field = key.split("/")
                s = services.setdefault(service, {"service": service, "fields": {}, "step": 0})
                s["fields"][field] = value
                s["step"] = max(s["step"], r["step"])
    return [services[k] for k in sorted(services)]


def aux_queues(rows: list[dict], points: int) -> dict:
    """Each service's queue depth per step bucket (as queries.aux_queues)."""
    keys = sorted(
        {k for r in rows for k in r if k.startswith("aux/") and k.endswith("/queue_depth")}
    )
    parts = {k.split("/")[1]: dict(zip(*bucketed(rows, points, k), strict=True)) for k in keys}
    steps = sorted(set().union(*[set(p) for p in parts.values()]))
    return {"steps": steps, "services": {s: [p.get(t) for t in steps] for s, p in parts.items()}}
