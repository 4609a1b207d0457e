"""Create the platform's random Secrets that are missing; never change one that exists.

Runs in the cluster as the Job `platform-secrets/secret-maker` (an Argo CD PostSync hook
of the `platform` Application, so a new team gets its Secrets on the sync that creates its
namespace). Standard library only; it talks to the Kubernetes API with the pod's service
account, which may only get and create Secrets in the namespaces listed.

    python make_secrets.py SPECS.json

SPECS.json (generated per cluster by `python -m kustomize.tooling.generate`) is a list of
{"namespace", "name", "keys": [...], "copy_to": [namespace, ...]}: each key gets 32 random
bytes as 64 hex characters; `copy_to` namespaces get a Secret of the same name and values.
Environment: KUBERNETES_API (default: the in-cluster API), TOKEN_FILE, CA_FILE.
Exit 0 when every Secret exists, 1 on any API error (the Job retries).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
MANAGED_BY = {"app.kubernetes.io/managed-by": "secret-maker"}


class Api:
    """The two calls this needs: get a Secret, create a Secret."""

    def __init__(self, base: str, token: str | None, ca_file: str | None):
        self.base = base.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def _call(self, method: str, path: str, body: dict | None = None) -> dict | None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as reply:
                return json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as err:
            if err.code == 404 and method == "GET":
                return None
            raise RuntimeError(f"{method} {path}: HTTP {err.code}") from None

    def get(self, namespace: str, name: str) -> dict | None:
        return self._call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def create(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": MANAGED_BY},
                "data": data}  # fmt: skip
        self._call("POST", f"/api/v1/namespaces/{namespace}/secrets", body)


def random_data(keys: list[str]) -> dict[str, str]:
    """Each key: 32 random bytes as hex, base64-encoded as the API wants `data`."""
    return {k: base64.b64encode(secrets.token_hex(32).encode()).decode() for k in keys}


def ensure(api: Api, spec: dict) -> list[str]:
    """Create the Secret (and its copies) where missing; returns what was created."""
    made = []
    source = api.get(spec["namespace"], spec["name"])
    if source is None:
        data = random_data(spec["keys"])
        api.create(spec["namespace"], spec["name"], data)
        made.append(f"{spec['namespace']}/{spec['name']}")
    else:
        data = source.get("data") or {}
        missing = [k for k in spec["keys"] if k not in data]
        if missing:
            raise RuntimeError(f"{spec['namespace']}/{spec['name']}: no key {missing[0]!r}")
    for namespace in spec.get("copy_to", []):
        if api.get(namespace, spec["name"]) is None:
            api.create(namespace, spec["name"], {k: data[k] for k in spec["keys"]})
            made.append(f"{namespace}/{spec['name']}")
    return made


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_secrets.py SPECS.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        specs = json.load(f)
    token_file = os.environ.get("TOKEN_FILE", f"{SA}/token")
    token = open(token_file).read().strip() if os.path.exists(token_file) else None
    ca_file = os.environ.get("CA_FILE", f"{SA}/ca.crt")
    api = Api(os.environ.get("KUBERNETES_API", "https://kubernetes.default.svc"), token,
              ca_file if os.path.exists(ca_file) else None)  # fmt: skip
    try:
        for spec in specs:
            for name in ensure(api, spec):
                print(f"created {name}")
    except (RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"ok: {len(specs)} secrets present")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
