"""Resource requests of a run: parse CPU and memory quantities and check they fit a node.

Pure functions over a RunSpec; each problem is one `InputError` naming the file and field (or
the flag). Used by `runner.sizing` (for `runner.resolve`) once it knows the node the pods land on.

    cpus = cpu_request(spec, "cpus")          # 80.0, or None when not given
    check_fits(spec, ("cpus", "memory"), cpus, memory, node_cpu, node_memory, "H200")
"""

from __future__ import annotations

import math

from catalog.quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_cpu
from runner.runfile import shown
from runner.spec_schema import RunSpec

MAX_CPUS = 10**5  # far above any node: a typo, not a request
MAX_BYTES = 2**60
MIN_CPU = 0.001  # 1m, Kubernetes' finest CPU unit


def _finite(spec: RunSpec, name: str, value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise spec.error(name, f"{shown(value)} is not a quantity (e.g. 8, 500m, 512Gi)")


def cpu_request(spec: RunSpec, name: str) -> float | None:
    """Cores of the CPU field `name` (`cpus`, `head_cpus`), or None when unset."""
    value = getattr(spec, name)
    if value is None:
        return None
    _finite(spec, name, value)
    try:
        cores = parse_cpu(value)
    except (QuantityError, ValueError, OverflowError) as err:
        raise spec.error(name, str(err)) from None
    if cores > MAX_CPUS:
        raise spec.error(name, f"{shown(value)} is more CPUs than any node has")
    if cores < MIN_CPU:
        raise spec.error(name, f"{shown(value)} is below the smallest CPU request, 1m")
    return cores


def bytes_request(spec: RunSpec, name: str) -> int | None:
    """Bytes of the memory field `name` (`memory`, `shm`, `head_memory`), or None when unset."""
    value = getattr(spec, name)
    if value is None:
        return None
    _finite(spec, name, value)
    try:
        count = parse_bytes(value)
    except (QuantityError, ValueError, OverflowError) as err:
        raise spec.error(name, str(err)) from None
    if count > MAX_BYTES:
        raise spec.error(name, f"{shown(value)} is more memory than any node has")
    if count <= 0:
        raise spec.error(name, f"{shown(value)} must be more than 0")
    return count


def check_fits(
    spec: RunSpec,
    fields: tuple[str, str],
    cpus: float,
    memory: int,
    node_cpu: float,
    node_memory: int,
    node: str,
) -> None:
    """Refuse a pod whose CPU or memory exceeds what one `node` node can allocate."""
    if cpus > node_cpu:
        raise spec.error(
            fields[0],
            f"{format_cpu(cpus)} CPUs exceed the {format_cpu(node_cpu)} "
            f"allocatable on one {node} node",
        )
    if memory > node_memory:
        raise spec.error(
            fields[1],
            f"{format_bytes(memory)} exceeds the {format_bytes(node_memory)} "
            f"allocatable on one {node} node",
        )
