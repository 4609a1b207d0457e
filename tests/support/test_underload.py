"""`scripts/under-load`: JUnit reports read back, tallied per test, and the command itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.soak.procs import descendants, snapshot
from tests.support.underload import Outcome, outcomes, quiet, table, tally

ROOT = Path(__file__).resolve().parents[2]
REPORT = """<testsuites><testsuite>
<testcase classname="tests.ft.test_kill" name="test_a" time="1.5"/>
<testcase classname="tests.ft.test_kill" name="test_b[before]" time="2.0"><failure/></testcase>
<testcase classname="tests.ft.test_kill" name="test_c" time="0.1"><skipped/></testcase>
<testcase classname="tests.ft.test_kill" name="test_d" time="0.2"><error/></testcase>
<testcase time="0.001"/>
</testsuite></testsuites>"""


def test_a_report_gives_each_tests_outcome_and_time_skipped_left_out():
    assert outcomes(REPORT) == {
        "tests/ft/test_kill.py::test_a": (True, 1.5),
        "tests/ft/test_kill.py::test_b[before]": (False, 2.0),
        "tests/ft/test_kill.py::test_d": (False, 0.2),
    }


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ([{"t": (True, 1.0)}, {"t": (True, 3.0)}], [Outcome("t", 2, [], 3.0)]),
        ([{"t": (True, 1.0)}, {"t": (False, 0.5)}], [Outcome("t", 1, [2], 1.0)]),
        (
            [{"b": (True, 1.0)}, {"a": (True, 1.0)}],
            [Outcome("a", 1, [], 1.0), Outcome("b", 1, [], 1.0)],
        ),  # fmt: skip
        ([], []),
    ],
)
def test_tally_over_the_runs(reports, expected):
    assert tally(reports) == expected


def test_the_table_names_the_failed_runs_and_the_runs_a_test_missed():
    rows = [Outcome("t::x", 3, [2, 5], 4.25), Outcome("t::y", 4, [], 1.0)]
    assert table(rows, 5).splitlines() == [
        "3/5 FAILED in run 2, 5  slowest 4.2s  t::x",
        "4/5 ok, not run 1x  slowest 1.0s  t::y",
    ]


def test_two_runs_beside_a_busy_loop_keep_each_runs_output(tmp_path):
    test = tmp_path / "test_tiny.py"
    test.write_text("def test_one():\n    assert True\n\ndef test_two():\n    assert 1 == 2\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "under-load"), "--times", "2", "--loops", "1",
         "--out", str(out), str(test)], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("2/2 ok  slowest ") and lines[-2].endswith("::test_one")
    assert lines[-1].startswith("0/2 FAILED in run 1, 2  slowest ")
    assert done.stdout.count("exit 1, 2 tests, 1 failed") == 2
    assert "assert 1 == 2" in (out / "run2.log").read_text()


def test_sigterm_stops_it_and_leaves_no_process(tmp_path):
    test = tmp_path / "test_sleep.py"
    test.write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "under-load"), "--times", "3", "--loops", "2",
         str(test)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(descendants(proc.pid, snapshot())) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # two busy loops and the pytest run
    below = descendants(proc.pid, snapshot())
    assert len(below) >= 3
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "under load: stopped" in err
    deadline = time.monotonic() + 10
    while [p for p in below if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in below if os.path.exists(f"/proc/{p}")] == []


def test_a_missing_test_file_is_refused():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "under-load"), "tests/no_such_test.py"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert (
        done.returncode == 2 and "no such test file or folder: tests/no_such_test.py" in done.stderr
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], ["-q"]),
        (["-x"], ["-q"]),
        (["-v"], []),
        (["-vv", "-x"], []),
        (["--verbose"], []),
        (["-k", "v"], ["-q"]),
    ],
)
def test_verbose_options_drop_quiet(extra, expected):
    assert quiet(extra) == expected
