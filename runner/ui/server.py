"""The dashboard's HTTP server (standard library): the page, its static files and the JSON API.

    server = make_server(source, host="127.0.0.1", port=0)   # port 0: the OS picks one
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(url(server))

API (docs/ui.md): `GET /api/runs`, `GET /api/run?team=T&run=R[&points=&ranks=&window_s=&windows=]`,
`GET /api/logs?team=T&run=R[&rank=&pod=&node=&learner=&since=&until=&level=&text=&limit=]`,
`GET /api/verdict?team=T&run=R`, `GET /api/health`. Parameters are validated against
`LIMITS` (400 with a one-line JSON error otherwise, also for more than MAX_FIELDS query
fields); names are bound as SQL
parameters, never pasted into SQL. Every error is one line of JSON naming no file of the
installation: 400, 403, 404, 408, 429, 431, 501; 502 when the store or the cluster failed,
503 when SOURCE_CALLS calls are already waiting on it, 504 when it did not answer within
SOURCE_S. The server is runner.boundedhttp's (SERVER: connections, time and bytes per
request bounded), so an idle or slow connection holds a thread at most its `request_s`.
"""

from __future__ import annotations

import ipaddress
import logging
import mimetypes
import re
import urllib.parse
from http import HTTPStatus
from pathlib import Path
from threading import BoundedSemaphore, Event, Thread

from runner.boundedhandler import BoundedHandler, Limits
from runner.boundedhttp import BoundedServer
from runner.ui.sources import Options

STATIC = Path(__file__).resolve().parent / "static"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
LIMITS = {"points": (10, 2000), "ranks": (1, 256), "window_s": (5, 3600), "windows": (1, 1000)}
MAX_FIELDS = 20  # query fields of one request
SERVER = Limits(connections=32, request_s=15.0, reply_s=30.0)
SOURCE_S = 60.0  # the longest wait for the store or the cluster
SOURCE_CALLS = 4  # calls to the source at once; one more waits for none (503)
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
log = logging.getLogger("runner.ui")


class BadRequest(Exception):
    pass


class SourceFailed(Exception):
    """The store or the cluster failed (502), was busy (503) or did not answer (504)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Timed:
    """A source whose every call runs in a thread of its own, at most SOURCE_CALLS at once,
    and is waited for at most SOURCE_S: a store that hangs holds at most SOURCE_CALLS
    (daemon) threads, never the server's."""

    def __init__(self, source):
        self.source = source
        self.calls = BoundedSemaphore(SOURCE_CALLS)

    def __getattr__(self, name: str):
        method = getattr(self.source, name)
        if name == "close" or not callable(method):
            return method
        return lambda *args: self.call(method, *args)

    def call(self, method, *args):
        if not self.calls.acquire(blocking=False):
            raise SourceFailed(503, "the store is busy with other requests; retry later")
        box: dict = {}
        done = Event()

        def work() -> None:
            try:
                box["value"] = method(*args)
            except Exception as err:  # noqa: BLE001 (reported below, one line)
                box["error"] = err
            finally:
                self.calls.release()
                done.set()

        Thread(target=work, name="ui-source", daemon=True).start()
        if not done.wait(SOURCE_S):
            raise SourceFailed(504, f"the store did not answer within {SOURCE_S:.0f} s")
        if "error" in box:  # a store or cluster failure: one line to the page
            log.warning("%s: %s", name_of(method), box["error"])
            text = str(box["error"]).strip().splitlines()
            raise SourceFailed(502, text[0][:300] if text else "error")
        return box["value"]


def name_of(method) -> str:
    return getattr(method, "__name__", "source")


def options(query: dict[str, list[str]]) -> Options:
    """Options from a request's query string, each within LIMITS."""
    values = {}
    for key, (low, high) in LIMITS.items():
        if key in query:
            text = query[key][0]
            if not (text.isascii() and text.isdigit() and len(text) < 10) or not (
                low <= int(text) <= high
            ):
                raise BadRequest(f"{key}: an integer from {low} to {high}, not {text[:20]!r}")
            values[key] = int(text)
    return Options(**values)


