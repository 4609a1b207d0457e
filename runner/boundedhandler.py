"""The request side of runner.boundedhttp's servers: a handler that reads a request
against one deadline and one byte budget, and answers errors as one line of JSON.

    class Handler(BoundedHandler):
        body_limit = 64 * 1024          # bytes of body it reads at most
        def do_POST(self):
            data = self.read_body(n)    # RequestTimeout: not in time; EOFError: short
            self.send_json(200, {...})

Per request (the wait for it on an idle connection included) the peer has
`Limits.request_s` seconds and `header_bytes` + `body_limit` bytes; a slower request is
answered 408, a longer request line 414, larger headers 431, and the connection closed. A
reply must be sent within `Limits.reply_s`. HTTP/0.9 is refused; the standard library's
HTML error pages are JSON here (`{"error": "..."}`), and the Server header names no Python.
"""

from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

log = logging.getLogger("runner.boundedhttp")
MAX_LINE = 65536  # the request line, as http.server bounds it


@dataclass(frozen=True)
class Limits:
    connections: int = 64
    """Open connections at once; one more is answered 429 and closed."""
    per_peer: int | None = None
    """Open connections of one address (None: only `connections`)."""
    request_s: float = 10.0
    """Time for a request to arrive, idle wait before it included."""
    reply_s: float = 30.0
    """Time to send a reply."""
    header_bytes: int = 16 * 1024
    """Bytes of the request line and headers of one request."""


class TooLarge(Exception):
    """A request of more bytes than its budget."""


class RequestTimeout(TimeoutError):
    """A request that did not arrive within `Limits.request_s`."""


class _DeadlineSocket(io.RawIOBase):
    """A socket's receiving side read against a deadline and a byte budget (set by
    `start` per request); outside a read the socket's timeout is the reply's."""

    def __init__(self, sock, reply_s: float):
        self.sock, self.reply_s = sock, reply_s
        self.deadline, self.left, self.received = 0.0, 0, 0

    def start(self, seconds: float, budget: int) -> None:
        self.deadline, self.left = time.monotonic() + seconds, budget
        self.received = 0

    def extend(self, budget: int) -> None:
        self.left += budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.left <= 0:
            raise TooLarge("request larger than allowed")
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout("request not received in time")
        view = memoryview(buffer)[: self.left]
        self.sock.settimeout(remaining)
        try:
            count = self.sock.recv_into(view)
        except TimeoutError:
            raise RequestTimeout("request not received in time") from None
        finally:
            self.sock.settimeout(self.reply_s)
        self.left -= count
        self.received += count
        return count


class _Writer(io.RawIOBase):
    """The reply side: every write sent whole (within the socket's timeout, the reply's)."""

    def __init__(self, sock):
        self.sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sock.sendall(data)
        return len(data)


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler under its server's `Limits`; `body_limit` bytes of body at most."""

    body_limit = 0
    sys_version = ""  # the Server header names no Python version
    error_content_type = "application/json"

    def setup(self) -> None:
        limits: Limits = self.server.limits
        self.connection = self.request
        self.connection.settimeout(limits.reply_s)
        self.raw = _DeadlineSocket(self.connection, limits.reply_s)
        self.rfile = io.BufferedReader(self.raw, 4096)
        self.wfile = _Writer(self.connection)

    def handle_one_request(self) -> None:
        limits: Limits = self.server.limits
        self.raw.start(limits.request_s, limits.header_bytes)
        self.command, self.request_version, self.requestline = "", "HTTP/0.9", ""
        self.raw_requestline = b""
        try:
            self.raw_requestline = self.rfile.readline(MAX_LINE + 1)
            if not self.raw_requestline:
                self.close_connection = True
                return
            if len(self.raw_requestline) > MAX_LINE:
                self.send_error(414, "request line too long")
                return
            if not self.parse_request():
                return
            if self.request_version == "HTTP/0.9":
                self.send_error(400, "HTTP/0.9 requests are not served")
                return
            self.raw.extend(self.body_limit)
            method = getattr(self, f"do_{self.command}", None)
            if method is None:
                self.send_error(501, f"method {self.command[:20]!r} not supported")
                return
            method()
            self.wfile.flush()
        except RequestTimeout:
            self._give_up("timeout", 408, "request not received in time")
        except TooLarge:
            if self.raw_requestline:
                self._give_up("too large", 431, "request headers too large")
            else:
                self._give_up("too large", 414, "request line too long")
        except (TimeoutError, ConnectionError):  # the reply could not be sent: drop it
            self.server.count("reply not sent")
            self.close_connection = True

    def _give_up(self, reason: str, status: int, message: str) -> None:
        self.server.count(reason)
        self.close_connection = True
        if self.raw.received:  # the peer sent something: tell it why, if it listens
            try:
                self.send_error(status, message)
            except OSError:
                pass

    def version_string(self) -> str:
        return self.server_version

    def read_body(self, length: int) -> bytes:
        """`length` bytes of body (the caller checked it against `body_limit`);
        RequestTimeout when they do not arrive in time, EOFError when the peer sent fewer."""
        data = self.rfile.read(length)
        if len(data) < length:
            raise EOFError(f"body of {len(data)} bytes, not the {length} announced")
        return data

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """One line of JSON, and the connection closed (with a status line even for a
        request too broken to have a version)."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        text = message or self.responses.get(code, ("error",))[0]
        self.send_json(code, {"error": text.splitlines()[0][:300] if text else "error"},
                       close=True)  # fmt: skip

    def send_json(self, status: int, data, headers: dict | None = None, close=False) -> None:
        body = json.dumps(data, default=str, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if close or status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:  # refusals are counted, not printed
        log.debug(fmt, *args)
