"""The ledger of runs under load: rows written and read back, what each test still owes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ledger import append, ledger_rows, owed, read, standing, workers_of

ROOT = Path(__file__).resolve().parents[2]


def rows(*outcomes: tuple[str, bool], loops: str = "2") -> list[dict]:
    return [{"test": t, "passed": "1" if ok else "0", "loops": loops} for t, ok in outcomes]


@pytest.mark.parametrize(
    ("ledger", "expected"),
    [
        (rows(), {}),
        (rows(("a", True), ("a", True)), {"a": 2}),
        (rows(("a", True), ("a", False)), {"a": 0}),  # a failure resets the count
        (rows(("a", True), ("a", False), ("a", True)), {"a": 1}),
        (rows(("a", True), ("b", False), ("a", True)), {"a": 2, "b": 0}),
        (rows(("a", True), loops="0") + rows(("a", True)), {"a": 1}),  # no load: no count
        (rows(("a", True)) + rows(("a", False), loops="0"), {"a": 0}),  # a failure resets
    ],
)
def test_a_tests_standing_is_its_passes_since_its_newest_failure(ledger, expected):
    assert standing(ledger) == expected


@pytest.mark.parametrize(
    ("ledger", "tests", "expected"),
    [
        (rows(), ["a", "b"], {"a": 5, "b": 5}),
        (rows(*[("a", True)] * 5), ["a", "b"], {"b": 5}),
        (rows(*[("a", True)] * 6, ("a", False)), ["a"], {"a": 5}),
        (rows(*[("a", True)] * 3, ("c", True)), ["a"], {"a": 2}),  # c: no longer slow
    ],
)
def test_owed_lists_only_the_tests_asked_that_owe_runs(ledger, tests, expected):
    assert owed(ledger, tests, times=5) == expected


@pytest.mark.parametrize(
    ("extra", "workers"),
    [([], 1), (["-n", "2"], 2), (["-n2", "-v"], 2), (["--numprocesses=3"], 3),
     (["-x", "--numprocesses", "4"], 4), (["-n", "auto"], 0), (["-n", "2", "-n", "3"], 3),
     (["-n", "0"], 0)],
)  # fmt: skip
def test_workers_come_from_the_pytest_options(extra, workers):
    assert workers_of(extra) == workers


def test_rows_are_written_with_one_header_and_read_back(tmp_path):
    path = tmp_path / "under-load.csv"
    report = {"tests/x.py::test_b": (False, 2.25), "tests/x.py::test_a": (True, 1.0)}
    append(path, ledger_rows(report, "abc123", loops=2, workers=1, date="2026-12-07"))
    append(path, ledger_rows({"tests/x.py::test_b": (True, 3.0)}, "abc124", 2, 1, "2026-12-08"))
    got = read(path)
    assert path.read_text().count("test,passed") == 1
    assert [(r["test"], r["passed"], r["seconds"], r["commit"]) for r in got] == [
        ("tests/x.py::test_a", "1", "1.0", "abc123"),
        ("tests/x.py::test_b", "0", "2.2", "abc123"),
        ("tests/x.py::test_b", "1", "3.0", "abc124"),
    ]
    assert standing(got) == {"tests/x.py::test_a": 1, "tests/x.py::test_b": 1}


def test_the_committed_ledger_names_only_tests_that_are_collected():
    """A renamed or removed test leaves rows that count for nothing: say so here."""
    ledger = read(ROOT / "tests" / "under-load.csv")
    if not ledger:
        pytest.skip("the ledger is empty")
    cmd = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
           "-o", "addopts=", *sorted({r["test"].split("::")[0] for r in ledger})]  # fmt: skip
    text = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout
    collected = {line for line in text.splitlines() if "::" in line}
    stale = sorted({r["test"] for r in ledger} - collected)
    assert not stale, f"rename or remove these rows of tests/under-load.csv: {stale[:5]}"
