"""The Warden layer's check (docs/soak.md, `warden`): every fault injected into the fake
fleet was repaired by exactly one node workflow, which completed with the outcome its fault
calls for, and no workflow of a node or a stress test was left running.

    found = read(address, faults)            # in a process of its own (the Temporal client's
                                             # threads stay out of the soak): `python -m
                                             # tests.soak.warden_check ADDRESS FAULTS.json`
    ok, text = verdict(faults, found, effects, problems)

`found` is one dict per workflow run the server lists: {"id", "run_id", "type", "status"
(`COMPLETED`, `RUNNING`, `TERMINATED`, ...), "outcome"} (a completed node workflow's
outcome; a stress test's `passed` or `failed`). A node workflow that ends `released` found
the node no longer cordoned and did nothing: the recovery sweep starts one when it read the
node cordoned a moment before the repair's uncordon (warden.workflows); it is counted, not
failed. `effects` are the fake fleet's side-effect counts per node.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter

WAIT_S = 120.0
"""How long the workflows in flight at the end may take to finish."""
RELEASED = "released"
EFFECTS = {
    "uncordoned": {"cordon": 1, "reboot": 1, "uncordon": 1},
    "cleared": {"cordon": 0, "reboot": 0, "uncordon": 0},
}
"""Side effects per node of each expected outcome: each exactly once, or never."""
STRESSED = {"uncordoned": 1, "cleared": 0}
"""Stress-test workflows per node of each expected outcome."""
BAD_ENDS = ("FAILED", "TIMED_OUT", "CANCELED")


def node_id(node: str) -> str:
    return f"node-{node}"  # warden.model.node_workflow_id, without importing Warden here


def by_id(found: list[dict]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for run in found:
        runs.setdefault(run["id"], []).append(run)
    return runs


def settled(faults: list[dict], found: list[dict]) -> bool:
    """Every fault's node has a workflow run, and no node or stress workflow runs."""
    runs = by_id(found)
    return all(node_id(f["node"]) in runs for f in faults) and not any(
        run["status"] == "RUNNING" for run in found if run["id"].startswith(("node-", "stress-"))
    )


def ended(run: dict) -> str:
    return f"{run['status']} {run.get('outcome') or ''}".strip()


def tally(counts: Counter) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "none"


def node_problems(fault: dict, runs: list[dict], stress: list[dict], effects: dict) -> list[str]:
    """What is wrong with one fault's node: its acting runs (all but `released` ones), its
    stress tests and its side effects."""
    node, expected = fault["node"], fault["expected"]
    acting = [run for run in runs if run.get("outcome") != RELEASED]
    problems = []
    if not acting:
        problems.append(f"{node} ({fault['kind']}): no workflow repaired it")
    elif len(acting) > 1:
        ends = ", ".join(ended(run) for run in acting)
        problems.append(f"{node} ({fault['kind']}): {len(acting)} workflows acted: {ends}")
    elif acting[0]["status"] != "COMPLETED":
        problems.append(f"{node} ({fault['kind']}): its workflow is {acting[0]['status']}")
    elif acting[0].get("outcome") != expected:
        problems.append(f"{node} ({fault['kind']}): outcome {acting[0].get('outcome')}, "
                        f"expected {expected}")  # fmt: skip
    passed = [run for run in stress if ended(run) == "COMPLETED passed"]
    if len(passed) != len(stress) or len(stress) != STRESSED[expected]:
        states = ", ".join(ended(run) for run in stress)
        problems.append(f"{node}: {len(stress)} stress tests ({states or 'none'}), expected "
                        f"{STRESSED[expected]} passed")  # fmt: skip
    for kind, count in EFFECTS[expected].items():
        if effects.get(kind, {}).get(node, 0) != count:
            problems.append(f"{node}: {kind} {effects.get(kind, {}).get(node, 0)} times, "
                            f"expected {count}")  # fmt: skip
    return problems


def verdict(
    faults: list[dict], found: list[dict], effects: dict, problems: list[str] = ()
) -> tuple[bool, str]:
    """(every fault's node repaired exactly once and nothing wrong, the check's text)."""
    problems, runs = list(problems), by_id(found)
    for fault in faults:
        node = fault["node"]
        problems += node_problems(fault, runs.get(node_id(node), []),
                                  runs.get(f"stress-{node}", []), effects)  # fmt: skip
    nodes = {fault["node"] for fault in faults}
    for wid in runs:
        if wid.startswith(("node-", "stress-")) and wid.split("-", 1)[1] not in nodes:
            problems.append(f"{wid}: a workflow for a node with no fault")
    others = [run for run in found if not run["id"].startswith(("node-", "stress-"))]
    problems += [f"{run['id']}: {run['status']}" for run in others if run["status"] in BAD_ENDS]
    outcomes = Counter(fault["expected"] for fault in faults)
    released = sum(run.get("outcome") == RELEASED for run in found)
    periodic = Counter(run["status"].lower().replace("_", "-") for run in others)
    text = (f"{len(faults)} faults on the fleet, each repaired by one workflow that completed "
            f"({tally(outcomes)}), side effects once each; {released} no-op recovery runs "
            f"({RELEASED}); periodic runs: {tally(periodic)}")  # fmt: skip
    if problems:
        text = f"{len(problems)} problems of {len(faults)} faults" + "".join(
            f"\n    {line}" for line in problems[:10]
        )
    return not problems, text


def execution(run) -> dict:
    status = run.status.name if run.status is not None else "UNKNOWN"
    return {"id": run.id, "run_id": run.run_id, "type": run.workflow_type, "status": status}


async def read(address: str, faults: list[dict], wait_s: float = WAIT_S) -> list[dict]:
    """Every workflow run on the server once `settled` (or `wait_s` passed), with the
    outcome of each completed node and stress workflow."""
    from temporalio.client import Client

    client = await Client.connect(address)
    deadline = time.monotonic() + wait_s
    while True:
        found = [execution(run) async for run in client.list_workflows()]
        if settled(faults, found) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    for run in found:
        if run["status"] == "COMPLETED" and run["type"] in ("NodeWorkflow", "StressTestWorkflow"):
            result = await client.get_workflow_handle(run["id"], run_id=run["run_id"]).result()
            passed = "passed" if result.get("passed") else "failed"  # a stress test's
            run["outcome"] = result.get("outcome", passed)
    return found


def main(argv: list[str]) -> int:
    address, path = argv
    faults = json.loads(open(path).read())
    print(json.dumps(asyncio.run(read(address, faults))))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # the Temporal client's threads can abort a normal interpreter shutdown
