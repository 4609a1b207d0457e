"""The secret-maker (kustomize/bases/platform-secrets/make_secrets.py) against a small fake
Kubernetes API on a local port: it creates what is missing, copies where asked, never
changes a Secret that exists, and exits 1 on an API error."""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.kustomize.conftest import ROOT

SCRIPT = ROOT / "kustomize/bases/platform-secrets/make_secrets.py"


def load_script():
    spec = importlib.util.spec_from_file_location("make_secrets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeApi(ThreadingHTTPServer):
    """Secrets by (namespace, name); `fail` makes every request answer 403."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.secrets: dict[tuple[str, str], dict] = {}
        self.fail = False
        self.tokens: list[str | None] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def log_message(self, *args):  # quiet
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.tokens.append(self.headers.get("Authorization"))
        if self.server.fail:
            return self._reply(403, {})
        _, _, _, ns, _, name = self.path.strip("/").split("/")
        found = self.server.secrets.get((ns, name))
        self._reply(200, found) if found else self._reply(404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ns = self.path.strip("/").split("/")[3]
        key = (ns, body["metadata"]["name"])
        if key in self.server.secrets:
            return self._reply(409, {})
        self.server.secrets[key] = body
        self._reply(201, body)


@pytest.fixture
def api():
    server = FakeApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


SPECS = [
    {"namespace": "research", "name": "checkpoint-key", "keys": ["key"]},
    {"namespace": "observability", "name": "clickhouse-reader", "keys": ["password"],
     "copy_to": ["research", "media"]},
]  # fmt: skip


def run(api: FakeApi, tmp_path, monkeypatch, specs=SPECS) -> int:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(specs))
    (tmp_path / "token").write_text("t0k3n\n")
    monkeypatch.setenv("KUBERNETES_API", api.url)
    monkeypatch.setenv("TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("CA_FILE", str(tmp_path / "no-ca.crt"))
    return load_script().main([str(path)])


def value(api: FakeApi, ns: str, name: str, key: str) -> str:
    return base64.b64decode(api.secrets[(ns, name)]["data"][key]).decode()


def test_creates_missing_secrets_and_copies(api, tmp_path, monkeypatch, capsys):
    assert run(api, tmp_path, monkeypatch) == 0
    assert set(api.secrets) == {("research", "checkpoint-key"), ("observability",
                                "clickhouse-reader"), ("research", "clickhouse-reader"),
                                ("media", "clickhouse-reader")}  # fmt: skip
    key = value(api, "research", "checkpoint-key", "key")
    assert len(key) == 64 and int(key, 16) >= 0
    reader = value(api, "observability", "clickhouse-reader", "password")
    assert value(api, "media", "clickhouse-reader", "password") == reader
    assert value(api, "research", "clickhouse-reader", "password") == reader
    assert reader != key
    assert set(api.tokens) == {"Bearer t0k3n"}
    assert "created research/checkpoint-key" in capsys.readouterr().out


def test_existing_secrets_are_never_changed(api, tmp_path, monkeypatch, capsys):
    assert run(api, tmp_path, monkeypatch) == 0
    before = json.dumps(sorted(api.secrets.items()))
    capsys.readouterr()
    assert run(api, tmp_path, monkeypatch) == 0
    assert json.dumps(sorted(api.secrets.items())) == before
    assert "created" not in capsys.readouterr().out


def test_a_new_team_gets_its_secret_and_the_copy(api, tmp_path, monkeypatch):
    assert run(api, tmp_path, monkeypatch) == 0
    reader = value(api, "observability", "clickhouse-reader", "password")
    specs = [*SPECS, {"namespace": "vision", "name": "checkpoint-key", "keys": ["key"]}]
    specs[1] = {**specs[1], "copy_to": [*specs[1]["copy_to"], "vision"]}
    assert run(api, tmp_path, monkeypatch, specs) == 0
    assert value(api, "vision", "clickhouse-reader", "password") == reader
    assert ("vision", "checkpoint-key") in api.secrets


def test_an_api_error_is_one_line_and_exit_1(api, tmp_path, monkeypatch, capsys):
    api.fail = True
    assert run(api, tmp_path, monkeypatch) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: GET /api/v1/namespaces/research/secrets/checkpoint-key")
    assert "403" in err and "\n" not in err
