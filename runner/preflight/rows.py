"""Check results: one row per (pod, node, check), the table, and cross-node consistency.

Every check returns `Row`s with result PASS, WARN, FAIL or SKIP. The functions here are
pure: they format, rank and compare rows; nothing runs a check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
ORDER = {SKIP: 0, PASS: 1, WARN: 2, FAIL: 3}
NO_GPU = "no GPU"


@dataclass(frozen=True)
class Row:
    """One check's verdict on one pod."""

    check: str
    """check name, e.g. `xid`, `matmul`, `allreduce`"""
    result: str
    """PASS, WARN, FAIL or SKIP"""
    detail: str = ""
    """one line: the figure measured, what failed, or why it was skipped"""
    pod: str = ""
    """pod (or host) the check ran in"""
    node: str = ""
    """Kubernetes node (or host name) under the pod"""
    data: dict | None = None
    """machine-readable figures (versions, bandwidths) for cross-node checks"""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Row:
        return Row(**json.loads(text))


def worst(results: Iterable[str]) -> str:
    """The most severe of the results (SKIP when there are none)."""
    return max(results, key=ORDER.__getitem__, default=SKIP)


def placed(rows: Iterable[Row], pod: str, node: str) -> list[Row]:
    """The rows with pod and node filled in."""
    return [replace(r, pod=r.pod or pod, node=r.node or node) for r in rows]


def failed(rows: Iterable[Row]) -> bool:
    return any(r.result == FAIL for r in rows)


def failing_nodes(rows: Iterable[Row]) -> list[str]:
    """Nodes with at least one FAIL row, in first-seen order."""
    return list(dict.fromkeys(r.node for r in rows if r.result == FAIL and r.node))


def consistency(rows: list[Row], check: str, key: str) -> Row:
    """All nodes must report the same `data[key]` for `check` (e.g. driver version).

    The majority value is taken as right; nodes that differ are named.
    """
    seen: dict[str, str] = {}
    for row in rows:
        if row.check == check and row.data and row.data.get(key) is not None:
            seen.setdefault(row.node or row.pod, str(row.data[key]))
    name = f"same-{key.replace('_', '-')}"
    if not seen:
        return Row(name, SKIP, f"no node reported {key}")
    counts: dict[str, int] = {}
    for value in seen.values():
        counts[value] = counts.get(value, 0) + 1
    majority = max(counts, key=lambda v: (counts[v], v))
    odd = sorted(node for node, value in seen.items() if value != majority)
    if not odd:
        return Row(name, PASS, f"{majority} on {len(seen)} node(s)")
    named = ", ".join(f"{n}={seen[n]}" for n in odd)
    return Row(name, FAIL, f"{majority} on {len(seen) - len(odd)} node(s); differs: {named}")


def cross_node(rows: list[Row]) -> list[Row]:
    """Consistency rows across nodes: driver and CUDA versions."""
    return [
        consistency(rows, "nvidia-smi", "driver_version"),
        consistency(rows, "nvidia-smi", "cuda_version"),
    ]


COLUMNS = ("POD", "NODE", "CHECK", "RESULT", "DETAIL")


def table(rows: Iterable[Row]) -> str:
    """An aligned text table (pod, node, check, result, detail)."""
    cells = [COLUMNS] + [(r.pod or "-", r.node or "-", r.check, r.result, r.detail) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for c in cells:
        head = "  ".join(text.ljust(width) for text, width in zip(c, widths, strict=False))
        lines.append(f"{head}  {c[-1]}".rstrip())
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    counts = {k: sum(r.result == k for r in rows) for k in (PASS, WARN, FAIL, SKIP)}
    return ", ".join(f"{n} {k}" for k, n in counts.items())
