"""The run's telemetry store: chDB in a local run's output folder, or the cluster's ClickHouse.

Both hold the platform schema (`observability/sql/schema.sql`) and
answer the same parameterized SQL (`{team:String}`), so every query (the straggler analysis,
`runner ui`) runs unchanged on a laptop and in a cluster.

    from observability import store
    local = store.LocalStore.open("outputs/research/tiny-lm")     # <dir>/chdb, schema applied
    local.insert_metrics(store.metric_rows(identity, rank=3, step=10, ts=time.time(),
                                           values={"train/step_time_s": 0.21}))
    rows = local.query("SELECT count() AS n FROM platform.run_metrics WHERE run = {run:String}",
                       {"run": "tiny-lm"})
    local.close()

    server = store.ServerStore("http://clickhouse.observability:8123")   # user/key from env
    rows = server.query(same_sql, same_params)

chDB runs ONE embedded server per process, on one folder at a time, and locks that folder
(`status`) against other processes. So a store is written by one process (the driver) and
read by others through a hard-linked snapshot (`snapshot`, `signature`: observability/snapshot.py,
also importable from here), as `runner ui`'s reader (runner.ui.reader) does.
The embedded server's memory worker (which tracks the process's resident memory against
ClickHouse's limits) runs once a second (`SERVER_ARGS`), not at its default pace: the
driver holds the store beside training for a whole run, and on a small machine every
background wake-up is taken from the training workers.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from catalog.errors import first_line
from catalog.labels import ATTEMPT_LABEL, RANK_LABEL, SERVICE_LABEL, TELEMETRY_LABELS

STORE_DIR = "chdb"
RUN_METRICS = "platform.run_metrics"
NCCL_COLLECTIVES = "platform.nccl_collectives"
METRIC_COLUMNS = ("ts", "cluster", "team", "run", "learner", "attempt", "rank", "pod", "node",
                  "worker", "service", "step", "name", "value")  # fmt: skip
"""`platform.run_metrics`' columns, in order: the telemetry label set (catalog.labels) with
the time, step, name and value."""
IDENTITY = tuple(k for k in TELEMETRY_LABELS if k not in (ATTEMPT_LABEL, RANK_LABEL))
"""The string labels of a metric row (`attempt` and `rank` are numbers)."""
TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
_HELD: dict[str, object] = {}  # this process's open store: {"path": ..., "session": ...}
_LOCK = threading.Lock()


class StoreError(Exception):
    """A store could not be opened, written or queried (one line)."""


def chdb_session_module():
    """`chdb.session`. Loading chDB installs ClickHouse's handlers for the fatal signals
    (SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE), which replace Python's faulthandler: a crash
    in native code anywhere in the process (torch, Ray, gloo, chDB) then ends it without a
    word, or, before any chDB session started, hangs it for good (tests/observability/
    test_chdb_faulthandler.py). When faulthandler was on as chDB loaded, it is put back, on
    stderr (the process's own when `sys.stderr` has no file descriptor, as under a capture),
    every thread's stack."""
    import faulthandler

    first = "chdb" not in sys.modules
    from chdb import session

    if first and faulthandler.is_enabled():
        faulthandler.disable()  # back to the handlers before chDB's, then on again
        if (err := stderr_file()) is not None:
            faulthandler.enable(file=err, all_threads=True)
    return session


def stderr_file():
    """`sys.stderr` if it has a file descriptor, else `sys.__stderr__` if that has; None."""
    for file in (sys.stderr, sys.__stderr__):
        try:
            file.fileno()
            return file
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            continue
    return None


def ts_text(ts: float | datetime | str) -> str:
    """A DateTime64(3) value (UTC) from epoch seconds, a datetime or a string."""
    if isinstance(ts, str):
        return ts
    if not isinstance(ts, datetime):
        ts = datetime.fromtimestamp(float(ts), UTC)
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def metric_rows(identity: dict, rank: int, step: int, ts, values: dict[str, float]) -> list[dict]:
    """`platform.run_metrics` rows of one rank's step: one per finite metric (name -> value).
    `identity` holds labels of the label set (catalog.labels.telemetry_labels: cluster, team,
    run and optionally learner, attempt, pod, node, worker, service); missing ones are ""
    (attempt 0)."""
    base = {k: str(identity.get(k) or "") for k in IDENTITY}
    base.update(ts=ts_text(ts), attempt=int(identity.get(ATTEMPT_LABEL) or 0), rank=int(rank),
                step=int(step))  # fmt: skip
    return [
        {**base, **service_of(name), "name": name, "value": float(v)}
        for name, v in sorted(values.items())
        if not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    ]


def service_of(name: str) -> dict:
    """The `service` label a metric's name implies: `aux/<service>/<field>` is that aux
    service's figure (rank 0 reports it), whatever process sent the row; {} otherwise."""
    parts = name.split("/")
    return {SERVICE_LABEL: parts[1]} if len(parts) == 3 and parts[0] == "aux" and parts[1] else {}


def json_each_row(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)


def parse_rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line]


