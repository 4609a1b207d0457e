"""The record of runs under load (`tests/under-load.csv`): one row per test per run, kept
in the repository, so the rule a slow test meets before it joins CI (five passing runs
under load, two busy loops beside it) can be checked by anyone, on any machine, later.

    rows = ledger_rows(report, commit="94d13aa", loops=2, workers=1)  # one run's JUnit report
    append(LEDGER, rows)                                    # scripts/under-load --record
    owed(read(LEDGER), slow_tests, times=5)                 # scripts/under-load --owed

A failure resets a test's count: only the passes after its newest failure count (its
cause is found and fixed in between, and the fix must then hold five times). A pass
counts only beside at least RULE_LOOPS busy loops; a failure counts however it was run.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

LEDGER = Path(__file__).resolve().parents[1] / "under-load.csv"
FIELDS = ("test", "passed", "seconds", "date", "commit", "loops", "workers")
RULE_LOOPS = 2
"""The busy loops beside a run for its passes to count."""


def ledger_rows(report: dict[str, tuple[bool, float]], commit: str, loops: int, workers: int,
                date: str | None = None) -> list[dict]:  # fmt: skip
    """One row per test of one run's report (`underload.outcomes`)."""
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    return [
        {
            "test": test,
            "passed": int(ok),
            "seconds": f"{seconds:.1f}",
            "date": date,
            "commit": commit,
            "loops": loops,
            "workers": workers,
        }  # fmt: skip
        for test, (ok, seconds) in sorted(report.items())
    ]


def append(path: Path, rows: list[dict]) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as out:
        writer = csv.DictWriter(out, FIELDS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as src:
        return list(csv.DictReader(src))


def standing(rows: list[dict]) -> dict[str, int]:
    """{test: passes beside RULE_LOOPS busy loops since its newest failure}, in the ledger's
    order (oldest first)."""
    count: dict[str, int] = {}
    for row in rows:
        test, have = row["test"], count.get(row["test"], 0)
        if row["passed"] != "1":
            count[test] = 0
        else:
            loaded = str(row.get("loops", "")).isdigit() and int(row["loops"]) >= RULE_LOOPS
            count[test] = have + 1 if loaded else have
    return count


def owed(rows: list[dict], tests: list[str], times: int = 5) -> dict[str, int]:
    """{test: passing runs under load it still owes} for each of `tests` that owes any."""
    have = standing(rows)
    return {t: times - have.get(t, 0) for t in tests if have.get(t, 0) < times}


def workers_of(extra: list[str]) -> int:
    """How many pytest workers the options ask for (`-n 2`, `-n2`, `--numprocesses=2`; the
    last one wins, as in pytest); 0 for `auto`/`logical` or no workers (`-n 0`)."""
    found = 1
    for i, arg in enumerate(extra):
        value = None
        if arg in ("-n", "--numprocesses") and i + 1 < len(extra):
            value = extra[i + 1]
        elif arg.startswith("--numprocesses="):
            value = arg.partition("=")[2]
        elif arg.startswith("-n") and len(arg) > 2:
            value = arg[2:]
        if value is not None:
            found = int(value) if value.isdigit() else 0  # "auto", "logical": unknown
    return found
