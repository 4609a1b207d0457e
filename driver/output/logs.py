"""A training worker's log: its labelled lines, the tail kept for a crash bundle, and where
it runs.

    logger, tail = worker_logger(cfg.logging.tail_lines, {"rank": 1, "attempt": 0, **where_am_i()})

Every line carries the rank's labels (rank, attempt, pod, node); warnings also go to
stderr; the last `tail_lines` stay in `tail.lines`, which a failing rank sends to the run's
channel (driver.channel) with its traceback, for the crash bundle.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque

from catalog import labels

LOGGER_NAME = "driver.worker"


def log_format(tags: dict | None = None) -> str:
    """A worker's log line format: time, level, its labels (`rank=1 attempt=0`), message."""
    labelled = "".join(f"{k}={v} " for k, v in (tags or {}).items() if v not in ("", None))
    return f"%(asctime)s %(levelname)s {labelled}%(message)s".replace("  ", " ")


class LogTail(logging.Handler):
    """Keeps the last `capacity` formatted log lines of this process."""

    def __init__(self, capacity: int, tags: dict | None = None):
        super().__init__()
        self.lines: deque[str] = deque(maxlen=max(1, capacity))
        self.setFormatter(logging.Formatter(log_format(tags)))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def where_am_i() -> dict[str, str]:
    """This process's pod (the hostname, which Kubernetes sets to the pod name) and node
    (`NODE_NAME`, which the runner's pod templates pass down; the hostname elsewhere)."""
    host = socket.gethostname()
    return {"pod": host, "node": os.environ.get(labels.NODE_NAME_ENV) or host}


def worker_logger(capacity: int, tags: dict | None = None) -> tuple[logging.Logger, LogTail]:
    """The worker's logger: every line into the tail, warnings also to stderr; each line
    with the rank's labels (`tags`: rank, attempt, pod, node)."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    tail = LogTail(capacity, tags)
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter(log_format(tags)))
    stderr.setLevel(logging.WARNING)
    logger.addHandler(tail)
    logger.addHandler(stderr)
    return logger, tail
