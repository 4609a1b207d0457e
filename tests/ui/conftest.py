"""A filled run folder (tests/ui/fill.py), a store reader and a running dashboard server."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


class ClickHouseStandIn(BaseHTTPRequestHandler):
    """ClickHouse's HTTP interface for these tests: the POST body is the query, `param_*`
    bind its parameters; answered by a chDB store (the same engine)."""

    reader = folder = None
    seen: list[dict] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(
            urllib.parse.urlsplit(self.path).query, keep_blank_values=True
        )
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        params = {
            k.removeprefix("param_"): v[0] for k, v in query.items() if k.startswith("param_")
        }
        self.seen.append({"user": self.headers.get("X-ClickHouse-User"), "params": params})
        try:
            if body.startswith("INSERT INTO "):
                table, _, data = body.removeprefix("INSERT INTO ").partition(
                    " FORMAT JSONEachRow\n"
                )
                rows = [json.loads(line) for line in data.splitlines() if line]
                self.reader.insert(self.folder, table, rows)
                text = ""
            else:
                text = "".join(
                    json.dumps(r) + "\n" for r in self.reader.query(self.folder, body, params)
                )
            status = 200
        except Exception as err:
            text, status = str(err), 500
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def clickhouse(outputs, reader):
    folder = outputs / "research" / "straggly"
    handler = type("H", (ClickHouseStandIn,), {"reader": reader, "seen": [], "folder": folder})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()
