"""scripts/bench/diagnose_bench.py at a small scale: the corpus figures, the synthetic
bundle's verdict names the hung rank, and the ingestion and the lines around a failure
agree with scanning the rank's file (the benchmark itself prints the timings)."""

from __future__ import annotations

import subprocess
import sys

from runner.diagnose.analyze import analyze
from tests.benches import load_bench

bench = load_bench("diagnose_bench")


def test_the_corpus_figures_meet_their_goals(capsys):
    assert bench.main(["--skip-big"]) == 0
    out = capsys.readouterr().out
    assert "decision accuracy, rules alone" in out and "culprit top-1" in out
    figures = bench.accuracy()
    assert figures["rules"] >= bench.GOALS["accuracy"] and figures["top1"] >= bench.GOALS["culprit"]


def test_the_synthetic_bundle_names_the_hung_rank(tmp_path):
    run = bench.big_bundle(tmp_path, 600, 3_000_000)
    v = analyze(run)
    assert (v.decision, v.category) == ("restart_excluding", "hang")
    assert [c["rank"] for c in v.culprits] == [bench.HUNG]


def test_ingestion_and_the_lines_around_a_failure_agree_with_a_scan(tmp_path):
    """In a child process: it opens a chDB store of its own."""
    code = (
        "import sys; from pathlib import Path; from tests.benches import load_bench; "
        "b = load_bench('diagnose_bench'); r = b.ingest_bench(Path(sys.argv[1]), 20000); "
        "print(r['lines'], r['around'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    lines, around = map(int, done.stdout.split())
    assert lines > 10_000 and around > 0