def name(query: dict[str, list[str]], key: str) -> str:
    value = (query.get(key) or [""])[0]
    if not NAME.match(value):
        raise BadRequest(f"{key}: letters, digits, '.', '_', '-' (at most 100), not {value[:20]!r}")
    return value


class Handler(BoundedHandler):
    server_version = "runner-ui"
    source = None  # set by make_server

    def send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, data, headers: dict | None = None, close=False) -> None:
        super().send_json(status, data, {**HEADERS, **(headers or {})}, close)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        allowed = getattr(self.server, "allowed_hosts", None)
        if allowed and (self.headers.get("Host") or "").lower() not in allowed:
            self.send_json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return  # a page of another site reaching loopback through DNS rebinding
        url = urllib.parse.urlsplit(self.path)
        try:
            query = parse_query(url.query)
            if url.path.startswith("/api/"):
                self.api(url.path, query)
            else:
                self.static(url.path)
        except BadRequest as err:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except SourceFailed as err:
            self.send_json(err.status, {"error": str(err)})

    def api(self, path: str, query: dict) -> None:
        if path == "/api/health":
            self.send_json(HTTPStatus.OK, {"ok": True})
        elif path == "/api/runs":
            self.send_json(HTTPStatus.OK, {"runs": self.source.runs()})
        elif path in ("/api/logs", "/api/verdict"):
            self.post_mortem(path, query)
        elif path == "/api/run":
            team, run, opts = name(query, "team"), name(query, "run"), options(query)
            found = self.source.run(team, run, opts)
            if found is None:
                self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no run {team}/{run}"})
            else:
                self.send_json(HTTPStatus.OK, clean(found))
        else:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no API {path}"})

    def post_mortem(self, path: str, query: dict) -> None:
        """A run's log lines (`/api/logs`, runner.ui.logview) or its failure analysis
        (`/api/verdict`, a local run's; runner.diagnose)."""
        from runner.ui import logview

        team, run = name(query, "team"), name(query, "run")
        try:
            opts = logview.log_options(query) if path == "/api/logs" else None
        except logview.BadRequest as err:
            raise BadRequest(str(err)) from None
        found = self.source.logs(team, run, opts) if opts else self.source.verdict(team, run)
        if found is None:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no {path[5:]} for run {team}/{run}"})
        else:
            self.send_json(HTTPStatus.OK, clean(found))

    def static(self, path: str) -> None:
        body = static_file(path)
        if body is None:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        file, data = body
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        self.send(HTTPStatus.OK, data, kind)


def parse_query(text: str) -> dict[str, list[str]]:
    """A request's query fields; BadRequest for more than MAX_FIELDS."""
    try:
        return urllib.parse.parse_qs(text, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise BadRequest(f"more than {MAX_FIELDS} query fields") from None


def static_file(path: str) -> tuple[Path, bytes] | None:
    """(file, bytes) of a page file under STATIC; None for anything else (a path outside
    it, a name the system refuses, a folder)."""
    if path in ("/", "/index.html"):
        path = "/static/index.html"
    if not path.startswith("/static/"):
        return None
    try:
        file = (STATIC / path.removeprefix("/static/")).resolve()
        if STATIC not in file.parents or not file.is_file():
            return None
        return file, file.read_bytes()
    except (OSError, ValueError, RuntimeError):  # a NUL, a name too long, a symlink loop
        return None


def clean(value):
    """JSON-safe: NaN and infinities become None (the page draws gaps)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def make_server(source, host: str = "127.0.0.1", port: int = 0) -> BoundedServer:
    handler = type("BoundHandler", (Handler,), {"source": Timed(source)})
    server = BoundedServer((host, port), handler, SERVER)
    if ipaddress.ip_address(server.server_address[0]).is_loopback:
        port = server.server_address[1]
        names = ("127.0.0.1", "localhost", "[::1]", server.server_address[0])
        server.allowed_hosts = {f"{n}:{port}" for n in names}
    return server


def url(server: BoundedServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
