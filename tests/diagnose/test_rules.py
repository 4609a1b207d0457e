"""Rules the corpus does not reach on its own: Warden's history of a node, the driver's exit
code, a non-finite loss only in the log lines (a cluster run: the store keeps finite values
only), and `runner diagnose RUN --analyze` collecting a cluster run's evidence through the
Kubernetes adapter (the fake) before it analyses it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runner.diagnose.analyze import analyze
from tests.day2 import conftest as day2
from tests.preflight.conftest import invoke

fake = day2.fake  # the fake Kubernetes adapter with a run (tests/day2/conftest.py)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "failures"


def folder_with(tmp_path: Path, **files: str) -> Path:
    out = tmp_path / "evidence"
    out.mkdir()
    (out / "config.yaml").write_text("run:\n  name: r\n  team: t\n")
    for name, text in files.items():
        path = out / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return out


def test_a_node_warden_cordoned_is_a_hardware_fault(tmp_path):
    case = tmp_path / "case"
    shutil.copytree(CORPUS / "sigkill-rank", case)
    bundle = sorted(case.glob("crash-*"))[-1]
    info = json.loads((bundle / "ranks.json").read_text())
    for part in info.values():
        for rank, row in part.items():
            row["node"] = f"node-{rank}"
    (bundle / "ranks.json").write_text(json.dumps(info))
    history = {"node-1": [{"kind": "cordon", "severity": "warning", "reason": "XID 79"}]}
    (case / "warden.json").write_text(json.dumps(history))
    v = analyze(case)
    assert (v.decision, v.category) == ("restart_excluding", "hardware")
    assert v.proposal["avoid_nodes"] == ["node-1"] and v.culprits[0]["rank"] == 1
    assert v.evidence[0]["source"] == "warden.json"


@pytest.mark.parametrize(
    ("code", "decision", "category"),
    [
        (2, "fix_config", "config"),
        (3, "restart", "killed"),
        (137, "restart", "killed"),
        (143, "restart", "preemption"),
    ],
)
def test_the_exit_code_speaks_when_nothing_else_does(tmp_path, code, decision, category):
    v = analyze(folder_with(tmp_path, exit_code=f"{code}\n"))
    assert (v.decision, v.category) == (decision, category)


def test_nothing_recognised_is_unknown_and_stop(tmp_path):
    v = analyze(folder_with(tmp_path, exit_code="1\n"))
    assert (v.decision, v.category, v.confidence) == ("stop", "unknown", 0.2)


def test_a_non_finite_loss_in_the_log_lines_is_numerics(tmp_path):
    row = {"ts": 1.7e9, "rank": 0, "level": "INFO", "line": "step 41 loss nan"}
    v = analyze(folder_with(tmp_path, **{"run-logs.jsonl": json.dumps(row) + "\n"}))
    assert (v.decision, v.category) == ("fix_config", "numerics")
    assert v.evidence[0]["line"] == "step 41 loss nan"


def test_a_cluster_runs_evidence_is_collected_then_analysed(fake, tmp_path, monkeypatch):
    """The fake cluster's head pod holds a failed run's bundle in its output folder (the
    fake execs in this machine's working directory): the analysis reads it."""
    monkeypatch.chdir(tmp_path)
    dest = tmp_path / "outputs" / "research" / "tiny-lm"
    dest.mkdir(parents=True)
    shutil.copytree(
        sorted((CORPUS / "xid79-fell-off-bus").glob("crash-*"))[-1], dest / "crash-20261130-100500"
    )
    empty = tmp_path / "bucket"  # the kept bundles' root (the cluster's bucket by default)
    empty.mkdir()
    result = invoke(["diagnose", "tiny-lm", "--analyze", "--json", "--bundle-root", str(empty)])
    assert result.exit_code == 0, result.stderr
    v = json.loads(result.stdout)
    assert (v["decision"], v["category"]) == ("restart_excluding", "hardware")
    assert v["run"]["run"] == "tiny-lm"
