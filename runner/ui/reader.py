"""Reads runs' chDB stores in a child process, so `runner ui` never holds a run's store.

chDB has one embedded server per process, on one folder, locked against other processes
(docs/observability.md). The child (`python -m runner.ui.reader`) answers JSON lines on its
pipes: each query names a run's output folder; the child reads a hard-linked snapshot of
its store (`observability.snapshot.snapshot`), taken again when the store gained parts and
the last one is older than `max_age_s`, so a training run keeps writing while it is read.

    reader = StoreReader()
    rows = reader.query("outputs/research/tiny-lm", "SELECT ...", {"run": "tiny-lm"})
    reader.insert("outputs/research/tiny-lm", "platform.run_metrics", rows)   # writes
    reader.close()
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


class ReaderError(Exception):
    """The child could not answer (one line)."""


class StoreReader:
    """The parent's handle on the child; thread-safe (one request at a time)."""

    def __init__(self, max_age_s: float = 2.0):
        self.max_age_s = max_age_s
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _call(self, request: dict) -> list[dict]:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "runner.ui.reader", str(self.max_age_s)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                )  # fmt: skip
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise ReaderError("the store reader process stopped")
        answer = json.loads(line)
        if "error" in answer:
            raise ReaderError(answer["error"])
        return answer["rows"]

    def query(self, folder, sql: str, params: dict | None = None) -> list[dict]:
        """Rows of `sql` on the store of run folder `folder` (a snapshot of it)."""
        return self._call({"op": "query", "folder": str(folder), "sql": sql,
                           "params": params or {}})  # fmt: skip

    def insert(self, folder, table: str, rows: list[dict]) -> int:
        """Write rows into the store itself (the child opens it; tests and demos)."""
        answer = self._call({"op": "insert", "folder": str(folder), "table": table,
                             "rows": rows})  # fmt: skip
        return answer[0]["count"]

    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                if self.proc.stdin:
                    self.proc.stdin.close()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                self.proc = None


class Child:
    """The child side: at most one open store (a snapshot, or a store being written)."""

    def __init__(self, max_age_s: float):
        self.max_age_s = max_age_s
        self.tmp = Path(tempfile.mkdtemp(prefix="runner-ui-"))
        self.open = None  # (key, LocalStore)
        self.snaps: dict[str, tuple[tuple, float, Path]] = {}  # folder -> signature, time, dir
        self.count = 0

    def use(self, key: str, folder: Path):
        from observability.store import LocalStore

        if self.open and self.open[0] == key:
            return self.open[1]
        if self.open:
            self.open[1].close()
            self.open = None
        self.open = (key, LocalStore.open(folder, schema=False))
        return self.open[1]

    def snapshot_of(self, folder: str) -> Path:
        from observability import snapshot, store

        source = store.store_path(folder)
        if not source.is_dir():
            raise FileNotFoundError(f"{source}: no store")
        sig, now = snapshot.signature(source), time.monotonic()
        known = self.snaps.get(folder)
        if known and (known[0] == sig or now - known[1] < self.max_age_s):
            return known[2]
        self.count += 1
        dest = self.tmp / f"s{self.count}" / store.STORE_DIR
        snapshot.snapshot(source, dest)
        if known:
            if self.open and self.open[0] == str(known[2]):
                self.open[1].close()
                self.open = None
            shutil.rmtree(known[2].parent, ignore_errors=True)
        self.snaps[folder] = (sig, now, dest)
        return dest

    def handle(self, request: dict) -> list[dict]:
        if request["op"] == "query":
            snap = self.snapshot_of(request["folder"])
            try:
                return self.use(str(snap), snap).query(request["sql"], request["params"])
            except Exception as err:  # name the run's store, not the snapshot
                from observability.store import store_path

                where = str(store_path(request["folder"]))
                raise RuntimeError(str(err).replace(str(snap), where)) from None
        if request["op"] == "insert":
            from observability.store import LocalStore

            self.snaps.pop(request["folder"], None)
            if self.open:
                self.open[1].close()
                self.open = None
            with LocalStore.open(request["folder"]) as store:  # released: readers snapshot it
                return [{"count": store.insert(request["table"], request["rows"])}]
        raise ValueError(f"unknown op {request['op']!r}")

    def close(self) -> None:
        if self.open:
            self.open[1].close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    child = Child(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
    try:
        for line in sys.stdin:
            try:
                answer = {"rows": child.handle(json.loads(line))}
            except Exception as err:  # one line back to the parent, the child goes on
                text = str(err).strip().splitlines()
                answer = {"error": text[0][:300] if text else type(err).__name__}
            sys.stdout.write(json.dumps(answer, default=str) + "\n")
            sys.stdout.flush()
    finally:
        child.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
