"""runner.boundedhttp and runner.boundedhandler, the servers of Warden's gateway and `runner
ui`: connections per address, a handler that raises, an accept loop that ends, replies to
peers that read nothing, connections that send nothing."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from runner.boundedhandler import BoundedHandler, Limits
from runner.boundedhttp import BoundedServer, serve_in_thread


class Handler(BoundedHandler):
    server_version = "test"

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/raise":
            raise RuntimeError("a bug")
        if self.path == "/big":
            self.send_json(200, {"x": "y" * 8_000_000})
            return
        self.send_json(200, {"ok": True})


@pytest.fixture
def serve():
    servers = []

    def start(limits: Limits) -> BoundedServer:
        server = BoundedServer(("127.0.0.1", 0), Handler, limits)
        serve_in_thread(server, "test")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def ask(port: int, path: str, source: str = "127.0.0.1", keep: bool = False) -> bytes:
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(30)
        sock.connect(("127.0.0.1", port))
        extra = "Connection: keep-alive\r\n" if keep else ""
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
        return sock.recv(65536).split(b"\r\n", 1)[0]


def wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


def test_connections_of_one_address_are_bounded_not_those_of_others(serve):
    server = serve(Limits(connections=8, per_peer=2, request_s=5))
    port = server.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        wait_for(lambda: server.open_connections == 2)
        assert ask(port, "/") == b"HTTP/1.1 429 Too Many Requests"
        assert ask(port, "/", source="127.0.0.2") == b"HTTP/1.0 200 OK"  # another address
        assert server.counts["refused connection"] == 1
    finally:
        for sock in held:
            sock.close()


def test_a_handler_that_raises_is_counted_and_the_server_serves_on(serve):
    server = serve(Limits())
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /raise HTTP/1.1\r\n\r\n")
        assert sock.recv(100) == b""  # the connection ends; no traceback reaches the peer
    assert server.counts["handler error"] == 1
    assert ask(port, "/") == b"HTTP/1.0 200 OK"
    wait_for(lambda: server.open_connections == 0)


def test_the_accept_loop_is_started_again_if_it_ends_by_an_exception(serve):
    server = serve(Limits())
    port = server.server_address[1]
    real, calls = server._handle_request_noblock, []

    def once():
        if not calls:
            calls.append(1)
            raise OSError("accept failed")
        real()

    server._handle_request_noblock = once
    assert ask(port, "/") == b"HTTP/1.0 200 OK"
    assert server.counts["restarts"] == 1


def test_a_peer_that_reads_nothing_loses_its_reply_after_reply_s(serve):
    server = serve(Limits(reply_s=1.0))
    port = server.server_address[1]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        wait_for(lambda: server.counts["reply not sent"] == 1)
    wait_for(lambda: server.open_connections == 0)


def connection_threads() -> list:
    """The server's connection threads (socketserver's, by their target's name): counting
    every thread of the process would count other tests' background threads too."""
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


def test_a_connection_that_sends_nothing_holds_a_thread_for_request_s_only(serve):
    """The standard library's handler waits for a request line for ever (no timeout)."""
    server = serve(Limits(request_s=1.0))
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        wait_for(lambda: server.open_connections == 1)
        assert len(connection_threads()) == 1
        assert sock.recv(100) == b""  # closed by the server, nothing said
    wait_for(lambda: server.open_connections == 0 and not connection_threads())
    assert server.counts["timeout"] == 1


def test_limits_are_the_documented_ones():
    from runner.ui.server import SERVER
    from warden.gateway import LIMITS

    assert (LIMITS.connections, LIMITS.per_peer, LIMITS.request_s) == (64, 32, 10.0)
    assert (SERVER.connections, SERVER.per_peer, SERVER.request_s) == (32, None, 15.0)
    assert Limits().header_bytes == 16 * 1024


def test_a_closed_server_leaves_no_thread_behind():
    def mine() -> list:  # its serving loop, its closer, its connections: not other tests'
        return [t for t in threading.enumerate() if t not in before]

    before = set(threading.enumerate())
    server = BoundedServer(("127.0.0.1", 0), Handler, Limits())
    serve_in_thread(server, "test")
    assert ask(server.server_address[1], "/") == b"HTTP/1.0 200 OK"
    assert mine()
    server.shutdown()
    server.server_close()
    wait_for(lambda: not mine())


def test_sockets_past_select_s_limit_are_watched():
    """A busy process holds descriptors past 1023, which select() refuses: the lingering
    connections are watched with poll (a whole-suite run failed here)."""
    import os
    import resource
    import socket

    from runner.boundedhttp import _readable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip("this machine allows fewer than 1200 descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        a, b = socket.socketpair()
        assert a.fileno() > 1023
        assert _readable({a: 0}, 0.01) == set()
        b.sendall(b"x")
        assert _readable({a: 0}, 5) == {a}
        a.close(), b.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
