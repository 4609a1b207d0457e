"""The driver's metrics: names, what each rank reports, and the writers.

- `names`: the platform's metric names and units, one list (writers, dashboards, tests).
- `rank`: a training rank's reporter (every rank: step phases, memory, throughput).
- `hub`, `writers`, `otel`: the driver's writers: metrics.jsonl (appended, every attempt),
  the run's chDB store, ClickHouse (driver.metrics.clickhouse) and OpenTelemetry.
- `flight`: the PyTorch flight recorder's environment for training ranks.

ClickHouse credentials come from the environment only: `CLICKHOUSE_ENV` lists the names
(catalog.labels: in a cluster the runner renders the `runs` user and the `clickhouse-runs`
Secret's password as these).
"""

from __future__ import annotations

from catalog.labels import CLICKHOUSE_PASSWORD_ENV, CLICKHOUSE_USER_ENV

CLICKHOUSE_ENV = (CLICKHOUSE_USER_ENV, CLICKHOUSE_PASSWORD_ENV)
