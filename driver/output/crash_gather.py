"""What every node of a failed run holds for its crash bundle, gathered through Ray.

A multi-pod run's ranks write their flight recorder dumps (the NCCL watchdog's) and their
log files on their own pods' disks, which the driver cannot read. `gather(output_dir)` runs
`node_evidence` once on every live Ray node but the driver's (a task pinned to the node,
no CPU asked) and returns what each found: the dumps, read on the node with
observability.flight_recorder's loader (JSON, or a pickle of plain data; never a class), as
JSON-able dicts; the tails of the run's log files; and the node's kernel log when the pod
may read it (`dmesg`, else `journalctl -k`). Dumps read are moved aside on the node
(`flight-recorder/collected/`), so the next failure starts clean. Nodes that do not
answer within `timeout_s` are named in the result.

    found = gather("/home/ray/outputs/research/tiny-lm")   # [{"node", "dumps", ...}, ...]
"""

from __future__ import annotations

import os
from pathlib import Path

KERNEL_LINES = 5000
LOG_TAIL_LINES = 200
LOG_TAIL_BYTES = 1 << 20


def tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `lines` whole lines of a file (read from its last `max_bytes`)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        text = text.split("\n", 1)[-1]
    return "\n".join(text.splitlines()[-lines:]) + ("\n" if text else "")


def kernel_log() -> tuple[str | None, str]:
    """This node's kernel log (its last KERNEL_LINES lines) and its source, or (None, why)."""
    from observability import kernel_log as kernel

    return kernel.read(KERNEL_LINES)


def take_dumps(output_dir: Path) -> tuple[dict[int, dict], list[str]]:
    """The flight recorder dumps under `output_dir`, moved aside once read."""
    from observability import flight_recorder as fr

    source = Path(output_dir) / fr.DUMP_DIR
    if not source.is_dir():
        return {}, []
    dumps, errors = fr.load_dir(source)
    kept = source / "collected"
    kept.mkdir(exist_ok=True)
    for path in source.glob(f"{fr.PREFIX}*"):
        path.rename(kept / path.name)
    return dumps, errors


def node_evidence(output_dir: str, take: bool = True) -> dict:
    """What this node holds of the run (see the module docstring)."""
    from driver.output.logs import where_am_i
    from observability.logs import LOG_DIR

    out = {"node": where_am_i()["node"], "pod": where_am_i()["pod"], "pid": os.getpid()}
    dumps, errors = take_dumps(Path(output_dir)) if take else ({}, [])
    out["dumps"] = {str(rank): dump for rank, dump in dumps.items()}
    out["dump_errors"] = errors
    logs = Path(output_dir) / LOG_DIR
    out["logs"] = {p.name: tail(p) for p in sorted(logs.glob("*.jsonl"))} if logs.is_dir() else {}
    out["kernel"], out["kernel_source"] = kernel_log()
    return out


def gather(output_dir: str, timeout_s: float = 60.0) -> tuple[list[dict], list[str]]:
    """(each other live node's evidence, the nodes that did not answer). Never raises:
    a failure becomes a line in the second list."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            return [], []
        here = ray.get_runtime_context().get_node_id()
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
        task = ray.remote(num_cpus=0, max_retries=0)(node_evidence)
        refs = {
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(output_dir): n
            for n in nodes
        }
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    except Exception as err:  # Ray already down, or no Ray at all
        return [], [f"nodes not asked: {type(err).__name__}: {err}"]
    found, missing = [], []
    for ref in ready:
        try:
            found.append(ray.get(ref))
        except Exception as err:
            missing.append(f"{refs[ref].get('NodeManagerAddress', '?')}: {type(err).__name__}")
    missing += [
        f"{refs[ref].get('NodeManagerAddress', '?')}: no answer in {timeout_s:g} s" for ref in late
    ]
    for ref in late:
        ray.cancel(ref, force=True)
    return found, missing
