"""Shared fixtures of the driver tests: config paths and one embedded Ray per module."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "runs/train/tiny-lm.yaml")
TINY_DIT = str(ROOT / "runs/train/tiny-dit.yaml")


def embedded_ray(num_cpus: int):
    """An embedded Ray of `num_cpus` for a module's tests (a fixture's body: yields ray)."""
    import os

    import ray

    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=True, log_to_driver=False,
             logging_level="WARNING")  # fmt: skip
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_local():
    """One embedded Ray for every test of a module (start-up is the slow part)."""
    yield from embedded_ray(2)


@pytest.fixture(scope="module")
def ray_local_4():
    """One embedded Ray of 4 CPUs for a module's runs (up to 4 training workers)."""
    yield from embedded_ray(4)


@pytest.fixture
def channel():
    """A run's channel served on the loopback address (driver.channel)."""
    from driver.channel import DriverChannel
    from driver.channel.state import RunChannel

    served = DriverChannel.start(RunChannel())
    yield served
    served.close()


@pytest.fixture
def client(channel):
    """Rank 1's client of `channel`."""
    worker = channel.address.connect(rank=1)
    yield worker
    worker.close()


class Recorder(http.server.BaseHTTPRequestHandler):
    """Records every POST (path, body) and answers `status`: a stand-in ClickHouse."""

    status = 200
    received: list[tuple[str, bytes]] = []

    def do_POST(self):  # noqa: N802 (the http.server API)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.received.append((self.path, body))
        self.send_response(Recorder.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A local HTTP server recording POSTs; its base URL."""
    Recorder.received, Recorder.status = [], 200
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(autouse=True)
def _no_store_left_open():
    """A test that leaves a chDB store open fails here: chDB is one embedded server per
    process, so every later run in the pytest process would write its rows elsewhere (its
    driver's StoreWriter drops them) and fail far from the cause."""
    yield
    from observability import store

    held = store._HELD.get("path")
    assert not held, f"the test left the chDB store {held} open (close its Progress/RunMetrics)"
