"""The overhead benchmark's pure pieces: the steady-state rate and the fairness check."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("driver_overhead")


def test_steady_rate_skips_the_first_steps(bench):
    times = [0.0, 5.0, 5.5, 6.0, 6.5]  # a slow first step, then 2 steps/s
    assert bench.steady_rate(times, skip=1) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="too few"):
        bench.steady_rate(times, skip=4)


def test_conditions_tell_unequal_workers_apart(bench):
    probe = {"pid": 1, "omp": "1", "cpus": 2, "nice": 15}
    same = bench.conditions([probe, {**probe, "pid": 2}])
    assert same == {("1", 2, 15)}
    assert bench.conditions([probe, {**probe, "nice": 0}]) != same
    assert bench.conditions([{**probe, "omp": "2"}]) != same


def test_a_probe_reads_a_training_workers_conditions_from_proc(bench):
    import os
    import subprocess
    import sys

    code = "import time; time.sleep(5)  # multiprocessing.spawn stands for a plain side's rank"
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        import time

        deadline = time.monotonic() + 5  # until the child's command line is there (exec)
        while (probe := bench.worker_probe(child.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert probe == {"pid": child.pid, "omp": "3", "cpus": len(os.sched_getaffinity(0)),
                         "nice": os.nice(0)}  # fmt: skip
        assert bench.worker_probe(os.getpid()) is None  # not a training worker
    finally:
        child.kill()
        child.wait()


def test_the_report_prints_the_ratio_of_measured_rounds(bench, capsys):
    import argparse

    probe = {"pid": 1, "omp": "1", "cpus": 2, "nice": 15}

    def side(rate: float) -> dict:
        return {"rate": rate, "start": 9.0, "cpu": 0.01, "probes": [probe],
                "phases": {"ray": 2.0, "first step": 9.0}}  # fmt: skip

    rounds = [{"driver": side(1.9), "plain": side(2.0)}, {"driver": side(2.0), "plain": side(2.0)}]
    bench.report(argparse.Namespace(workers=2, steps=60, skip=10, rounds=2), rounds)
    said = capsys.readouterr().out
    assert "OMP_NUM_THREADS=1, 2 CPUs allowed, nice 15" in said
    assert "ratio driver/plain :   0.975 steps/s" in said
    unfair = [{"driver": side(2.0), "plain": {**side(2.0), "probes": [{**probe, "nice": 0}]}}]
    with pytest.raises(SystemExit, match="different conditions"):
        bench.report(argparse.Namespace(workers=2, steps=60, skip=10, rounds=1), unfair)
