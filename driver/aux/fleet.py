"""FleetMonitor: per service and per worker, queue wait, processing time, pending work,
throughput, errors and health of the run's auxiliary services.

A Ray actor (`FleetMonitor`, started by the coordinator on the driver's node) polls every
worker's and proxy's `stats()` each `aux.fleet_interval_s` and keeps the newest summary.
Rank 0 pulls it each logging interval (driver.aux.session) into the run's metrics rows, as
`aux/<service>/<metric>` (the names below; the ClickHouse rows and the aux-services
dashboard use the same). The aggregation is pure: `worker_window`, `service_metrics`.
"""

from __future__ import annotations

import threading
import time

# Metric names, one place: `aux/<service>/<name>` in metrics.jsonl and platform.run_metrics.
QUEUE_DEPTH = "queue_depth"  # requests queued or running at the workers (sum)
LATENCY = "latency_s"  # mean queue wait + processing per request over the window
QUEUE_WAIT = "queue_wait_s"  # mean time a request waited in a worker's queue
PROCESS = "process_s"  # mean handler time per request
THROUGHPUT = "requests_per_s"  # replies per second over the window, all workers
ERRORS = "errors"  # handler errors and refusals over the window
WORKERS = "workers"  # workers of the service
HEALTHY = "healthy_workers"  # workers that answered their stats within the window
PROXIES_LIVE = "live_proxies"  # proxies that answered
EVAL_LOSS = "eval_loss"  # the evaluator's held-out loss of the newest refreshed weights
EVAL_VERSION = "eval_version"  # the step whose weights EVAL_LOSS scored
EVAL_ERRORS = "eval_errors"  # an evaluation that ended in an error
METRICS = (QUEUE_DEPTH, LATENCY, QUEUE_WAIT, PROCESS, THROUGHPUT, ERRORS, WORKERS, HEALTHY,
           PROXIES_LIVE, EVAL_LOSS, EVAL_VERSION, EVAL_ERRORS)  # fmt: skip


def metric(service: str, name: str) -> str:
    """The metric name of a service's figure: `aux/<service>/<name>`."""
    return f"aux/{service}/{name}"


def worker_window(prev: dict | None, cur: dict | None, dt: float) -> dict:
    """One worker's figures over a window from two cumulative stats snapshots (None: the
    worker did not answer). A restarted worker (new pid) starts its counters at zero."""
    if cur is None:
        return {"healthy": False, "served": 0, "errors": 0, "pending": 0, "wait_s": 0.0,
                "process_s": 0.0, "rate": 0.0}  # fmt: skip
    if prev is None or prev.get("pid") != cur.get("pid"):
        prev = {}
    served = max(0, cur.get("served", 0) - prev.get("served", 0))
    errors = max(0, cur.get("errors", 0) - prev.get("errors", 0))
    wait = max(0.0, cur.get("wait_s_sum", 0.0) - prev.get("wait_s_sum", 0.0))
    busy = max(0.0, cur.get("process_s_sum", 0.0) - prev.get("process_s_sum", 0.0))
    return {
        "healthy": bool(cur.get("healthy", True)),
        "served": served,
        "errors": errors,
        "pending": int(cur.get("pending", 0)),
        "wait_s": wait,
        "process_s": busy,
        "rate": served / dt if dt > 0 else 0.0,
    }


def service_metrics(service: str, windows: list[dict], proxies: list[dict | None]) -> dict:
    """The service's metrics (named `aux/<service>/...`) from its workers' windows."""
    served = sum(w["served"] for w in windows)
    wait = sum(w["wait_s"] for w in windows)
    busy = sum(w["process_s"] for w in windows)
    values = {
        QUEUE_DEPTH: sum(w["pending"] for w in windows),
        LATENCY: (wait + busy) / served if served else 0.0,
        QUEUE_WAIT: wait / served if served else 0.0,
        PROCESS: busy / served if served else 0.0,
        THROUGHPUT: sum(w["rate"] for w in windows),
        ERRORS: sum(w["errors"] for w in windows),
        WORKERS: len(windows),
        HEALTHY: sum(1 for w in windows if w["healthy"]),
        PROXIES_LIVE: sum(1 for p in proxies if p is not None),
    }
    return {metric(service, name): value for name, value in values.items()}


