"""Driver-side progress: drains the metrics sink, writes metrics.jsonl, shows progress.

Locally a tqdm progress bar (loss, lr, throughput, and per auxiliary service its latency and
queue; the evaluator's score); in a cluster one JSON line per step on
stdout carrying the run's identity (run, team, cluster), for log collectors. Every step is
appended to `<output_dir>/<logging.metrics_file>`. `summarize(rows)` is the pure end-of-run
summary (final loss, first loss, steady-state steps/s).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from pathlib import Path


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


class Progress:
    """Polls the sink in a thread until `close()`; keeps every row for the summary."""

    def __init__(self, cfg, sink, output_dir: Path, fmt: str, interval_s: float = 1.0):
        self.cfg, self.sink, self.fmt, self.interval_s = cfg, sink, fmt, interval_s
        self.path = output_dir / cfg.logging.metrics_file
        self.file = self.path.open("w")
        self.rows: list[dict] = []
        self.lines: deque[str] = deque(maxlen=cfg.logging.tail_lines)
        self.identity = {"run": cfg.run.name, "team": cfg.run.team, "cluster": cfg.run.cluster}
        self.bar = None
        self.aux_shown: dict[str, str] = {}
        self.warehouse = None  # a driver.clickhouse.RunMetricsWriter with logging.clickhouse_url
        if cfg.logging.clickhouse_url:
            from driver.clickhouse import RunMetricsWriter

            self.warehouse = RunMetricsWriter(cfg.logging.clickhouse_url, self.identity)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)

    def start(self) -> Progress:
        self._thread.start()
        return self

    def log(self, message: str) -> None:
        """A driver log line: printed above the bar (or as JSON) and kept for crash bundles."""
        self.lines.append(message)
        if self.fmt == "json":
            print(json.dumps({**self.identity, "message": message}), flush=True)
        elif self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.drain()

    def drain(self) -> None:
        import ray

        try:
            rows = ray.get(self.sink.drain.remote(), timeout=30)
        except Exception as err:  # the sink died with the cluster: report once, stop polling
            self.lines.append(f"metrics sink unreachable: {err}")
            self._stop.set()
            return
        self.take(rows)

    def take(self, rows: list[dict]) -> None:
        """Record a batch of rows: metrics file, log tail, and the bar or JSON lines."""
        for row in rows:
            self._handle(row)
        if rows and self.fmt == "progress":
            self._show(rows[-1])  # once per batch: rows arrive in bursts
        self.file.flush()
        if rows and self.warehouse is not None:
            self._to_warehouse(rows)

    def _to_warehouse(self, rows: list[dict]) -> None:
        """Insert the rows into ClickHouse, labelled with rank 0's pod and node."""
        if "pod" not in self.warehouse.identity:
            import ray

            try:
                host = ray.get(self.sink.host.remote(0), timeout=5)
            except Exception:  # a sink without hosts (tests) or one that went away
                host = {}
            self.warehouse.identity.update({"rank": "0", **host})
        self.warehouse.add(rows)
        self.warehouse.flush()

    def _handle(self, row: dict) -> None:
        self.rows.append(row)
        self.file.write(json.dumps(row) + "\n")
        self.lines.append(f"step {row['step']} loss {row['loss']:.4f} lr {row['lr']:.2e}")
        if self.fmt == "json":
            print(json.dumps({**self.identity, **row}), flush=True)

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
        postfix = {"loss": f"{row['loss']:.3f}", "lr": f"{row['lr']:.1e}"}
        for key, value in row.items():
            if key.endswith("_per_s") and not key.startswith("aux/"):
                postfix[key.replace("_per_s", "/s")] = f"{value:.0f}"
        self.aux_shown.update(aux_postfix(row))  # a service's figures stay until updated
        postfix.update(self.aux_shown)
        self.bar.set_postfix(postfix)

    def close(self) -> None:
        """Stop polling, take what is left, close the bar and the file."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._stop.clear()
        self.drain()
        if self.bar is not None:
            self.bar.close()
        self.file.close()
        if self.warehouse is not None:
            self.warehouse.close()
            if self.warehouse.dropped:
                self.log(f"{self.warehouse.dropped} metric rows did not reach ClickHouse "
                         f"({self.warehouse.last_error})")  # fmt: skip
