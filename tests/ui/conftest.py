"""A filled run folder (tests/ui/fill.py), a store reader and a running dashboard server."""

from __future__ import annotations

import threading

import pytest

from runner.ui.reader import StoreReader
from runner.ui.server import make_server, url
from tests.ui import fill


@pytest.fixture(scope="session")
def reader():
    r = StoreReader(max_age_s=0)
    yield r
    r.close()


@pytest.fixture(scope="session")
def outputs(tmp_path_factory, reader):
    root = tmp_path_factory.mktemp("outputs")
    fill.fill(root, reader)
    return root


@pytest.fixture
def serve():
    """Start a server on a free loopback port for a source; yields a function -> base URL."""
    servers = []

    def start(source) -> str:
        server = make_server(source, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return url(server)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
