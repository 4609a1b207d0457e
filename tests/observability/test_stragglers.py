"""The straggler analysis names the injected rank and node and estimates its delay, in chDB
(the SQL the platform runs) and in pandas (the reference), which agree row for row."""

from __future__ import annotations

import pandas as pd
import pytest

from observability import reference, stragglers
from observability.stragglers import Thresholds
from observability.synthetic import Scenario, Slow, generate, to_pandas

from .cases import KINDS, case, judge
from .conftest import TEAM, drop, load, loaded

FAR = (0, 4_000_000_000)  # every record of the run


def analyse(session, run: str, names=("straggler_ranks", "straggler_nodes"), t=stragglers.DEFAULT):
    return [stragglers.run_chdb(session, n, TEAM, run, *FAR, t) for n in names]


def accuracy(session, folder, kind: str, seeds: range) -> tuple[float, list[str]]:
    failures, runs = [], []
    try:
        for seed in seeds:  # runs are keyed by name: their rows are deleted together at the end
            c = case(kind, seed)
            run, cols = load(session, folder, c.scenario, seed)
            runs.append(run)
            wrong = judge(c, cols, *analyse(session, run))
            failures += [f"seed {seed}: {w}" for w in wrong[:2]]
    finally:
        drop(session, runs)
    bad = len({f.split(":")[0] for f in failures})
    return 1 - bad / len(seeds), failures


@pytest.mark.parametrize("kind", KINDS)
def test_names_the_injected_straggler(chdb_session, tmp_path, kind):
    score, failures = accuracy(chdb_session, tmp_path, kind, range(6))
    assert score == 1.0, failures


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_accuracy_over_200_seeds(chdb_session, tmp_path, kind):
    score, failures = accuracy(chdb_session, tmp_path, kind, range(200))
    assert score >= 0.99, failures[:10]


def test_healthy_run_names_nobody(chdb_session, tmp_path):
    sc = Scenario(ranks=64, seconds=45)
    with loaded(chdb_session, tmp_path, sc, seed=3) as (run, _):
        ranks, nodes = analyse(chdb_session, run)
    assert ranks and not [r for r in ranks if r["straggler"]]
    assert not [n for n in nodes if n["straggler"]]
    assert all(abs(r["delay_us"]) < 150 for r in ranks)


def test_the_rank_that_waits_is_not_the_straggler(chdb_session, tmp_path):
    """The straggler has the shortest durations (it never waits) and is last nearly always;
    the others wait for it: bus bandwidth would blame them, the method does not."""
    sc = Scenario(ranks=16, seconds=40, slow=(Slow((9,), 1.3),))
    with loaded(chdb_session, tmp_path, sc, seed=5) as (run, _):
        (ranks,) = analyse(chdb_session, run, ("straggler_ranks",))
    nine = [r for r in ranks if r["rank"] == 9]
    others = [r for r in ranks if r["rank"] != 9]
    assert all(r["last_fraction"] > 0.95 and r["wait_us"] < 100 for r in nine)
    assert all(r["wait_us"] > 25_000 for r in others)
    assert {r["node"] for r in nine} == {"node-1"} and {r["pod"] for r in nine} == {"w-1"}


def test_sql_and_pandas_agree(chdb_session, tmp_path):
    c = case("two", 7, seconds=70)
    with loaded(chdb_session, tmp_path, c.scenario, 7) as (run, cols):
        sql_ranks, sql_nodes, sql_found = analyse(
            chdb_session, run, stragglers.QUERIES, Thresholds(min_duration_s=60)
        )
    df = to_pandas(c.scenario, cols)
    ranks = reference.straggler_ranks(df)
    nodes = reference.straggler_nodes(df)
    found = reference.straggler_findings(ranks, Thresholds(min_duration_s=60))
    for sql_rows, frame in ((sql_ranks, ranks), (sql_nodes, nodes), (sql_found, found)):
        got = pd.DataFrame(sql_rows)
        assert len(got) == len(frame) and len(got) > 0
        for column in frame.columns:
            if column in ("window", "since", "until"):
                continue
            want = frame[column].to_numpy()
            if column in ("node", "pod"):
                assert list(got[column]) == list(want.astype(str)), column
            else:
                assert got[column].astype(float).to_numpy() == pytest.approx(
                    want.astype(float), rel=1e-9, abs=1e-6
                ), column
    assert {(f["rank"], f["persistent"]) for f in sql_found} == {(r, 1) for r in c.ranks}


def test_incomplete_instances_are_left_out(chdb_session, tmp_path):
    """An instance some rank did not report (a lost line) could blame the wrong rank."""
    sc = Scenario(ranks=8, seconds=35, slow=(Slow((3,), 1.3),))
    cols = generate(sc, 1)
    drop = (cols["rank"] == 3) & (cols["seq"] % 2 == 0)  # half the straggler's records lost
    kept = {k: v[~drop] for k, v in cols.items()}
    df = to_pandas(sc, kept)
    ranks = reference.straggler_ranks(df)
    assert set(ranks.loc[ranks["straggler"], "rank"]) == {3}
    # every rank counted in the same instances of a window
    assert (ranks.groupby("window")["samples"].nunique() == 1).all()
