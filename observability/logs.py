"""A run's log lines: written by each of its processes, kept in the run's store.

Every process of a run (the driver, each training rank, each aux-service worker, the
DiLoCo synchronizer) writes its log records as `platform.run_logs` rows, one JSON object a
line, to a file of its own under the run's output folder (`<output_dir>/logs/<name>.jsonl`:
appended and flushed per record, so a process killed by SIGKILL leaves every line it
logged). The driver, the store's one writer, ingests the files into the run's chDB store
(`Ingest.poll()`: only the new, whole lines of each file, as they are: the lines are the
rows). In a cluster the same records also go to the platform's collector over
OpenTelemetry (`otel_handler`), and ClickHouse's views put them and the pods' container
output into the same table (kustomize/bases/observability/clickhouse/schema.sql).

    handler = LogFile(folder / "logs" / "train-rank-3.jsonl", labels)   # a logging.Handler
    logging.getLogger("driver.worker").addHandler(handler)
    ingest = Ingest(folder / "logs", store)      # store: observability.store.LocalStore
    ingest.poll()                                # rows inserted now (whole lines only)
    rows = around(store.query, "research", "tiny-lm", rank=3, ts=failure_time)

Reading them back (`around`, `lines`: the SQL in observability/sql/logs_*.sql) is the same
on a run's store and on the cluster's ClickHouse.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path

from catalog.labels import TELEMETRY_LABELS

RUN_LOGS = "platform.run_logs"
LOG_COLUMNS = ("ts", "cluster", "team", "run", "learner", "attempt", "rank", "pod", "node",
               "worker", "service", "source", "logger", "level", "line")  # fmt: skip
"""`platform.run_logs`' columns, in order (a test holds them equal to the table's)."""
LOG_DIR = "logs"
STATE = ".ingested.json"
MAX_LINE = 16_384  # characters of one record kept (a traceback is one record)
CHUNK = 8 << 20  # bytes of one file read per poll
LENIENT = (
    "input_format_skip_unknown_fields = 1, input_format_allow_errors_num = 1000000, "
    "input_format_allow_errors_ratio = 1"
)
INSERT = f"INSERT INTO {RUN_LOGS} SETTINGS {LENIENT} FORMAT JSONEachRow\n"
COLUMN_TYPES = (
    ("ts", "DateTime64(6)"), ("cluster", "String"), ("team", "String"), ("run", "String"),
    ("learner", "String"), ("attempt", "UInt32"), ("rank", "Int32 DEFAULT -1"),
    ("pod", "String"), ("node", "String"), ("worker", "String"), ("service", "String"),
    ("source", "String DEFAULT \\'logging\\'"), ("logger", "String"), ("level", "String"),
    ("line", "String"),
)  # fmt: skip
STRUCTURE = ", ".join(f"{c} {t}" for c, t in COLUMN_TYPES)
"""The rows' structure as a quoted SQL string's content (quotes escaped): file()'s."""
FROM_FILE_BYTES = 1 << 20  # larger batches are read by the embedded server from a file
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_FORMATTER = logging.Formatter()


def file_name(service: str, rank: int | None = None, worker: str = "") -> str:
    """The log file of one process: `train-rank-3.jsonl`, `driver.jsonl`,
    `encoder-encoder-1.jsonl`, `synchronizer.jsonl`."""
    parts = [service or "process"]
    if rank is not None and rank >= 0:
        parts.append(f"rank-{int(rank)}")
    if worker:
        parts.append(worker)
    return _SAFE.sub("_", "-".join(parts)) + ".jsonl"


def label_fields(labels: dict) -> dict:
    """A row's label columns from a label set (catalog.labels.telemetry_labels): strings,
    `attempt` a number, `rank` a number or -1."""
    out = {k: str(labels.get(k) or "") for k in TELEMETRY_LABELS}
    out["attempt"] = int(labels.get("attempt") or 0)
    rank = labels.get("rank")
    out["rank"] = int(rank) if rank not in (None, "") else -1
    return out


def row(
    labels: dict, ts: float, line: str, level: str = "", logger: str = "", source: str = "logging"
) -> dict:
    """One `platform.run_logs` row (`ts` epoch seconds)."""
    return {
        "ts": round(float(ts), 6),
        **label_fields(labels),
        "source": source,
        "logger": logger,
        "level": level,
        "line": str(line)[:MAX_LINE],
    }


def record_text(record: logging.LogRecord) -> str:
    """A record's message, with its traceback when it carries one."""
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + _FORMATTER.formatException(record.exc_info)
    return text


class LogFile(logging.Handler):
    """Appends each record as a `platform.run_logs` row to `path` (flushed per record).
    The labels are serialized once; a record costs one small JSON string and a write."""

    def __init__(self, path: Path, labels: dict, level: int = logging.INFO):
        super().__init__(level)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")
        self.set_labels(labels)

    def set_labels(self, labels: dict) -> None:
        """Labels of the lines from now on (a rank learns its attempt after it starts)."""
        self.tags = json.dumps(label_fields(labels), separators=(",", ":"))[1:-1]

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write(record.created, record_text(record), record.levelname, record.name)
        except Exception:
            self.handleError(record)

    def write(self, ts: float, line: str, level: str = "", logger: str = "") -> None:
        """One line not from `logging` (the driver's progress lines)."""
        text = json.dumps(str(line)[:MAX_LINE])
        out = (
            f'{{"ts":{ts:.6f},{self.tags},"source":"logging","logger":{json.dumps(logger)},'
            f'"level":{json.dumps(level)},"line":{text}}}\n'
        )
        with self.lock:
            self.file.write(out)
            self.file.flush()

    def close(self) -> None:
        with self.lock:
            if not self.file.closed:
                self.file.close()
        super().close()


