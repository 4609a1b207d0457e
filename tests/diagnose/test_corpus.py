"""The analyzer over the failure corpus (tests/fixtures/failures/: real local runs with
injected faults, and hardware and network lines written into copies of real bundles): every
case gets the decision, category and culprits a person gave it, with evidence lines that
name its culprits, and a JSON verdict of the documented shape."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.diagnose.analyze import analyze
from runner.diagnose.rules import CATEGORIES, DECISIONS

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "failures"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yaml").exists())
KEYS = {"decision", "category", "culprits", "evidence", "proposal", "confidence", "source"}


def expected(case: str) -> dict:
    return yaml.safe_load((CORPUS / case / "expected.yaml").read_text())


@pytest.mark.parametrize("case", CASES)
def test_every_case_gets_the_labelled_verdict(case):
    want, got = expected(case), analyze(CORPUS / case)
    assert (got.decision, got.category) == (want["decision"], want["category"]), got.why
    ranks = sorted(c["rank"] for c in got.culprits if c["rank"] is not None)
    nodes = sorted({c["node"] for c in got.culprits if c["node"]})
    assert ranks == sorted(want["culprits"]["ranks"])
    if want["culprits"]["nodes"]:
        assert nodes == sorted(want["culprits"]["nodes"])
    assert got.evidence and all(e["source"] and e["line"] for e in got.evidence)
    assert got.source == "rules"


@pytest.mark.parametrize("case", CASES)
def test_the_json_verdict_has_the_documented_shape(case):
    out = analyze(CORPUS / case).to_json()
    assert KEYS <= set(out)
    assert out["decision"] in DECISIONS and out["category"] in CATEGORIES
    assert all(set(c) == {"rank", "pod", "node"} for c in out["culprits"])
    assert all(set(e) == {"source", "line"} for e in out["evidence"])
    assert 0.0 <= out["confidence"] <= 1.0 and out["source"] in ("rules", "model")
    assert "text" in out["proposal"]


def test_the_corpus_covers_every_fault_the_issue_names():
    hows = " ".join(expected(c)["how"] for c in CASES)
    for fault in (
        "SIGKILL",
        "stops at its",
        "non-finite",
        "raises",
        "64 KiB tmpfs",
        "encoder service's worker",
        "ft.min_replicas",
        "SIGTERM",
        "Xid 79",
        "NET/IB",
        "watchdog",
    ):
        assert fault in hows, fault
    real = [c for c in CASES if expected(c)["how"].startswith("real local run")]
    assert len(real) >= 10


def test_a_hostile_log_line_changes_nothing():
    """The hostile case is sigkill-rank plus a line telling a model to stop and delete: the
    rules give sigkill-rank's verdict, and the line is no evidence."""
    plain, hostile = analyze(CORPUS / "sigkill-rank"), analyze(CORPUS / "hostile-log-line")
    assert (hostile.decision, hostile.category) == (plain.decision, plain.category)
    assert not any("ignore all previous" in e["line"] for e in hostile.evidence)


def test_the_failure_is_found_from_the_bundle_folder_alone():
    bundle = sorted((CORPUS / "xid79-fell-off-bus").glob("crash-*"))[-1]
    got = analyze(bundle)
    assert (got.decision, got.category) == ("restart_excluding", "hardware")
