"""Telemetry records of Warden's actions: one JSON line per action, ready for ClickHouse.

Every action (cordon, check, drain, reboot, diag, uncordon, escalate, clear, busy) writes an
`ActionRecord`. `JsonlSink` appends them to a file; the same rows load into ClickHouse (or
chDB) with `TABLE_DDL`, e.g.

    INSERT INTO warden_actions SELECT * FROM file('warden.jsonl', JSONEachRow)

`id` is stable per remediation and action, so a retried activity that writes its record
again collapses into one row in the ReplacingMergeTree.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

TABLE_DDL = """
CREATE TABLE IF NOT EXISTS warden_actions (
    id String,
    time DateTime64(3, 'UTC'),
    cluster LowCardinality(String),
    node String,
    action LowCardinality(String),
    reason String,
    remediation_id String,
    detail String
) ENGINE = ReplacingMergeTree(time) ORDER BY (cluster, node, id)
""".strip()


@dataclass
class ActionRecord:
    id: str
    time: str
    """UTC, `YYYY-MM-DD hh:mm:ss.fff` (ClickHouse's DateTime64 text form)."""
    cluster: str
    node: str
    action: str
    reason: str
    remediation_id: str
    detail: str = ""


def record(
    cluster: str,
    node: str,
    action: str,
    reason: str,
    remediation_id: str,
    detail: str = "",
    now: datetime | None = None,
) -> ActionRecord:
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return ActionRecord(
        id=f"{remediation_id}/{action}",
        time=moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}",
        cluster=cluster,
        node=node,
        action=action,
        reason=reason,
        remediation_id=remediation_id,
        detail=detail,
    )


class JsonlSink:
    """Appends records to a JSON-lines file (thread-safe; one line per write)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, rec: ActionRecord) -> None:
        line = json.dumps(asdict(rec), sort_keys=True) + "\n"
        with self._lock, self.path.open("a") as out:
            out.write(line)

    def read(self) -> list[ActionRecord]:
        if not self.path.exists():
            return []
        return [ActionRecord(**json.loads(line)) for line in self.path.read_text().splitlines()]


class MemorySink:
    """Keeps records in a list (tests and benchmarks)."""

    def __init__(self):
        self.records: list[ActionRecord] = []
        self._lock = threading.Lock()

    def write(self, rec: ActionRecord) -> None:
        with self._lock:
            self.records.append(rec)


class ClickHouseSink:
    """Inserts records into `warden_actions` on a ClickHouse server (clickhouse-connect)."""

    def __init__(self, url: str):
        import clickhouse_connect

        self.client = clickhouse_connect.get_client(dsn=url)
        self.client.command(TABLE_DDL)
        self._lock = threading.Lock()

    def write(self, rec: ActionRecord) -> None:
        row = asdict(rec)
        row["time"] = datetime.strptime(rec.time, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        with self._lock:
            self.client.insert("warden_actions", [list(row.values())], column_names=list(row))


class TeeSink:
    """Writes each record to every sink it holds."""

    def __init__(self, *sinks):
        self.sinks = [s for s in sinks if s is not None]

    def write(self, rec: ActionRecord) -> None:
        for sink in self.sinks:
            sink.write(rec)
