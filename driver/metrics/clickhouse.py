"""Per-step metrics into ClickHouse's `platform.run_metrics` (kustomize/bases/observability).

The driver's progress thread hands every drained metrics row (every rank's, tagged with its
`rank` and `attempt`) to `RunMetricsWriter.add`; each becomes one long-format row per numeric
metric (`name` as driver.metrics.names maps it, `value`) with the run's label set
(driver.metrics.writers.row_labels: cluster, team, run, learner, attempt, the rank's pod and
node, service), built by observability.store.metric_rows as the run's chDB store's rows
are. The writer signs in as the user and password in the environment (`USER_ENV`,
`PASSWORD_ENV`: in a cluster, `runs` and the `clickhouse-runs` Secret's password,
docs/security.md); never from the URL. Rows go out in one HTTP `INSERT ... FORMAT
JSONEachRow` per drain (about every 2 s), with the standard library only (chDB is not
needed). A failing ClickHouse never fails training: the writer logs
the first error, counts the dropped rows (the driver reports them at the end) and keeps
trying.

    writer = RunMetricsWriter("http://clickhouse.observability:8123", identity)
    writer.add(rows); writer.flush(); writer.close()
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
import urllib.request

from driver.metrics import CLICKHOUSE_ENV
from driver.metrics.names import metric_name
from driver.metrics.writers import row_labels, values
from observability import store

log = logging.getLogger("driver.metrics.clickhouse")
TABLE = "platform.run_metrics"
USER_ENV, PASSWORD_ENV = CLICKHOUSE_ENV  # `runs`; the `clickhouse-runs` Secret's password
__all__ = ["RunMetricsWriter", "insert_url", "metric_name", "metric_rows"]


def auth_headers(env=os.environ) -> dict[str, str]:
    """ClickHouse's HTTP sign-in headers from the environment (none when unset)."""
    out = {}
    if env.get(USER_ENV):
        out["X-ClickHouse-User"] = env[USER_ENV]
    if env.get(PASSWORD_ENV):
        out["X-ClickHouse-Key"] = env[PASSWORD_ENV]
    return out


def metric_rows(row: dict, identity: dict[str, str]) -> list[dict]:
    """The long-format rows of one metrics row: one per finite numeric field, with the label
    set in `identity` (catalog.labels; missing labels "", attempt 0)."""
    rank = int(identity.get("rank") or 0)
    return store.metric_rows(identity, rank, row["step"], row["time"], values(row))


def insert_url(base_url: str, table: str = TABLE) -> str:
    """The HTTP interface URL that inserts JSONEachRow into `table`."""
    query = urllib.parse.urlencode({"query": f"INSERT INTO {table} FORMAT JSONEachRow"})
    return f"{base_url.rstrip('/')}/?{query}"


class RunMetricsWriter:
    """Buffers metric rows and posts them to ClickHouse; never raises."""

    def __init__(self, base_url: str, identity: dict[str, str], timeout_s: float = 5.0):
        if "@" in urllib.parse.urlsplit(base_url).netloc:
            raise ValueError("logging.clickhouse_url: credentials go in the environment "
                             f"({USER_ENV}, {PASSWORD_ENV}), not the URL")  # fmt: skip
        self.url, self.identity, self.timeout_s = insert_url(base_url), dict(identity), timeout_s
        self.headers = auth_headers()
        self.pending: list[dict] = []
        self.sent = 0
        self.dropped = 0
        self.last_error: str | None = None

    def add(self, rows: list[dict], hosts: dict[int, dict] | None = None) -> None:
        """Queue rows; each labelled with its `rank` (default 0) and that rank's host."""
        for row in rows:
            rank = int(row.get("rank", self.identity.get("rank") or 0))
            tags = row_labels(self.identity, hosts or {}, {**row, "rank": rank})
            self.pending.extend(metric_rows(row, tags))

    def flush(self) -> bool:
        """Post what is pending; False (and the rows dropped) when ClickHouse refused."""
        if not self.pending:
            return True
        rows, self.pending = self.pending, []
        body = "".join(json.dumps(row) + "\n" for row in rows).encode()
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except Exception as err:  # network, HTTP 4xx/5xx: training goes on
            if self.last_error is None:
                log.warning("ClickHouse insert failed, metrics rows dropped: %s", err)
            self.last_error = f"{type(err).__name__}: {err}"
            self.dropped += len(rows)
            return False
        self.sent += len(rows)
        return True

    def close(self) -> None:
        """Post what is left (the caller reports `dropped` and `last_error`)."""
        self.flush()
