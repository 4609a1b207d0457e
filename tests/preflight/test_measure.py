"""Matmul and all-reduce figures: verdicts, the nccl-tests formula, the slowest rank."""

from __future__ import annotations

import pytest

from runner.preflight import allreduce, matmul
from runner.preflight.allreduce import RankResult, Rendezvous
from runner.preflight.rows import FAIL, PASS, WARN


@pytest.mark.parametrize(
    ("measured", "expected", "result"),
    [(650, 650, PASS), (590, 650, PASS), (500, 650, WARN), (480, 650, FAIL), (0.01, 0.001, PASS)],
)
def test_verdict(measured, expected, result):
    assert matmul.verdict(measured, expected) == result


def test_cpu_matmul_is_correct():
    tflops, error = matmul.measure("cpu", "float32", 128, 2)
    assert tflops > 0 and error < matmul.TOLERANCE["float32"]


def test_wrong_results_fail_whatever_the_speed():
    row = matmul._row("GPU", [700.0, 700.0], [1e-3, 0.5], 650.0, "bfloat16")
    assert row.result == FAIL and "GPU1 error 5.00e-01" in row.detail


def test_slowest_gpu_named():
    row = matmul._row("GPU", [640.0, 400.0, 630.0], [0.0] * 3, 650.0, "bfloat16")
    assert row.result == FAIL and row.detail.startswith("slowest GPU1 400 TFLOP/s, 62%")


@pytest.mark.parametrize(
    ("size", "seconds", "world", "busbw"),
    [
        (10**9, 1.0, 2, 1.0),
        (10**9, 1.0, 8, 1.75),
        (10**9, 0.5, 4, 3.0),
        (8 * 10**9, 0.1, 16, 150.0),
    ],
)
def test_bus_bandwidth_formula(size, seconds, world, busbw):
    assert allreduce.bus_bandwidth(size, seconds, world) == pytest.approx(busbw)


def results(times: list[float]) -> list[RankResult]:
    return [RankResult(i, f"pod-{i // 2}", f"node-{i // 2}", t, True) for i, t in enumerate(times)]


def test_world_row_names_slowest_rank_and_node():
    rdzv = Rendezvous("10.0.0.1", 29533, 4, 0, 2, "nccl")
    size = 10**9
    rows = allreduce.rows(rdzv, results([0.01, 0.011, 0.02, 0.012]), [], size, 350.0)
    assert [r.check for r in rows] == ["allreduce", "allreduce-world"]
    world = rows[1]
    assert world.data["slowest_rank"] == 2 and world.data["slowest_node"] == "node-1"
    assert "slowest rank 2 (pod-1 on node-1)" in world.detail
    assert world.data["busbw_gbps"] == pytest.approx(allreduce.bus_bandwidth(size, 0.02, 4))
    assert world.result == FAIL  # 75 GB/s against 350 expected


def test_other_pods_report_only_their_ranks():
    rdzv = Rendezvous("10.0.0.1", 29533, 4, 2, 2, "gloo")
    rows = allreduce.rows(rdzv, results([0.01, 0.01, 0.02, 0.01]), [], 10**6, None)
    assert [r.check for r in rows] == ["allreduce"]
    assert rows[0].detail.startswith("ranks 2-3:")


def test_errors_and_wrong_sums_fail():
    rdzv = Rendezvous("h", 1, 2)
    assert allreduce.rows(rdzv, [], ["rank 1: timeout"], 1, None)[0].result == FAIL
    bad = [RankResult(0, "", "", 0.1, True), RankResult(1, "", "", 0.1, False)]
    world = allreduce.rows(rdzv, bad, [], 10**6, None)[-1]
    assert world.result == FAIL and "wrong sum on ranks [1]" in world.detail


def test_single_rank_has_no_bus_bandwidth():
    rows = allreduce.rows(Rendezvous("h", 1, 1), [RankResult(0, "", "", 0.1, True)], [], 10, 350)
    assert rows[-1].check == "allreduce-world" and rows[-1].result == "SKIP"
