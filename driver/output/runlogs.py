"""The run's log lines from each of its processes (observability.logs): files and OTLP.

Every process of a run logs to `<output_dir>/logs/<name>.jsonl` (one `platform.run_logs`
row a line, flushed per record) with its labels (catalog.labels: run, rank, attempt, pod,
node, worker, service), and with `logging.otel_endpoint` set (a rendered run: the
platform's collector) also over OpenTelemetry. The driver ingests the files into the run's
chDB store while it trains (`DriverLogs.poll`, from the progress thread) and once more at
the end, so `runner ui` and `runner diagnose --analyze` read every line of a local run.

    spec = LogSpec.of(cfg)                                   # picklable: sent to actors
    handlers = spec.install(["driver.worker"], rank=3, attempt=0, **where_am_i())
    ...
    close(handlers)

    logs = DriverLogs(spec, store_writer)                    # the driver (driver.progress)
    logs.line("starting 2 training workers")                 # its own lines
    logs.poll(); logs.close()                                # ingest; the last lines too
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from catalog import labels

log = logging.getLogger("driver.logs")


def learner_label(cfg) -> str:
    """The run's DiLoCo learner name (`diloco.learner` of a learner), else empty."""
    diloco = getattr(cfg, "diloco", None)
    return diloco.learner if diloco is not None and diloco.address else ""


@dataclass(frozen=True)
class LogSpec:
    """Where a run's processes log: the folder of log files, the run's identity, the
    OTLP endpoint (None: files only)."""

    folder: str
    identity: dict = field(default_factory=dict)
    otel_endpoint: str | None = None

    @classmethod
    def of(cls, cfg, output_dir: str | Path | None = None) -> LogSpec:
        """The run's spec from its config (`output_dir`: the run's folder when the caller
        holds it; else `run.output_dir`)."""
        from observability.logs import LOG_DIR

        run = cfg.run
        identity = {"cluster": getattr(run, "cluster", ""), "team": getattr(run, "team", ""),
                    "run": getattr(run, "name", ""),
                    "learner": learner_label(cfg)}  # fmt: skip
        folder = str(Path(output_dir or run.output_dir).resolve() / LOG_DIR)
        endpoint = getattr(getattr(cfg, "logging", None), "otel_endpoint", None)
        return cls(folder, identity, endpoint or None)

    def labels(self, **values) -> dict:
        """The label set of one process: the run's identity with `values` (rank, attempt,
        pod, node, worker, service; `service` defaults to the training service)."""
        values.setdefault("service", labels.TRAIN_SERVICE)
        return labels.telemetry_labels(**{**self.identity, **values})

    def handlers(self, **values) -> list[logging.Handler]:
        """The file handler and, with an endpoint, the OTLP handler of one process."""
        from observability import logs

        tags = self.labels(**values)
        rank = int(tags["rank"]) if tags["rank"] != "" else None
        name = logs.file_name(tags["service"], rank, tags["worker"])
        out: list[logging.Handler] = [logs.LogFile(Path(self.folder) / name, tags)]
        if self.otel_endpoint:
            try:
                out.append(logs.otel_handler(self.otel_endpoint, tags))
            except Exception as err:  # no SDK, a bad URL: the files still hold every line
                log.warning("no OpenTelemetry log export (%s): %s", self.otel_endpoint, err)
        return out

    def install(self, loggers: list[str], **values) -> list[logging.Handler]:
        """Add this process's handlers to `loggers` (names; "" is the root logger) and
        return them (for `close`)."""
        handlers = self.handlers(**values)
        for name in loggers:
            target = logging.getLogger(name)
            for handler in handlers:
                target.addHandler(handler)
            if target.level == logging.NOTSET or target.level > logging.INFO:
                target.setLevel(logging.INFO)
        return handlers


def close(handlers: list[logging.Handler]) -> None:
    """Remove the handlers from every logger and close them (OTLP exports what is left)."""
    names = list(logging.root.manager.loggerDict)
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in names)]
    for handler in handlers:
        for logger in loggers:
            if isinstance(logger, logging.Logger) and handler in logger.handlers:
                logger.removeHandler(handler)
        try:
            handler.close()
        except Exception:  # an exporter that cannot reach its collector at the end
            pass


class DriverLogs:
    """The driver's own log lines (a `driver.jsonl` and OTLP) and the ingestion of every
    process's log file into the run's chDB store (`store`: driver.metrics.writers'
    StoreWriter, the store's one writer in this process; None: no store)."""

    def __init__(self, spec: LogSpec, store=None, pod: str = "", node: str = ""):
        from observability import logs

        self.spec, self.store_writer = spec, store
        self.handlers = spec.handlers(service="driver", pod=pod, node=node)
        self.file = self.handlers[0]
        self.ingest = None
        self.ingested = 0
        self.logs = logs

    def line(self, message: str, level: str = "INFO") -> None:
        """One line of the driver's (its progress messages)."""
        self.file.write(time.time(), message, level, "driver")
        for handler in self.handlers[1:]:
            handler.emit(
                logging.makeLogRecord(
                    {
                        "msg": message,
                        "levelname": level,
                        "levelno": logging.getLevelName(level),
                        "name": "driver",
                    }
                )
            )

    def poll(self, force: bool = False) -> int:
        """Ingest the new lines of every log file into the store; the count (0 without a
        store, or when it cannot be opened: the files keep the lines). The store opens with
        the first metric rows (driver.metrics.writers.StoreWriter: not while the workers
        start); `force` opens it now (the end of a run)."""
        writer = self.store_writer
        if writer is None or not (writer.opened or force):
            return 0
        if not writer.opened:
            writer.open()
        if writer.store is None:
            return 0
        if self.ingest is None:
            self.ingest = self.logs.Ingest(Path(self.spec.folder), writer.store)
        try:
            done = self.ingest.poll()
        except Exception as err:  # a full disk, a broken store: training goes on
            writer.fail(err, 0)
            return 0
        self.ingested += done
        return done

    def close(self) -> None:
        for handler in self.handlers:
            try:
                handler.close()
            except Exception:
                pass
        self.poll(force=True)
