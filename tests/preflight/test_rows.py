"""Rows: the table, the worst result, failing nodes and cross-node consistency."""

from __future__ import annotations

import pytest

from runner.preflight.rows import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    Row,
    consistency,
    cross_node,
    failing_nodes,
    table,
    worst,
)


@pytest.mark.parametrize(
    ("results", "expected"),
    [([], SKIP), ([PASS, SKIP], PASS), ([PASS, WARN], WARN), ([WARN, FAIL, PASS], FAIL)],
)
def test_worst(results, expected):
    assert worst(results) == expected


def smi(node: str, driver: str, cuda: str = "12.4") -> Row:
    return Row(
        "nvidia-smi", PASS, "", node=node, data={"driver_version": driver, "cuda_version": cuda}
    )


@pytest.mark.parametrize(
    ("drivers", "result", "named"),
    [
        (["550.90.07"] * 3, PASS, None),
        (["550.90.07", "550.90.07", "535.161.08"], FAIL, "n2=535.161.08"),
        (["550.90.07"], PASS, None),
    ],
)
def test_driver_consistency(drivers, result, named):
    rows = [smi(f"n{i}", d) for i, d in enumerate(drivers)]
    row = consistency(rows, "nvidia-smi", "driver_version")
    assert row.check == "same-driver-version" and row.result == result
    if named:
        assert named in row.detail and "550.90.07 on 2 node(s)" in row.detail


def test_cross_node_checks_cuda_too_and_skips_without_gpus():
    rows = [smi("a", "550.90.07", "12.4"), smi("b", "550.90.07", "12.8")]
    checks = {r.check: r.result for r in cross_node(rows)}
    assert checks == {"same-driver-version": PASS, "same-cuda-version": FAIL}
    assert {r.result for r in cross_node([Row("matmul", PASS)])} == {SKIP}


def test_failing_nodes_in_order():
    rows = [
        Row("a", FAIL, node="n2"),
        Row("b", PASS, node="n1"),
        Row("c", FAIL, node="n3"),
        Row("d", FAIL, node="n2"),
    ]
    assert failing_nodes(rows) == ["n2", "n3"]


def test_table_columns_align():
    text = table(
        [Row("xid", PASS, "no entries", "pod-a", "node-1"), Row("matmul", FAIL, "slow", "p", "n")]
    )
    lines = text.splitlines()
    assert lines[0].split() == ["POD", "NODE", "CHECK", "RESULT", "DETAIL"]
    assert lines[1].index("xid") == lines[2].index("matmul") == lines[0].index("CHECK")


def test_json_round_trip():
    row = Row("allreduce", PASS, "x", "p", "n", {"busbw_gbps": 1.5})
    assert Row.from_json(row.to_json()) == row
