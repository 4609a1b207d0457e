"""Driver-side progress: drains the run's channel into the metrics writers, shows progress.

Every drained row (every rank's) goes to driver.metrics (`RunMetrics`: metrics.jsonl, the
run's chDB store, ClickHouse, OpenTelemetry); this module owns no output of its own. Locally
a tqdm progress bar of the rows of record (rank 0's; under torchft the writer's,
driver.metrics.rank.of_record) (loss, lr, throughput, and per auxiliary service its
latency and queue; the evaluator's score); in a cluster one JSON line per step and per
driver message on stdout carrying the label set (catalog.labels), for log collectors.
`summarize(rows)` is the pure end-of-run summary (final loss, first loss, steady-state
steps/s) of those rows. Its messages and every process's log file go to the run's store
too (driver.output.runlogs.DriverLogs).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections import deque
from pathlib import Path

from catalog import labels
from driver.metrics.hub import RunMetrics
from driver.metrics.rank import records_in_order
from driver.output.runlogs import DriverLogs, LogSpec, learner_label


def summarize(rows: list[dict], skip: int = 1) -> dict:
    """Final and first loss, steps, and steps/s over the rows after the first `skip`."""
    if not rows:
        return {"steps": 0}
    steady = rows[skip:] if len(rows) > skip + 1 else rows
    busy = sum(row["step_time"] for row in steady)
    span = steady[-1]["time"] - steady[0]["time"]
    return {
        "steps": rows[-1]["step"],
        "first_loss": rows[0]["loss"],
        "final_loss": rows[-1]["loss"],
        "steps_per_s": (len(steady) - 1) / span if span > 0 else len(steady) / max(busy, 1e-9),
        "step_time_s": busy / len(steady),
    }


def aux_postfix(row: dict) -> dict[str, str]:
    """Per auxiliary service in a row: mean latency in ms and queued requests
    (`encoder=3ms/q0`); the evaluator's newest held-out loss (`eval=0.412`)."""
    from driver.aux.fleet import EVAL_LOSS, LATENCY, QUEUE_DEPTH, metric

    out = {}
    for key, value in row.items():
        parts = key.split("/")
        if len(parts) != 3 or parts[0] != "aux":
            continue
        if parts[2] == LATENCY:
            depth = row.get(metric(parts[1], QUEUE_DEPTH), 0)
            out[parts[1]] = f"{value * 1000:.0f}ms/q{depth:.0f}"
        elif parts[2] == EVAL_LOSS:
            out["eval"] = f"{value:.3f}"
    return out


POLL_S = 2.0
"""How often the progress thread drains the run's channel (one write to each writer):
with the ranks' 1 s batches (driver.metrics.rank), a row reaches metrics.jsonl and the
store within about 3 s; each drain costs the driver CPU time that, on a
machine the workers fill, is taken from training."""


