"""The straggler sweep: persistent NCCL stragglers in ClickHouse become node checks.

NCCL Inspector records reach `platform.nccl_collectives` through Fluent Bit. Every
`timings.straggler_period_s` the `StragglerWorkflow` (warden.loops) runs `sweep_stragglers`:

1. the runs with records in the last `lookback_s` (`ACTIVE_RUNS`, one small query);
2. per run, `observability/sql/straggler_findings.sql` (the one query Grafana and the tests
   run too) over that window with the configured thresholds;
3. each persistent straggler's node, unless it is gone, cordoned, or a node check cleared
   it within `rules.cleared_quiet_s` (`warden.handover`, the rule the gateway applies too),
   is handed to `warden.starters.report_stragglers`: an ambiguous node workflow (node check
   first). A node whose workflow already runs is left to it (the workflow ID is the lock).

ClickHouse sits behind `FindingSource` (a `query(sql, params)` method): in a cluster
`observability.store.ServerStore` as the read-only `reader` user (`server_source`), in tests
`observability.store.LocalStore` (chDB). A store that does not answer is logged and counted;
the next round asks again. A run whose query fails (or that the round has no time left for)
is logged and counted, and the other runs go on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from temporalio import activity

from observability import stragglers as analysis
from observability.store import ServerStore, StoreError
from warden import handover, starters
from warden.faults import log
from warden.model import StragglerInput, StragglerResult

FINDINGS = "straggler_findings"
ACTIVE_RUNS = """SELECT team, run, count() AS records
FROM platform.nccl_collectives
WHERE ts >= {start:DateTime64(6)} AND ts < {end:DateTime64(6)}
GROUP BY team, run
ORDER BY records DESC, team, run
LIMIT {limit:UInt32}"""
"""The runs with NCCL records in the window (the busiest first, at most `limit`)."""
ROUND_SHARE = 0.8
"""share of the activity's attempt timeout a round may spend on queries."""


class FindingSource(Protocol):
    """What the sweep needs of a store: a parameterized query's rows."""

    def query(self, sql: str, params: dict | None = None) -> list[dict]: ...


@dataclass
class StragglerSweep:
    """The sweep's store and settings (from `WardenConfig.stragglers`)."""

    source: FindingSource
    lookback_s: float = 900.0
    thresholds: analysis.Thresholds = field(default_factory=lambda: analysis.DEFAULT)
    max_runs: int = 200


def server_source(url: str, user: str, password_env: str, timeout_s: float) -> ServerStore:
    """ClickHouse over HTTP as `user`, the password from the environment variable
    `password_env` (a Secret by reference), never from the URL."""
    store = ServerStore(url, user_env="", password_env=password_env, timeout_s=timeout_s)
    store.headers["X-ClickHouse-User"] = user
    return store


def active_runs(sweep: StragglerSweep, start: datetime, end: datetime) -> list[dict]:
    """{team, run, records} of the runs with NCCL records in [start, end)."""
    window = {"start": analysis.timestamp(start), "end": analysis.timestamp(end)}
    return sweep.source.query(ACTIVE_RUNS, {**window, "limit": sweep.max_runs})


def run_findings(
    sweep: StragglerSweep, team: str, run: str, start: datetime, end: datetime
) -> list[dict]:
    """The persistent straggler rows of one run (with `team` and `run` added)."""
    values = analysis.params(team, run, start, end, sweep.thresholds)
    rows = sweep.source.query(analysis.sql(FINDINGS), analysis.used(FINDINGS, values))
    return [{**row, "team": team, "run": run} for row in rows
            if row.get("persistent") and row.get("node")]  # fmt: skip


def find(sweep: StragglerSweep, now: datetime) -> list[dict]:
    """Persistent straggler rows of the runs active in the last `lookback_s` before `now`.
    Raises StoreError when the store does not answer."""
    start = now - timedelta(seconds=sweep.lookback_s)
    found = []
    for r in active_runs(sweep, start, now):
        found += run_findings(sweep, r["team"], r["run"], start, now)
    return found


class StragglerActivities:
    """Mixed into `WardenActivities` (uses its `kube`, `settings` and `stragglers`)."""

    stragglers: StragglerSweep | None = None

    async def _findings(self, now: datetime) -> tuple[list[dict], list[str]]:
        """Findings of the active runs, and what kept some runs out (a failed query, the
        round's time used up: those runs wait for the next round). The store's calls block:
        they run in threads, heartbeating between them. Raises StoreError when the list of
        runs cannot be read."""
        sweep, began = self.stragglers, time.monotonic()
        budget = (activity.info().start_to_close_timeout or timedelta(0)).total_seconds()
        start = now - timedelta(seconds=sweep.lookback_s)
        runs = await asyncio.to_thread(active_runs, sweep, start, now)
        findings, errors = [], []
        for index, r in enumerate(runs):
            activity.heartbeat(r["team"], r["run"])
            if budget and time.monotonic() - began > budget * ROUND_SHARE:
                errors.append(f"time up: {len(runs) - index} runs left for the next round")
                break
            try:
                findings += await asyncio.to_thread(
                    run_findings, sweep, r["team"], r["run"], start, now
                )
            except StoreError as err:
                errors.append(f"run {r['team']}/{r['run']}: {err}")
        return findings, errors

    @activity.defn
    async def sweep_stragglers(self, inp: StragglerInput) -> StragglerResult:
        """One round: query the store, start an ambiguous node workflow per eligible node."""
        if self.stragglers is None:
            return StragglerResult(rounds=1, unreachable=1, error="no straggler store configured")
        now = datetime.now(UTC)
        try:
            findings, errors = await self._findings(now)
        except StoreError as err:
            log.warning("straggler sweep: ClickHouse did not answer: %s", err)
            _count("warden_straggler_sweep_unreachable", "rounds the store did not answer", 1)
            return StragglerResult(rounds=1, unreachable=1, error=str(err))
        for error in errors:
            log.warning("straggler sweep: %s", error)
        _count("warden_straggler_sweep_run_errors", "runs a round could not analyse", len(errors))
        quiet_s = self.settings.rules.cleared_quiet_s
        kept, skipped = await asyncio.to_thread(handover.screen, self.kube, findings, now, quiet_s)
        started = await starters.report_stragglers(
            activity.client(), kept, inp.task_queue, inp.timings
        )
        fresh = sum(started.values())
        return StragglerResult(rounds=1, findings=len(findings), started=fresh,
                               already_running=len(started) - fresh, skipped=len(skipped),
                               run_errors=len(errors), error="; ".join(errors)[:500])  # fmt: skip


def _count(name: str, description: str, value: int) -> None:
    """Add to a counter on the worker's metrics port."""
    if value:
        activity.metric_meter().create_counter(name, description).add(value)
