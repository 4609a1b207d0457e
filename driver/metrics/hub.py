"""`RunMetrics`: the driver's one entry point for metrics rows, fanned out to the writers.

    metrics = RunMetrics(identity, output_dir, "metrics.jsonl", clickhouse_url=None,
                         otel_endpoint=None, store=True)
    metrics.first_attempt          # after the attempts already in metrics.jsonl
    metrics.write(rows, hosts)     # a drained batch of every rank's rows (copies decided
                                   # in place first: driver.metrics.records)
    metrics.close(); metrics.problems()   # lines about rows a writer dropped

The progress display (driver.output.progress) drains the run's channel and calls `write`; it owns
no output.
"""

from __future__ import annotations

from pathlib import Path

from driver.metrics.records import RecordBook
from driver.metrics.writers import JsonlWriter, StoreWriter, next_attempt, row_labels, values


class RunMetrics:
    """metrics.jsonl, the chDB store, ClickHouse and OpenTelemetry, as configured."""

    def __init__(self, identity: dict, output_dir: Path, metrics_file: str,
                 clickhouse_url: str | None = None, otel_endpoint: str | None = None,
                 store: bool = True):  # fmt: skip
        self.identity = dict(identity)
        self.path = Path(output_dir) / metrics_file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.first_attempt = next_attempt(self.path)
        self.jsonl = JsonlWriter(self.path)
        self.store = StoreWriter(Path(output_dir)) if store else None
        self.clickhouse = self.otel = None
        self._label_sets: dict[tuple, dict] = {}
        self.records = RecordBook()
        if clickhouse_url:
            from driver.metrics.clickhouse import RunMetricsWriter

            self.clickhouse = RunMetricsWriter(clickhouse_url, self.identity)
        if otel_endpoint:
            from driver.metrics.otel import OtelWriter

            self.otel = OtelWriter(otel_endpoint, self.identity)

    def write(self, rows: list[dict], hosts: dict[int, dict] | None = None) -> None:
        if not rows:
            return
        hosts = hosts or {}
        self.records.admit(rows)  # one row of record per step (torchft's copies)
        labelled = [self._labels(hosts, row) for row in rows]
        self.jsonl.write(rows, labelled)
        if self.store is not None:
            self.store.write(rows, labelled)
        if self.clickhouse is not None:
            self.clickhouse.add(rows, hosts)
            self.clickhouse.flush()
        if self.otel is not None:
            self.otel.write(rows, labelled, values)

    def _labels(self, hosts: dict[int, dict], row: dict) -> dict:
        """A row's label set, made once per rank, attempt and host (shared: writers only
        read it)."""
        rank = int(row.get("rank", 0))
        host = hosts.get(rank, {})
        key = (rank, row.get("attempt", 0), host.get("pod"), host.get("node"))
        if key not in self._label_sets:
            self._label_sets[key] = row_labels(self.identity, hosts, row)
        return self._label_sets[key]

    def close(self) -> None:
        self.jsonl.close()
        for writer in (self.store, self.clickhouse, self.otel):
            if writer is not None:
                writer.close()

    def problems(self) -> list[str]:
        """One line per writer that dropped rows."""
        out = []
        for where, writer in (("the chDB store", self.store), ("ClickHouse", self.clickhouse)):
            if writer is not None and writer.dropped:
                out.append(f"{writer.dropped} metric rows did not reach {where} "
                           f"({writer.last_error})")  # fmt: skip
        return out
