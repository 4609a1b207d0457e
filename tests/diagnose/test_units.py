"""Pure parts of the analysis, as tables: tracebacks, the log scanner, the Xid catalog's
buckets, the proposal's text, the relaunch's run definition."""

from __future__ import annotations

import json

import pytest

from catalog.xid import XIDS, node_fault
from runner.diagnose import relaunch, scan, tracebacks

USER_TB = """Traceback (most recent call last):
  File "/opt/platform/driver/loop.py", line 177, in train_steps
    row = loop.step(step, batches)
  File "/home/me/project/data.py", line 46, in __iter__
    batch = check(batch)
  File "/usr/local/lib/python3.11/site-packages/torch/nn/functional.py", line 3479, in f
    return g()
ValueError: token id 61 out of range
"""


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        ("/opt/platform/driver/loop.py", "platform"),
        ("/work/checkout/runner/cli.py", "platform"),
        ("/usr/local/lib/python3.11/site-packages/torch/nn/functional.py", "library"),
        ("/usr/local/lib/python3.11/site-packages/driver/loop.py", "platform"),
        ("/usr/lib/python3.11/threading.py", "library"),
        ("<frozen runpy>", "library"),
        ("/home/me/project/data.py", "user"),
        ("/opt/platform/tests/fixtures/failures/faults.py", "user"),
    ],
)
def test_whose_code_a_frame_is(path, owner):
    assert tracebacks.owner(path) == owner


def test_a_traceback_names_the_users_frame_and_the_exception():
    tb = tracebacks.parse("noise\n" + USER_TB + "more noise\n")
    assert (tb.exception, tb.message) == ("ValueError", "token id 61 out of range")
    assert tb.user_frame().where() == "/home/me/project/data.py:46 in __iter__"
    assert tb.user_frame().code == "batch = check(batch)"
    assert tb.platform_frame().file.endswith("driver/loop.py")
    assert tb.raiser().owner == "library"


def test_the_last_of_several_tracebacks_is_taken_and_none_without_one():
    chained = (
        USER_TB
        + "\nThe above exception was the direct cause:\n\n"
        + USER_TB.replace("ValueError: token id 61 out of range", "RuntimeError: wrapped")
    )
    assert tracebacks.parse(chained).exception == "RuntimeError"
    assert tracebacks.parse("no traceback here") is None
    assert tracebacks.parse("Traceback (most recent call last):\n") is None


@pytest.mark.parametrize(
    ("code", "bucket", "node"),
    [
        (79, "RESTART_BM", True),
        (48, "RESET_GPU", True),
        (74, "RESET_GPU", True),
        (94, "RESTART_APP", False),
        (13, "RESTART_APP", False),
        (45, "IGNORE", False),
        (999, None, False),
    ],
)
def test_the_xid_catalog_buckets(code, bucket, node):
    assert (XIDS[code].bucket if code in XIDS else None) == bucket
    assert node_fault(code) is node


def test_the_scanner_reads_rows_and_text_and_counts_lines(tmp_path):
    rows = [
        {"ts": 1.0, "rank": 3, "pod": "p", "node": "n", "level": "INFO", "line": "step 1"},
        {
            "ts": 2.0,
            "rank": 3,
            "pod": "p",
            "node": "n",
            "level": "ERROR",
            "line": "NCCL WARN boom\nsecond line",
        },
    ]
    jsonl = tmp_path / "train-rank-3.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn":')
    text = tmp_path / "pod.log"
    text.write_text("ok\nrank=7 Traceback (most recent call last):\nfine\n")
    found = scan.scan([jsonl, text], tmp_path)
    assert [(x.source, x.number, x.rank, x.level) for x in found] == [
        ("train-rank-3.jsonl", 2, 3, "ERROR"),
        ("pod.log", 2, 7, ""),
    ]
    assert found[0].narrow(__import__("re").compile("NCCL")).text == "NCCL WARN boom"
    assert found[0].quote() == {"source": "train-rank-3.jsonl:2", "line": rows[1]["line"]}


def test_the_scanner_bounds_hits_per_file(tmp_path):
    big = tmp_path / "big.log"
    big.write_text("ERROR x\n" * (scan.MAX_HITS_PER_FILE * 3))
    assert len(scan.scan([big], tmp_path)) == scan.MAX_HITS_PER_FILE


@pytest.mark.parametrize(
    ("run", "taken", "name"),
    [
        ("tiny-lm", set(), "tiny-lm-r1"),
        ("tiny-lm", {"tiny-lm-r1"}, "tiny-lm-r2"),
        ("tiny-lm-r1", set(), "tiny-lm-r2"),
        ("x" * 63, set(), "x" * 60 + "-r1"),
    ],
)
def test_the_relaunch_takes_the_next_free_name(run, taken, name):
    assert relaunch.next_name(run, taken) == name


def test_the_relaunch_changes_only_what_the_proposal_says():
    data = {
        "name": "tiny-lm",
        "cluster": "c",
        "namespace": "n",
        "resume": "gs://old",
        "train_overrides": ["optimizer.lr=3e-3", "debug.fail_at_step=6", "x=1"],
    }
    proposal = {
        "action": "fix_config",
        "resume": "gs://b/research/tiny-lm/step-40",
        "avoid_nodes": ["node-b", "node-a"],
        "set": {"optimizer.lr": 3e-4},
        "remove": ["debug.fail_at_step"],
    }
    out, name = relaunch.relaunch_data(data, proposal, "tiny-lm", {"tiny-lm"})
    assert name == "tiny-lm-r1" and out["name"] == name
    assert out["resume"] == "gs://b/research/tiny-lm/step-40"
    assert out["avoid_nodes"] == ["node-a", "node-b"]
    assert out["train_overrides"] == ["x=1", "optimizer.lr=0.0003"]
    assert data["name"] == "tiny-lm"  # the failed run's definition is not touched
    with pytest.raises(relaunch.NoRelaunch, match="fix_code"):
        relaunch.relaunch_data(data, {"action": "fix_code"}, "tiny-lm", set())


def test_grep_and_the_python_search_find_the_same_lines(tmp_path, monkeypatch):
    files = []
    for i in range(3):
        path = tmp_path / f"f{i}.log"
        path.write_text("".join(f"step {n} ok\n" if n % 7 else f"rank={i} NCCL WARN {n}\n"
                                for n in range(300)) + "Traceback (no newline)")  # fmt: skip
        files.append(path)
    with_grep = scan.scan(files, tmp_path)
    monkeypatch.setattr(scan.shutil, "which", lambda name: None)
    without = scan.scan(files, tmp_path)
    assert with_grep == without and len(without) == 3 * (43 + 1)
    assert without[0] == scan.Line("f0.log", 1, "rank=0 NCCL WARN 0", 0)
