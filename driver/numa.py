"""NUMA affinity for training workers: which CPUs a worker should run on, and pinning.

`cpus_for_worker` is the pure mapping (table-tested); `read_numa_nodes` and
`gpu_numa_node` read sysfs; `pin_worker` applies `os.sched_setaffinity` and is a no-op
where the node reports a single NUMA node (or none). Check a machine with
`python -m driver.numa`.
"""

from __future__ import annotations

import os
from pathlib import Path

SYS_NODES = Path("/sys/devices/system/node")
SYS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> list[int]:
    """`0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def read_numa_nodes(root: Path = SYS_NODES) -> dict[int, list[int]]:
    """CPUs of each NUMA node the kernel reports; empty where sysfs has no nodes."""
    nodes: dict[int, list[int]] = {}
    if not root.is_dir():
        return nodes
    for entry in sorted(root.glob("node[0-9]*")):
        cpulist = entry / "cpulist"
        if cpulist.is_file():
            nodes[int(entry.name[4:])] = parse_cpulist(cpulist.read_text())
    return {node: cpus for node, cpus in nodes.items() if cpus}


def gpu_numa_node(pci_bus_id: str, root: Path = SYS_PCI) -> int | None:
    """NUMA node of a PCI device (`0000:8a:00.0`), or None when unknown (-1 or missing)."""
    path = root / pci_bus_id.lower() / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def cpus_for_worker(
    local_rank: int,
    local_world_size: int,
    numa_nodes: dict[int, list[int]],
    gpu_node: int | None = None,
) -> list[int] | None:
    """The CPUs worker `local_rank` of `local_world_size` on this node should use.

    None (leave affinity alone) with fewer than two NUMA nodes. A GPU worker whose GPU
    reports its NUMA node gets that node's CPUs; otherwise workers are spread over the
    nodes in contiguous blocks (ranks 0..k-1 on the first node, and so on).
    """
    if len(numa_nodes) < 2 or local_world_size < 1:
        return None
    if gpu_node is not None and gpu_node in numa_nodes:
        return list(numa_nodes[gpu_node])
    ordered = sorted(numa_nodes)
    index = min(local_rank * len(ordered) // local_world_size, len(ordered) - 1)
    return list(numa_nodes[ordered[index]])


def pin_worker(local_rank: int, local_world_size: int, gpu_pci_bus_id: str | None = None):
    """Pin this process to its NUMA node's CPUs; returns the CPUs, or None when untouched."""
    gpu_node = gpu_numa_node(gpu_pci_bus_id) if gpu_pci_bus_id else None
    cpus = cpus_for_worker(local_rank, local_world_size, read_numa_nodes(), gpu_node)
    if cpus is None:
        return None
    allowed = os.sched_getaffinity(0)
    cpus = [cpu for cpu in cpus if cpu in allowed] or sorted(allowed)
    os.sched_setaffinity(0, cpus)
    return cpus


def main() -> None:
    """Print this machine's NUMA nodes and where 8 workers would be pinned."""
    nodes = read_numa_nodes()
    print(f"numa nodes: { {node: len(cpus) for node, cpus in nodes.items()} }")
    for rank in range(8):
        cpus = cpus_for_worker(rank, 8, nodes)
        print(f"local rank {rank}: {'unpinned' if cpus is None else f'{len(cpus)} cpus'}")


if __name__ == "__main__":
    main()