def store_path(folder: str | Path) -> Path:
    """The chDB folder of a run's output folder (or the folder itself when it is one)."""
    folder = Path(folder)
    return folder if folder.name == STORE_DIR else folder / STORE_DIR


def schema_statements() -> list[str]:
    from observability import clickhouse  # the platform schema, one place

    return clickhouse.statements(clickhouse.SCHEMA.read_text())


SERVER_ARGS = "?memory_worker_period_ms=1000"
"""The embedded server's start-up settings, appended to its folder (chDB's connection string)."""


class LocalStore:
    """A chDB database in a folder; the process's one embedded server while open."""

    def __init__(self, session, path: Path):
        self.session, self.path = session, path

    @classmethod
    def open(cls, folder: str | Path, schema: bool = True) -> LocalStore:
        """Open (create) the store of a run's output folder; with `schema`, apply the schema
        (idempotent). Raises StoreError when this process holds another store or another
        process holds this one."""
        chdb_session = chdb_session_module()
        path = store_path(folder)
        with _LOCK:
            held = _HELD.get("path")
            if held and held != str(path):
                raise StoreError(f"{path}: this process already has the chDB store {held} open")
            path.mkdir(parents=True, exist_ok=True)
            try:
                session = chdb_session.Session(f"{path}{SERVER_ARGS}")
            except Exception as err:
                raise StoreError(
                    f"{path}: cannot open the chDB store (another process, such as the run's "
                    f"driver, may hold it: read a snapshot): {first_line(err, limit=300)}"
                ) from None
            _HELD.update(path=str(path))
        store = cls(session, path)
        try:
            for statement in schema_statements() if schema else ():
                store.execute(statement)
        except BaseException:
            store.close()
            raise
        return store

    def execute(self, sql: str, params: dict | None = None) -> str:
        try:
            result = self.session.query(sql, "JSONEachRow", params=params or {})
        except Exception as err:
            raise StoreError(f"{self.path}: {first_line(err, limit=300)}") from None
        return result.bytes().decode()

    def query(self, sql: str, params: dict | None = None) -> list[dict]:
        """The rows of a parameterized query (`{name:Type}` bound by chDB)."""
        return parse_rows(self.execute(sql, params))

    def insert(self, table: str, rows: Iterable[dict]) -> int:
        """Insert rows (dicts of the table's columns) into `table`; the count."""
        body = json_each_row(rows)
        if body:
            self.execute(f"INSERT INTO {table_name(table)} FORMAT JSONEachRow\n{body}")
        return body.count("\n")

    def insert_metrics(self, rows: Iterable[dict]) -> int:
        """Insert `platform.run_metrics` rows (`metric_rows`, or driver.metrics.clickhouse's)."""
        return self.insert(RUN_METRICS, rows)

    def close(self) -> None:
        with _LOCK:
            if self.session is not None:
                self.session.close()
                self.session = None
                _HELD.clear()

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ServerStore:
    """The same calls against a ClickHouse server's HTTP interface. Credentials come from
    the environment only (`user_env`, `password_env`: a Secret mounted as env)."""

    def __init__(self, url: str, user_env: str = "CLICKHOUSE_USER",
                 password_env: str = "CLICKHOUSE_PASSWORD", timeout_s: float = 30.0):  # fmt: skip
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StoreError(f"--clickhouse: {url!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise StoreError("--clickhouse: credentials go in the environment, not the URL")
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.headers = {}
        if os.environ.get(user_env):
            self.headers["X-ClickHouse-User"] = os.environ[user_env]
        if os.environ.get(password_env):
            self.headers["X-ClickHouse-Key"] = os.environ[password_env]

    def execute(self, sql: str, params: dict | None = None, body: str = "") -> str:
        query = {"default_format": "JSONEachRow"}
        query.update({f"param_{k}": str(v) for k, v in (params or {}).items()})
        data = (sql + ("\n" + body if body else "")).encode()
        url = f"{self.url}/?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, data=data, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read().decode()
        except Exception as err:
            raise StoreError(f"{self.url}: {first_line(err, limit=300)}") from None

    def query(self, sql: str, params: dict | None = None) -> list[dict]:
        return parse_rows(self.execute(sql, params))

    def insert(self, table: str, rows: Iterable[dict]) -> int:
        body = json_each_row(rows)
        if body:
            self.execute(f"INSERT INTO {table_name(table)} FORMAT JSONEachRow", body=body)
        return body.count("\n")

    def insert_metrics(self, rows: Iterable[dict]) -> int:
        return self.insert(RUN_METRICS, rows)


def table_name(table: str) -> str:
    """`database.table`, checked: the one name pasted into an INSERT."""
    if not TABLE.match(table):
        raise StoreError(f"{table!r} is not a table name (database.table)")
    return table
