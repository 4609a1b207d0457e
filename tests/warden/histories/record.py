"""Record the periodic workflows' histories that `tests/warden/test_replay.py` replays.

    .venv/bin/python -m tests.warden.histories.record      # writes tests/warden/histories/*.json

Each of `SweepWorkflow`, `KeepWorkflow` and `StragglerWorkflow` runs three rounds against
the Temporal dev server and the in-memory fake cluster: the first round fails (a 403, or a
store error) and is reported, the second ends the run with continue-as-new
(`sweeps_per_run` 2), the third completes it. Both runs of each chain are written. The
files were recorded with the loops as they were before `warden.loops.periodic`; replaying
them proves a workflow running when a worker is upgraded goes on replaying. Re-record only
when a change breaks replay on purpose (and say so in docs/warden.md's upgrade notes).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import Client

from tests.warden.conftest import FAST, settings
from warden.activities import WardenActivities
from warden.devserver import DevServer
from warden.fakefleet import FakeCluster
from warden.model import KeepInput, StragglerInput, SweepInput, Timings
from warden.stragglers import StragglerSweep
from warden.telemetry import MemorySink
from warden.worker import build_worker
from warden.workflows import KeepWorkflow, StragglerWorkflow, SweepWorkflow

HERE = Path(__file__).resolve().parent
PERIODS = {"sweep_period_s": 0.05, "keep_period_s": 0.05, "straggler_period_s": 0.05}
TIMINGS = Timings(**{**vars(FAST), "sweeps_per_run": 2, "retry_max_attempts": 1, **PERIODS})


class FailsOnce:
    """A straggler store whose first query fails; then no runs are active."""

    def __init__(self):
        self.calls = 0

    def query(self, sql: str, params: dict | None = None) -> list[dict]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("store broke")
        return []


async def chain(client: Client, name: str, run, inp, queue: str) -> None:
    """Run `run(inp)` to completion and write the history of each of its runs."""
    workflow_id = f"replay-{name}-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(run, inp, id=workflow_id, task_queue=queue)
    await handle.result()
    first = client.get_workflow_handle(workflow_id, run_id=handle.first_execution_run_id)
    for index, h in enumerate([first, client.get_workflow_handle(workflow_id)]):
        history = await h.fetch_history()
        (HERE / f"{name}-{index}.json").write_text(history.to_json())


async def main() -> None:
    server = DevServer().start()
    try:
        client = await Client.connect(server.address)
        fleet = FakeCluster.create(nodes=2, prefix="replay")
        fleet.inject("kube", "list_nodes", 403)  # the sweep's first round
        fleet.inject("kube", "list_pods", 403)  # the kept-nodes' first round
        acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, MemorySink(), settings(),
                                StragglerSweep(FailsOnce()))  # fmt: skip
        queue = f"replay-{uuid.uuid4().hex[:8]}"
        async with build_worker(client, queue, acts, TIMINGS):
            await chain(client, "sweep", SweepWorkflow.run, SweepInput(TIMINGS, queue, 3), queue)
            await chain(client, "keep", KeepWorkflow.run, KeepInput(TIMINGS, 3), queue)
            inp = StragglerInput(TIMINGS, queue, 3)
            await chain(client, "stragglers", StragglerWorkflow.run, inp, queue)
    finally:
        server.stop(grace_s=0)


if __name__ == "__main__":
    asyncio.run(main())
