"""warden.starters on the real Temporal dev server: a persistent NCCL straggler starts its
node's workflow as an ambiguous finding (node check first); one workflow per node."""

from __future__ import annotations

import pytest

from warden.model import NodeResult, node_workflow_id
from warden.starters import report_stragglers, straggler_reasons

FINDING = {"rank": 12, "node": "", "pod": "big-worker-1", "persistent": 1, "windows": 10,
           "straggler_windows": 9, "delay_us": 31250.0, "since": "2026-12-01 14:19:00",
           "until": "2026-12-01 14:24:00"}  # fmt: skip


def test_reasons_one_per_node_persistent_only():
    other = {**FINDING, "rank": 13}
    passing = {**FINDING, "rank": 40, "node": "n2", "persistent": 0}
    reasons = straggler_reasons([{**FINDING, "node": "n1"}, {**other, "node": "n1"}, passing])
    assert list(reasons) == ["n1"]
    assert reasons["n1"].startswith("NCCL straggler: rank 12 (big-worker-1) last in 9/10 windows")
    assert "31.2 ms behind the median rank" in reasons["n1"] and "rank 13" in reasons["n1"]


@pytest.mark.parametrize(
    ("verdict", "outcome"), [("succeeded", "cleared"), ("failed", "uncordoned")]
)
def test_straggler_runs_the_node_check(harness, verdict, outcome):
    fleet = harness.fleet
    node = fleet.node_name(3)
    fleet.set_outcome(node, "check", verdict)
    finding = {**FINDING, "node": node}

    async def body(h):
        first = await report_stragglers(h.client, [finding], h.queue, h.timings)
        again = await report_stragglers(h.client, [finding], h.queue, h.timings)
        handle = h.client.get_workflow_handle(node_workflow_id(node), result_type=NodeResult)
        result = await handle.result()
        return first, again, result

    first, again, result = harness.run(body)
    assert first == {node: True} and again == {node: False}  # one workflow per node
    assert result.outcome == outcome and result.actions[0] == f"check {verdict}"
    decision = [r for r in harness.sink.records if r.action in ("clear", "cordon")][0]
    assert "NCCL straggler: rank 12 (big-worker-1) last in 9/10 windows" in decision.reason
    assert sum(fleet.counts("cordon").values()) == (verdict == "failed")
