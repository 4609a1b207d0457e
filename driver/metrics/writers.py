"""The driver's metrics writers: metrics.jsonl, the run's chDB store and, through
driver.metrics.clickhouse and driver.metrics.otel, ClickHouse and OpenTelemetry.

`Writers.write(rows, hosts)` takes a drained batch of every rank's rows (driver.metrics.rank:
tagged with `rank` and `attempt`) and the ranks' hosts (`{rank: {"pod", "node"}}`); each row
gets the run's label set (catalog.labels) and goes to every configured writer. metrics.jsonl
gets each step's row of record (`driver.metrics.rank.of_record`: rank 0's, or under torchft
the lowest live group's writer's), a batch's in the order they were trained
(`records_in_order`): the run's step record, which the summary, the benchmark
and `runner ui` without a store read, appended: a restart or a resume adds rows under a new
`attempt`, never rewrites. A writer that fails logs once and counts its dropped rows;
training goes on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from catalog import labels
from driver.metrics.names import NOT_METRICS, metric_name
from driver.metrics.rank import records_in_order

log = logging.getLogger("driver.metrics")
TAIL_BYTES = 1 << 16


def row_labels(identity: dict, hosts: dict[int, dict], row: dict) -> dict[str, str]:
    """The label set of one rank's row: the run's identity, the rank's pod and node."""
    rank = int(row.get("rank", 0))
    host = hosts.get(rank, {})
    return labels.telemetry_labels(
        cluster=identity.get("cluster"), team=identity.get("team"), run=identity.get("run"),
        learner=identity.get("learner"), attempt=row.get("attempt", 0), rank=rank,
        pod=host.get("pod", identity.get("pod")), node=host.get("node", identity.get("node")),
        service=identity.get("service", labels.TRAIN_SERVICE),
    )  # fmt: skip


def values(row: dict) -> dict[str, float]:
    """{platform name: value} of a row's numeric fields."""
    return {
        metric_name(k): v
        for k, v in row.items()
        if k not in NOT_METRICS and not isinstance(v, bool) and isinstance(v, int | float)
    }


def next_attempt(path: Path) -> int:
    """The attempt after the newest one in a metrics file (0 for a new file)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    newest = -1
    for line in lines:
        try:
            attempt = json.loads(line).get("attempt", 0)
        except (ValueError, AttributeError):
            continue
        if isinstance(attempt, int):
            newest = max(newest, attempt)
    return newest + 1 if lines else 0


class JsonlWriter:
    """Appends the rows of record, with their labels, to metrics.jsonl."""

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("a")

    def write(self, rows: list[dict], labelled: list[dict]) -> None:
        tags = {id(row): tag for row, tag in zip(rows, labelled, strict=True)}
        for row in records_in_order(rows):
            self.file.write(json.dumps({**tags[id(row)], **row}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class StoreWriter:
    """Every rank's rows into the run's chDB store (observability.store); this process is
    its one writer. chDB starts (`open`, about 0.3 s of CPU) with the first rows, in the
    progress thread that writes them: not while the training workers start."""

    def __init__(self, output_dir: Path):
        self.output_dir, self.store, self.opened = output_dir, None, False
        self.sent = self.dropped = 0
        self.last_error: str | None = None

    def open(self) -> None:
        from observability import store

        self.opened = True
        try:
            self.store = store.LocalStore.open(self.output_dir)
        except Exception as err:  # chDB missing, the store held by another process
            self.fail(err, 0)

    def fail(self, err: BaseException, rows: int) -> None:
        if self.last_error is None:
            log.warning("chDB store: metrics rows dropped: %s", err)
        self.last_error = f"{type(err).__name__}: {err}"
        self.dropped += rows

    def write(self, rows: list[dict], labelled: list[dict]) -> None:
        from observability import store

        if not rows:
            return
        if not self.opened:
            self.open()
        out = []
        for row, tags in zip(rows, labelled, strict=True):
            out.extend(store.metric_rows(tags, int(row.get("rank", 0)), row["step"],
                                         row["time"], values(row)))  # fmt: skip
        if self.store is None:
            self.dropped += len(out)
            return
        try:
            self.sent += self.store.insert_metrics(out)
        except Exception as err:  # a full disk, a broken store: training goes on
            self.fail(err, len(out))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
