"""Run tests several times beside busy loops: the rule a slow test meets before it joins CI
(five runs under load, two busy loops beside it, no failure). `scripts/under-load` is the
command; this module is its logic.

    runs = run_under_load(["tests/ft/test_kill.py"], times=5, loops=2, out=Path("/tmp/u"))
    print(table(runs))               # one line per test: passes, failures, slowest run

Each run is a pytest process of its own (slow tests included) with a JUnit XML report,
read back for each test's outcome and time. The busy loops are processes of their own,
killed when the runs end, however they end.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

BUSY = "while True: pass"


@dataclass
class Outcome:
    test: str
    passed: int = 0
    failed: list[int] = field(default_factory=list)
    """The runs (1-based) in which it failed or errored."""
    slowest_s: float = 0.0


def outcomes(xml_text: str) -> dict[str, tuple[bool, float]]:
    """{test id: (passed, seconds)} from a JUnit XML report; skipped tests are left out, and
    entries that name no test (an interrupted run's last one)."""
    found = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        if case.find("skipped") is not None or not case.get("classname") or not case.get("name"):
            continue
        module = case.get("classname", "").replace(".", "/")
        test = f"{module}.py::{case.get('name')}"
        bad = case.find("failure") is not None or case.find("error") is not None
        found[test] = (not bad, float(case.get("time") or 0.0))
    return found


def tally(reports: list[dict[str, tuple[bool, float]]]) -> list[Outcome]:
    """Per test, over the runs in order: passes, the runs that failed, the slowest time."""
    by_test: dict[str, Outcome] = {}
    for run, report in enumerate(reports, start=1):
        for test, (passed, seconds) in report.items():
            outcome = by_test.setdefault(test, Outcome(test))
            if passed:
                outcome.passed += 1
            else:
                outcome.failed.append(run)
            outcome.slowest_s = max(outcome.slowest_s, seconds)
    return sorted(by_test.values(), key=lambda o: o.test)


def table(rows: list[Outcome], runs: int) -> str:
    lines = []
    for row in rows:
        failed = f"FAILED in run {', '.join(map(str, row.failed))}" if row.failed else "ok"
        missing = runs - row.passed - len(row.failed)
        gone = f", not run {missing}x" if missing else ""
        lines.append(
            f"{row.passed}/{runs} {failed}{gone}  slowest {row.slowest_s:.1f}s  {row.test}"
        )
    return "\n".join(lines)


def _die_with_parent() -> None:
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def busy_loops(count: int):
    """`count` spinning processes; killed on leaving, and by the kernel if this one dies."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=_die_with_parent)
             for _ in range(count)]  # fmt: skip
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def quiet(extra: list[str]) -> list[str]:
    """`-q` unless the pytest options ask for verbose output (a `-v` after `-q` only
    cancels it, so each test's outcome would not be printed as it ends)."""
    verbose = any(arg == "--verbose" or re.fullmatch(r"-v+", arg) for arg in extra)
    return [] if verbose else ["-q"]


def one_run(tests: list[str], report: Path, log: Path, extra: list[str]) -> int:
    """One pytest process; its output (failures with their tracebacks) into `log`. If this
    process is stopped meanwhile, pytest gets SIGINT (it then cleans up) and 30 s."""
    cmd = [sys.executable, "-m", "pytest", *quiet(extra), "-m", "slow or not slow", "-p",
           "no:cacheprovider", f"--junitxml={report}", *extra, *tests]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            return proc.wait()
        except BaseException:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def run_under_load(tests: list[str], times: int, loops: int, out: Path,
                   extra: list[str] | None = None, say=print,
                   keep=None) -> list[Outcome]:  # fmt: skip
    """Run `tests` `times` times, one pytest process after another, beside `loops` busy
    loops; each run's result is said as it ends, its output kept in `out`/run<N>.log, and
    its report given to `keep` (the ledger, tests/support/ledger.py) when there is one."""
    reports = []
    out.mkdir(parents=True, exist_ok=True)
    with busy_loops(loops):
        for run in range(1, times + 1):
            report, started = out / f"run{run}.xml", time.monotonic()
            code = one_run(tests, report, out / f"run{run}.log", extra or [])
            text = report.read_text() if report.exists() else "<testsuites/>"
            reports.append(outcomes(text))
            if keep is not None:
                keep(reports[-1])
            failed = sum(not ok for ok, _ in reports[-1].values())
            say(f"run {run}/{times}: exit {code}, {len(reports[-1])} tests, {failed} failed, "
                f"{time.monotonic() - started:.0f} s")  # fmt: skip
    return tally(reports)
