"""NUMA mapping: pure CPU choice per worker, sysfs parsing, no-op on one node."""

from __future__ import annotations

import pytest

from driver.numa import cpus_for_worker, gpu_numa_node, parse_cpulist, pin_worker, read_numa_nodes

TWO = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
FOUR = {0: [0], 1: [1], 2: [2], 3: [3]}


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3", [0, 1, 2, 3]), ("0-1,8,10-11", [0, 1, 8, 10, 11]), ("5\n", [5]), ("", [])],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize(
    ("rank", "world", "nodes", "gpu_node", "cpus"),
    [
        (0, 8, {0: [0, 1]}, None, None),  # one NUMA node: leave affinity alone
        (0, 8, {}, None, None),  # sysfs reports none
        (0, 8, TWO, None, [0, 1, 2, 3]),  # contiguous blocks: ranks 0-3 on node 0
        (3, 8, TWO, None, [0, 1, 2, 3]),
        (4, 8, TWO, None, [4, 5, 6, 7]),
        (7, 8, TWO, None, [4, 5, 6, 7]),
        (0, 8, TWO, 1, [4, 5, 6, 7]),  # the GPU's NUMA node wins
        (5, 8, TWO, 0, [0, 1, 2, 3]),
        (1, 2, FOUR, None, [2]),  # fewer workers than nodes: spread out
        (2, 8, TWO, 9, [0, 1, 2, 3]),  # unknown GPU node: fall back to blocks
    ],
)
def test_cpus_for_worker(rank, world, nodes, gpu_node, cpus):
    assert cpus_for_worker(rank, world, nodes, gpu_node) == cpus


def test_read_numa_nodes_and_gpu_node(tmp_path):
    for node, cpulist in ((0, "0-3\n"), (1, "4-7\n")):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpulist)
    (tmp_path / "possible").write_text("0-1\n")
    assert read_numa_nodes(tmp_path) == TWO
    assert read_numa_nodes(tmp_path / "missing") == {}
    pci = tmp_path / "pci" / "0000:8a:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    assert gpu_numa_node("0000:8A:00.0", tmp_path / "pci") == 1
    (pci / "numa_node").write_text("-1\n")
    assert gpu_numa_node("0000:8a:00.0", tmp_path / "pci") is None
    assert gpu_numa_node("0000:00:00.0", tmp_path / "pci") is None


def test_pin_is_a_no_op_on_this_single_node_machine():
    if len(read_numa_nodes()) > 1:
        pytest.skip("this machine has several NUMA nodes")
    assert pin_worker(0, 2) is None
