"""Two Warden replicas at once: two workers (own connections, own activities over the same
cluster) on one task queue, each starting the sweep as a worker does at start-up. Each
faulty node is handled exactly once: one cordon, one reboot, one Job, one uncordon, one
remediation id, although both replicas run activities and sweeps keep dispatching while
the repairs run."""

from __future__ import annotations

import asyncio

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import WorkflowAlreadyStartedError

from tests.warden.conftest import FAST, settings
from warden.activities import WardenActivities
from warden.control import NODE_WORKFLOW, node_start_options
from warden.model import DEFINITE, NodeInput, Timings
from warden.telemetry import MemorySink
from warden.worker import build_worker, start_sweep

NODES = 6


def replica(client: Client, queue: str, fleet, timings: Timings):
    sink = MemorySink()
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, sink, settings())
    return build_worker(client, queue, acts, timings), sink


async def repaired(fleet, nodes: list[str], timeout_s: float = 90.0) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if set(fleet.counts("uncordon")) == set(nodes):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not all repaired: {fleet.counts('uncordon')}")


def test_two_replicas_handle_each_node_exactly_once(temporal_address, fleet):
    timings = Timings(**{**vars(FAST), "sweep_period_s": 0.3})
    queue = f"warden-replicas-{fleet.prefix}"
    fleet.add_nodes(NODES - 4)  # the fixture's four, and two more
    nodes = [fleet.node_name(i) for i in range(NODES)]
    for node in nodes:
        fleet.set_metrics(node, xids=[79])

    async def body():
        clients = [await Client.connect(temporal_address) for _ in range(2)]
        (worker_a, sink_a), (worker_b, sink_b) = (
            replica(c, queue, fleet, timings) for c in clients
        )
        async with worker_a, worker_b:
            first = await start_sweep(clients[0], queue, queue, timings, sweeps=20)
            await asyncio.sleep(0.5)  # replica A's sweep has started repairs
            second = await start_sweep(clients[1], queue, queue, timings, sweeps=5)
            await repaired(fleet, nodes)
            swept = await second.result()  # sweeps went on while the repairs ran
            old = clients[0].get_workflow_handle(first.id, run_id=first.result_run_id)
            replaced = (await old.describe()).status
        return swept, replaced, sink_a.records, sink_b.records

    swept, replaced, records_a, records_b = asyncio.run(body())
    assert replaced == WorkflowExecutionStatus.TERMINATED  # one sweep per cluster
    assert swept.already_running > 0  # later sweeps found the repairs running: left alone
    assert records_a and records_b  # both replicas acted
    for kind in ("cordon", "reboot", "uncordon"):
        assert fleet.counts(kind) == {node: 1 for node in nodes}, kind
    assert sorted(fleet.counts("job").values()) == [1] * NODES  # one diag Job per node
    records = records_a + records_b
    for node in nodes:
        ids = {r.remediation_id for r in records if r.node == node}
        assert len(ids) == 1, (node, ids)  # one remediation
        actions = sorted(r.action for r in records if r.node == node)
        assert actions == sorted(["cordon", "reboot", "diag", "diag-passed", "uncordon"])


def test_two_replicas_starting_one_nodes_workflow_at_once_start_it_once(temporal_address, fleet):
    """The dispatch start options (conflict policy FAIL): the second start is refused, the
    running remediation is never terminated and started again."""
    queue = f"warden-race-{fleet.prefix}"
    node = fleet.node_name(0)

    async def body():
        clients = [await Client.connect(temporal_address) for _ in range(2)]
        inp = NodeInput(node, "respond", FAST, DEFINITE, "XID 79")

        async def start(client: Client) -> str:
            try:
                handle = await client.start_workflow(
                    NODE_WORKFLOW, inp, **node_start_options(node, queue, FAST)
                )
            except WorkflowAlreadyStartedError:
                return "refused"
            return handle.result_run_id or "started"

        outcomes = await asyncio.gather(*(start(c) for c in clients))
        again = await start(clients[0])  # a later sweep, while it runs
        async with replica(clients[0], queue, fleet, FAST)[0]:
            result = await clients[0].get_workflow_handle(f"node-{node}").result()
        return outcomes, again, result

    outcomes, again, result = asyncio.run(body())
    assert sorted(o == "refused" for o in outcomes) == [False, True]
    assert again == "refused"
    assert result["outcome"] == "uncordoned"
    assert fleet.counts("cordon") == {node: 1} and fleet.counts("reboot") == {node: 1}
