"""`DevServer.start` returns once the frontend is healthy, not when its port opens."""

from __future__ import annotations

import socket

from warden.devserver import DevServer


def test_a_listener_that_is_not_a_healthy_frontend_is_not_ready():
    with socket.socket() as sock:  # listens, answers nothing
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        server = DevServer(port=sock.getsockname()[1])
        assert server.listening() and not server.healthy(timeout_s=2)


def test_nothing_listening_is_not_ready():
    server = DevServer()
    assert not server.listening() and not server.healthy(timeout_s=2)


def test_a_started_server_is_healthy_at_once():
    with DevServer() as server:
        assert server.healthy(timeout_s=10)
