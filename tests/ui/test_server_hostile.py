"""`runner ui`'s server against hostile and careless peers: bounded connections, time per
request and query fields; 400/404 as one line of JSON naming no file of the installation;
no thread held by an idle connection; a store that hangs or fails answered 504/503/502; and
200 cases of the hostile-peer suite (tests/peers; 1,000 in scripts/bench/hostile_http_bench.py)
against a server in a process of its own."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import replace

import pytest

from runner.ui import server as module
from tests.peers.suite import LEAKS, check_suite


class Source:
    """A source with one run; `hang` makes its calls wait, `fail` makes them raise."""

    def __init__(self):
        self.hang, self.fail = threading.Event(), False
        self.release = threading.Event()

    def runs(self) -> list[dict]:
        if self.hang.is_set():
            self.release.wait(30)
        if self.fail:
            raise OSError("the store at outputs/x is gone")
        return [{"team": "t", "run": "r"}]

    def run(self, team, name, opts):
        return {"run": {"team": team, "run": name}} if name == "r" else None


@pytest.fixture
def ui(monkeypatch):
    """Start a server with small limits; yields (source, port, server)."""
    monkeypatch.setattr(module, "SERVER", replace(module.SERVER, request_s=1.0, connections=4))
    monkeypatch.setattr(module, "SOURCE_S", 0.5)
    source = Source()
    server = module.make_server(source, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield source, server.server_address[1], server
    source.release.set()
    server.shutdown()
    server.server_close()


def exchange(port: int, data: bytes) -> tuple[int, dict | None]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert not any(leak.encode() in reply for leak in LEAKS), reply[:300]
    return int(head.split()[1]), json.loads(body) if body else None


def get(port: int, path: str, **headers) -> tuple[int, dict | None]:
    head = {"Host": f"127.0.0.1:{port}", **headers}
    text = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return exchange(port, text.encode("latin-1") + b"\r\n")


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/api/run?team=t&run=r&" + "&".join(f"x{i}=1" for i in range(21)), 400,
         "more than 20 query fields"),
        ("/api/run?team=t&run=r&points=\u00b2", 400, "points: an integer from 10 to 2000"),
        ("/api/run?team=t&run=r&points=" + "9" * 40, 400, "points: an integer from 10 to 2000"),
        ("/api/run?team=t&run=%00", 400, "run: letters, digits"),
        ("/api/run?team=t&run=nope", 404, "no run t/nope"),
        ("/static/" + "a" * 5000, 404, "not found"),
        ("/static/%00", 404, "not found"),
        ("/static/\x00", 404, "not found"),
        ("/static/../server.py", 404, "not found"),
        ("/api/nope", 404, "no API /api/nope"),
    ],
    ids=["fields", "superscript", "long-number", "nul-name", "no-run", "long-file", "pct-nul",
         "nul", "traversal", "no-api"],
)  # fmt: skip
def test_bad_requests_are_one_line_of_json(ui, path, status, error):
    _, port, server = ui
    got, body = get(port, path)
    assert (got, list(body)) == (status, ["error"]) and body["error"].startswith(error), body
    assert server.counts["handler error"] == 0


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST /api/runs HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 501),
        (b"GET /api/runs\r\n\r\n", 400),  # HTTP/0.9: refused, with a status line
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nX: " + b"v" * 20_000 + b"\r\n\r\n", 431),
        (b"\x16\x03\x01\x02\x00\r\n\r\n", 400),
    ],
    ids=["post", "http-0.9", "long-line", "long-header", "tls"],
)
def test_broken_requests_are_refused_in_json(ui, data, status):
    _, port, _ = ui
    got, body = exchange(port, data)
    assert got == status and list(body) == ["error"] and "\n" not in body["error"]


def test_an_idle_connection_is_closed_after_the_request_time(ui):
    _, port, server = ui
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the server, without a reply
        assert time.monotonic() - started < 10
    deadline = time.monotonic() + 5
    while server.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.open_connections == 0 and server.counts["timeout"] == 1


def test_connections_beyond_the_limit_are_429(ui):
    _, port, server = ui
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        while server.open_connections < 4:
            time.sleep(0.01)
        status, body = get(port, "/api/health")
        assert status == 429 and body == {"error": "too many connections"}
    finally:
        for sock in idle:
            sock.close()


def test_a_store_that_hangs_is_504_then_503_and_one_that_fails_is_502(ui, monkeypatch):
    source, port, _ = ui
    source.hang.set()
    assert get(port, "/api/runs") == (504, {"error": "the store did not answer within 0 s"})
    for _ in range(module.SOURCE_CALLS - 1):  # every call to the store is now waiting
        assert get(port, "/api/runs")[0] == 504
    assert get(port, "/api/runs") == (
        503, {"error": "the store is busy with other requests; retry later"})  # fmt: skip
    source.hang.clear()
    source.release.set()
    source.fail = True
    deadline = time.monotonic() + 10
    while get(port, "/api/runs")[0] == 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(port, "/api/runs") == (502, {"error": "the store at outputs/x is gone"})


def test_hostile_peers():
    """200 cases of the hostile-peer suite (1,000: scripts/bench/hostile_http_bench.py)."""
    check_suite("ui", count=200)