class Progress:
    """Drains the run's channel (`sink`: a driver.channel.DriverChannel, or None) in a
    thread until `close()`; keeps rank 0's rows for the summary."""

    def __init__(self, cfg, sink, output_dir: Path, fmt: str, interval_s: float = POLL_S):
        from driver.output.logs import where_am_i

        self.cfg, self.sink, self.fmt, self.interval_s = cfg, sink, fmt, interval_s
        log_cfg = cfg.logging
        self.identity = {"run": cfg.run.name, "team": cfg.run.team, "cluster": cfg.run.cluster,
                         "learner": learner_label(cfg)}  # fmt: skip
        self.labels = labels.telemetry_labels(**self.identity, **where_am_i(),
                                              service=labels.TRAIN_SERVICE)  # fmt: skip
        self.metrics = RunMetrics(
            self.identity, output_dir, log_cfg.metrics_file,
            clickhouse_url=getattr(log_cfg, "clickhouse_url", None),
            otel_endpoint=getattr(log_cfg, "otel_endpoint", None),
            store=getattr(log_cfg, "store", False),
        )  # fmt: skip
        self.path = self.metrics.path
        self.logs = DriverLogs(LogSpec.of(cfg, output_dir), self.metrics.store, **where_am_i())
        if sink is not None:  # the attempts after those already in the metrics file
            sink.begin(self.metrics.first_attempt)
        self.hosts: dict[int, dict] = {}
        self.rows: list[dict] = []
        self.lines: deque[str] = deque(maxlen=cfg.logging.tail_lines)
        self.bar = None
        self.aux_shown: dict[str, str] = {}
        self._stop = threading.Event()
        self._writing = threading.Lock()  # the progress thread's drains and workers' persists
        self._closed = False
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)

    @property
    def file(self):
        return self.metrics.jsonl.file

    @property
    def warehouse(self):
        """The ClickHouse writer (driver.metrics.clickhouse.RunMetricsWriter) or None."""
        return self.metrics.clickhouse

    def start(self) -> Progress:
        self._thread.start()
        return self

    def log(self, message: str) -> None:
        """A driver log line: printed above the bar (or as JSON) and kept for crash bundles."""
        self.lines.append(message)
        with contextlib.suppress(Exception):  # a full disk: the message is still shown
            self.logs.line(message)
        if self.fmt == "json":
            print(json.dumps({**self.labels, "message": message}), flush=True)
        elif self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.drain()
            except Exception as err:  # a full disk, a closed stdout, an odd row: go on
                self._trouble(err)

    def _trouble(self, err: Exception) -> None:
        """Report a failure of the progress thread once per kind; the thread keeps polling."""
        kind = f"{type(err).__name__}: {err}"[:200]
        if kind in self._reported:
            return
        self._reported.add(kind)
        self.lines.append(f"progress: {kind}")
        try:
            print(f"progress: {kind}", file=sys.stderr, flush=True)
        except Exception:  # stderr itself is gone
            pass

    def drain(self) -> None:
        with self._writing:
            self.take(self.sink.drain())
        self.logs.poll()  # the processes' log lines into the store, once it is open

    def persist(self) -> bool:
        """Write every row the channel holds now, before answering (a worker's `persist`,
        from the channel's serving thread: a checkpoint commits only after its steps' rows
        are in metrics.jsonl and the store, so a driver killed after the commit loses no
        row). False once the writers are closed."""
        with self._writing:
            if self._closed:
                return False
            self.take(self.sink.drain())
            return True

    def take(self, rows: list[dict]) -> None:
        """Record a batch of every rank's rows: the writers, then rank 0's in the log tail
        and the bar or JSON lines."""
        if not rows:
            return
        self.metrics.write(rows, self._hosts(rows))
        mine = records_in_order(rows)
        for row in mine:
            self._handle(row)
        if mine and self.fmt == "progress":
            self._show(mine[-1])  # once per batch: rows arrive in bursts

    def _hosts(self, rows: list[dict]) -> dict[int, dict]:
        """The ranks' pods and nodes, asked of the channel again when a rank or attempt is new."""
        seen = {(int(r.get("rank", 0)), r.get("attempt", 0)) for r in rows}
        known = {(rank, host.get("attempt", 0)) for rank, host in self.hosts.items()}
        if self.sink is not None and not seen <= known:
            self.hosts = self.sink.all_hosts()
        return self.hosts

    def _handle(self, row: dict) -> None:
        self.rows.append(row)
        self.lines.append(f"step {row['step']} loss {row.get('loss', float('nan')):.4f} "
                          f"lr {row.get('lr', float('nan')):.2e}")  # fmt: skip
        if row.get("ckpt_error"):
            self.log(f"checkpoint save failed: {row['ckpt_error']}")
        if self.fmt == "json":
            print(json.dumps({**self.labels, **row}), flush=True)

    def _show(self, row: dict) -> None:
        """Advance the bar (made at the first rows, so start-up does not skew its rate)."""
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.cfg.train.steps, initial=row["step"], desc=self.cfg.run.name,
                unit="step", file=sys.stderr,
            )  # fmt: skip
        else:
            self.bar.update(row["step"] - self.bar.n)
        postfix = {"loss": f"{row.get('loss', float('nan')):.3f}",
                   "lr": f"{row.get('lr', float('nan')):.1e}"}  # fmt: skip
        if row.get("ckpt_failures"):
            postfix["ckpt_fail"] = str(row["ckpt_failures"])
        for key, value in row.items():
            if key.endswith("_per_s") and not key.startswith("aux/"):
                postfix[key.replace("_per_s", "/s")] = f"{value:.0f}"
        self.aux_shown.update(aux_postfix(row))  # a service's figures stay until updated
        postfix.update(self.aux_shown)
        self.bar.set_postfix(postfix)

    def close(self) -> None:
        """Stop polling, take what is left, close the bar and the writers."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._stop.clear()
        if self.sink is not None:
            self.drain()
        with self._writing:
            self._closed = True
        if self.bar is not None:
            self.bar.close()
        self.logs.close()  # the last lines into the store before it closes
        self.metrics.close()
        for line in self.metrics.problems():
            self.log(line)
