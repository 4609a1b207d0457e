"""The dashboard's HTTP server (standard library): the page, its static files and the JSON API.

    server = make_server(source, host="127.0.0.1", port=0)   # port 0: the OS picks one
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(url(server))

API (docs/ui.md): `GET /api/runs`, `GET /api/run?team=T&run=R[&points=&ranks=&window_s=&windows=]`,
`GET /api/logs?team=T&run=R[&rank=&pod=&node=&learner=&since=&until=&level=&text=&limit=]`,
`GET /api/verdict?team=T&run=R`, `GET /api/health`. Parameters are validated against
`LIMITS` (400 with a one-line JSON error otherwise); names are bound as SQL parameters,
never pasted into SQL.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import mimetypes
import re
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from runner.ui.sources import Options

STATIC = Path(__file__).resolve().parent / "static"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
LIMITS = {"points": (10, 2000), "ranks": (1, 256), "window_s": (5, 3600), "windows": (1, 1000)}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
log = logging.getLogger("runner.ui")


class BadRequest(Exception):
    pass


def options(query: dict[str, list[str]]) -> Options:
    """Options from a request's query string, each within LIMITS."""
    values = {}
    for key, (low, high) in LIMITS.items():
        if key in query:
            text = query[key][0]
            if not text.isdigit() or not low <= int(text) <= high:
                raise BadRequest(f"{key}: an integer from {low} to {high}, not {text[:20]!r}")
            values[key] = int(text)
    return Options(**values)


def name(query: dict[str, list[str]], key: str) -> str:
    value = (query.get(key) or [""])[0]
    if not NAME.match(value):
        raise BadRequest(f"{key}: letters, digits, '.', '_', '-' (at most 100), not {value[:20]!r}")
    return value


class Handler(BaseHTTPRequestHandler):
    server_version = "runner-ui"
    source = None  # set by make_server

    def log_message(self, fmt: str, *args) -> None:
        log.debug(fmt, *args)

    def send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, data) -> None:
        body = json.dumps(data, default=str, allow_nan=False).encode()
        self.send(status, body, "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        allowed = getattr(self.server, "allowed_hosts", None)
        if allowed and (self.headers.get("Host") or "").lower() not in allowed:
            self.send_json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return  # a page of another site reaching loopback through DNS rebinding
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, max_num_fields=20)
        try:
            if url.path.startswith("/api/"):
                self.api(url.path, query)
            else:
                self.static(url.path)
        except BadRequest as err:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except Exception as err:  # a store or cluster failure: one line to the page
            log.warning("%s: %s", url.path, err)
            text = str(err).strip().splitlines()
            self.send_json(HTTPStatus.BAD_GATEWAY, {"error": text[0][:300] if text else "error"})

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
        if path in ("/", "/index.html"):
            file = STATIC / "index.html"
        elif path.startswith("/static/"):
            file = (STATIC / path.removeprefix("/static/")).resolve()
        else:
            file = STATIC / "missing"
        if not file.is_file() or STATIC not in file.parents:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        self.send(HTTPStatus.OK, file.read_bytes(), kind)


def clean(value):
    """JSON-safe: NaN and infinities become None (the page draws gaps)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def make_server(source, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"source": source})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    if ipaddress.ip_address(server.server_address[0]).is_loopback:
        port = server.server_address[1]
        names = ("127.0.0.1", "localhost", "[::1]", server.server_address[0])
        server.allowed_hosts = {f"{n}:{port}" for n in names}
    return server


def url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
