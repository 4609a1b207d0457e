"""The Temporal server dies while a node workflow waits, and comes back on the same database
file and port: the workflow completes, each side effect once. The worker and the client
stay up through the outage (they reconnect on their own)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from catalog import labels
from tests.warden.conftest import FAST, Harness
from warden.devserver import DevServer
from warden.model import DEFINITE, NodeInput, Timings, node_workflow_id
from warden.workflows import NodeWorkflow


async def notice_sent(fleet, timeout_s: float = 60.0) -> None:
    """Wait until the workflow has notified the workload's owner: it now sleeps out the
    drain grace period, a durable timer on the server."""
    for _ in range(int(timeout_s / 0.05)):
        if fleet.events("WardenDrain-Notice"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no drain notice")


def test_a_node_workflow_completes_across_a_temporal_server_restart(tmp_path, fleet):
    db = str(tmp_path / "temporal.db")  # this test's own server, port and database file
    server = DevServer(db=db).start()
    timings = Timings(**{**vars(FAST), "drain_grace_s": 2.0})
    harness = Harness(server.address, fleet, timings)
    node = fleet.node_name(0)
    fleet.add_pod("scratch-0", "research", node, priority=labels.PRIORITY_PREEMPTIBLE, run="s")
    restarted: list[DevServer] = []

    async def body(h: Harness):
        handle = await h.client.start_workflow(
            NodeWorkflow.run,
            NodeInput(node, "respond", timings, DEFINITE, "XID 79"),
            id=node_workflow_id(node),
            task_queue=h.queue,
            task_timeout=timedelta(seconds=timings.workflow_task_timeout_s),
        )
        await notice_sent(fleet)
        assert await handle.query(NodeWorkflow.current_phase) == "notify"
        await asyncio.to_thread(server.stop, 0)  # SIGKILL: the server dies mid-workflow
        await asyncio.sleep(1.0)  # the worker's polls fail meanwhile
        again = DevServer(port=server.port, db=db)
        restarted.append(again)
        await asyncio.to_thread(again.start)
        return await asyncio.wait_for(handle.result(), 120)

    try:
        result = harness.run(body)
    finally:
        server.stop(0)
        for again in restarted:
            again.stop()
    assert result.outcome == "uncordoned", result
    assert result.actions[:4] == ["cordon", "inspect", "notify", "inspect"]
    assert fleet.counts("cordon") == {node: 1} and fleet.counts("reboot") == {node: 1}
    assert fleet.counts("evict") == {"research/scratch-0": 1}
    assert fleet.counts("uncordon") == {node: 1}