def totals(service: str, last: dict[str, dict], restarts: dict[str, int]) -> dict:
    """Since the start, per service and per worker: served, errors, restarts (from the
    newest stats of each worker, keyed "service/index"; a restarted worker's counts start
    again)."""
    keys = sorted(
        (k for k in last if k.split("/")[0] == service), key=lambda k: int(k[len(service) + 1 :])
    )
    per_worker = {
        key.split("/")[1]: {"served": last[key].get("served", 0),
                            "errors": last[key].get("errors", 0),
                            "restarts": restarts.get(key, 0)}
        for key in keys
    }  # fmt: skip
    return {
        "served": sum(w["served"] for w in per_worker.values()),
        "errors": sum(w["errors"] for w in per_worker.values()),
        "restarts": sum(w["restarts"] for w in per_worker.values()),
        "per_worker": per_worker,
    }


def proxy_table(proxies: list[dict | None]) -> dict[str, int]:
    """Proxy address -> live workers, from the proxies' stats (a silent proxy weighs 0 and
    drops out; ranks keep its last address with weight 0 until it answers again)."""
    return {p["address"]: int(p.get("live", 0)) for p in proxies if p is not None}


def proxy_nodes(proxies: list[dict | None]) -> dict[str, str]:
    """Proxy address -> its Ray node id (a rank leaves out its own node's proxy)."""
    return {p["address"]: p["node"] for p in proxies if p is not None and p.get("node")}


class FleetMonitor:
    """Actor body: polls the services' actors in a thread; `summary()` is the newest."""

    def __init__(self, interval_s: float = 2.0):
        self.interval_s = interval_s
        self.services: dict[str, tuple[list, list]] = {}
        self.last: dict[str, dict] = {}  # worker key -> last stats
        self.restarts: dict[str, int] = {}  # worker key -> restarts seen (a new pid)
        self.metrics: dict[str, float] = {}
        self.workers: dict[str, dict] = {}  # "service/index" -> window
        self.tables: dict[str, dict[str, int]] = {}
        self.nodes: dict[str, dict[str, str]] = {}
        self.polled = time.monotonic()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="fleet", daemon=True)
        self.thread.start()

    def add_service(self, name: str, workers: list, proxies: list) -> None:
        with self.lock:
            self.services[name] = (list(workers), list(proxies))

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval_s)
            try:
                self.poll()
            except Exception:  # a poll must never end the monitor
                pass

    def poll(self) -> None:
        """Ask every actor for its stats (a silent one counts as unhealthy)."""
        now = time.monotonic()
        dt, self.polled = now - self.polled, now
        with self.lock:
            services = dict(self.services)
        metrics, workers, tables, nodes = {}, {}, {}, {}
        for name, (handles, proxies) in services.items():
            stats = gather([w.stats.remote() for w in handles], self.interval_s)
            pstats = gather([p.stats.remote() for p in proxies], self.interval_s)
            windows = []
            for index, cur in enumerate(stats):
                key = f"{name}/{index}"
                prev = self.last.get(key)
                windows.append(worker_window(prev, cur, dt))
                workers[key] = windows[-1]
                if cur is not None:
                    if prev is not None and prev.get("pid") != cur.get("pid"):
                        self.restarts[key] = self.restarts.get(key, 0) + 1
                    self.last[key] = cur
            metrics.update(service_metrics(name, windows, pstats))
            tables[name], nodes[name] = proxy_table(pstats), proxy_nodes(pstats)
        with self.lock:
            self.metrics, self.workers, self.tables = metrics, workers, tables
            self.nodes = nodes

    def summary(self) -> dict[str, float]:
        """The newest per-service metrics, `aux/<service>/<name>` -> value."""
        with self.lock:
            return dict(self.metrics)

    def totals(self) -> dict[str, dict]:
        """Per service since the start: served, errors, restarts."""
        with self.lock:
            return {name: totals(name, self.last, self.restarts) for name in self.services}

    def per_worker(self) -> dict[str, dict]:
        with self.lock:
            return dict(self.workers)

    def tables_now(self) -> dict[str, dict]:
        """Per service: `proxies` (proxy address -> live workers) and `nodes` (proxy
        address -> Ray node id); ranks refresh their clients from them."""
        with self.lock:
            return {
                name: {"proxies": dict(table), "nodes": dict(self.nodes.get(name, {}))}
                for name, table in self.tables.items()
            }


def gather(refs: list, timeout_s: float) -> list:
    """Each ref's value, or None where it failed or did not answer within `timeout_s`."""
    import ray

    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    out = []
    for ref in refs:
        try:
            out.append(ray.get(ref) if ref in done else None)
        except Exception:
            out.append(None)
    return out
