"""Training code may import one Warden module, `warden.client`, and that module imports
neither the Temporal worker nor the activities or the Kubernetes and GCP adapters."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def warden_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n for n in names if n == "warden" or n.startswith("warden.")}


def test_the_driver_imports_only_the_warden_client():
    used = {
        str(p.relative_to(ROOT)): warden_imports(p)
        for p in (ROOT / "driver").rglob("*.py")
        if warden_imports(p)
    }
    assert used and all(names == {"warden.client"} for names in used.values()), used


def test_the_warden_client_imports_no_worker_activities_or_adapters():
    code = "import json, sys, warden.client; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = {m.split(".")[1] for m in json.loads(out) if m.startswith("warden.")}
    assert loaded and not loaded & FORBIDDEN, loaded


FORBIDDEN = {"worker", "activities", "workflows", "kube", "gcp", "jobs", "fake", "fakefleet"}