class Ingest:
    """Inserts the new whole lines of every `*.jsonl` file in `folder` into a store (an
    object with `execute(sql)`: observability.store.LocalStore, ServerStore). A line that is
    not a row is skipped by the store (`input_format_allow_errors_*`); a torn last line
    waits for the next poll. How far each file was ingested is kept beside the files
    (`.ingested.json`), so a later process (the crash bundle, a resumed run in the same
    folder) inserts no line twice. Thread-safe; `poll()` returns the lines inserted."""

    def __init__(self, folder: Path, store):
        self.folder, self.store = Path(folder), store
        self.state = self.folder / STATE
        self.offsets: dict[str, int] = read_offsets(self.state)
        self.lock = threading.Lock()
        self.ingested = 0

    def chunks(self):
        """(file, offset after, bytes of whole lines) of each file that grew."""
        for path in sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else ():
            start = self.offsets.get(path.name, 0)
            try:
                size = path.stat().st_size
                if size < start:  # the file was replaced: read the new one whole
                    start = 0
                if size <= start:
                    continue
                with path.open("rb") as f:
                    f.seek(start)
                    data = f.read(min(size - start, CHUNK))
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            if end:
                yield path.name, start + end, data[:end]

    def poll(self) -> int:
        with self.lock:
            done = 0
            batch, offsets = [], {}
            for name, offset, data in self.chunks():
                batch.append(data)
                offsets[name] = offset
            if batch:
                body = b"".join(batch)
                self.insert(body)
                self.offsets.update(offsets)
                write_offsets(self.state, self.offsets)
                done = body.count(b"\n")
            self.ingested += done
            return done

    def insert(self, body: bytes) -> None:
        """The rows into the store: a large batch of a local store from a file the embedded
        server parses in parallel (several times faster than rows in the query's text),
        columns by name; anything else in the INSERT itself."""
        if len(body) < FROM_FILE_BYTES or not hasattr(self.store, "path"):
            self.store.execute(INSERT + body.decode("utf-8", errors="replace"))
            return
        tmp = self.folder / f".ingest-{os.getpid()}.tmp"
        tmp.write_bytes(body)
        try:
            where = str(tmp.resolve()).replace("\\", "\\\\").replace("'", "\\'")
            columns = ", ".join(LOG_COLUMNS)
            self.store.execute(
                f"INSERT INTO {RUN_LOGS} ({columns}) SETTINGS {LENIENT} SELECT {columns} "
                f"FROM file('{where}', 'JSONEachRow', '{STRUCTURE}')"
            )
        finally:
            tmp.unlink(missing_ok=True)


def read_offsets(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int) and v >= 0}


def write_offsets(path: Path, offsets: dict[str, int]) -> None:
    """Replace the state file atomically (a crash leaves the old one or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(offsets, sort_keys=True))
    tmp.replace(path)


# Python's level names as OpenTelemetry's severity (text, number): the log data model's.
SEVERITY = {"DEBUG": ("DEBUG", 5), "INFO": ("INFO", 9), "WARNING": ("WARN", 13),
            "ERROR": ("ERROR", 17), "CRITICAL": ("FATAL", 21)}  # fmt: skip


class OtlpHandler(logging.Handler):
    """Each record (its message and traceback) as an OpenTelemetry log record of
    `provider`, under the record's logger name (the scope)."""

    def __init__(self, provider, level: int = logging.INFO):
        super().__init__(level)
        self.provider = provider

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text, number = SEVERITY.get(record.levelname, (record.levelname, 0))
            self.provider.get_logger(record.name).emit(
                timestamp=int(record.created * 1e9), severity_text=text,
                severity_number=number or None, body=record_text(record)[:MAX_LINE],
            )  # fmt: skip
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        try:
            self.provider.shutdown()  # exports what is left
        finally:
            super().close()


def otel_handler(endpoint: str, labels: dict, interval_s: float = 1.0) -> logging.Handler:
    """A logging.Handler that exports records over OTLP/HTTP to a collector (`endpoint`,
    e.g. http://otel-collector.observability.svc:4318), the label set as the resource
    (catalog.labels.otel_attributes), batched every `interval_s`. `handler.close()`
    exports what is left."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    from catalog.labels import otel_attributes

    url = endpoint.rstrip("/")
    url = url if url.endswith("/v1/logs") else url + "/v1/logs"
    tags = {k: str(v) for k, v in label_fields(labels).items() if v not in ("", -1)}
    provider = LoggerProvider(resource=Resource.create(otel_attributes(tags)))
    exporter = OTLPLogExporter(endpoint=url, timeout=5)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, schedule_delay_millis=int(interval_s * 1000))
    )
    return OtlpHandler(provider)
